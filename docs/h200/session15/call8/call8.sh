#!/usr/bin/env bash
# session 15 call 8 (#16): compact3 = call 7's compact2 compiled once per form (plain,
# contiguous, masked; constexpr), so that no form's bookkeeping is in another's code;
# compact4 = compact3 with the masked form on the old per-scale-row units. Graph replay of
# both against the committed kernel; then, on compact3 (run from the tree with its
# artifacts: the tree's kernel source is compact3's), the quantizer GPU tests,
# memcheck + racecheck on its MoE tests, the torch / torch_ops / examples / JAX GPU tests
# (require-GPU), bench_quantize.py.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD NVFP4_AOT_SHAPES=$PWD/tests/data/shapes.json
date -u
echo "=== compare $(date -u +%T)"
timeout 100 python3 scratch/qcompare.py --passes 3 --json "$OUT/compare.json" base=artifacts \
  compact3=scratch/compact3/artifacts compact4=scratch/compact4/artifacts 2>&1 | tee "$OUT/compare.txt"
export NVFP4_AOT_ARTIFACTS=$PWD/scratch/compact3/artifacts NVFP4_AOT_REQUIRE_GPU=1
echo "=== quantizer GPU tests $(date -u +%T)"
timeout 100 python3 -m pytest -q -p no:cacheprovider --tb=short tests/test_quantizer_gpu.py > "$OUT/tests_quantizer.log" 2>&1
echo "exit $?"; grep -E "FAILED" "$OUT/tests_quantizer.log" | head -8; tail -1 "$OUT/tests_quantizer.log" | cut -c1-300
for tool in memcheck racecheck; do
  NVFP4_AOT_QUANT_ROUTINGS=2 timeout 90 compute-sanitizer --tool $tool --error-exitcode 9 \
    python3 -m pytest -q -p no:cacheprovider tests/test_quantizer_gpu.py \
    -k "contiguous or masked or padding_rows or T129-k160 or k1056" > "$OUT/${tool}.log" 2>&1
  echo "$tool exit $?"; grep -E "SUMMARY|passed|failed" "$OUT/${tool}.log" | tail -2
done
echo "=== torch, torch_ops, examples, JAX GPU tests $(date -u +%T)"
timeout 150 python3 -m pytest -q -rf -p no:cacheprovider tests/test_torch_gpu.py tests/test_torch_ops.py \
  tests/test_examples_gpu.py tests/test_jax_gpu.py > "$OUT/tests_more.log" 2>&1
echo "pytest exit code: $?"; grep FAILED "$OUT/tests_more.log" | head; tail -1 "$OUT/tests_more.log"
echo "=== bench_quantize $(date -u +%T)"
timeout 70 python3 bench/bench_quantize.py --json "$OUT/bench_quantize.json" > "$OUT/bench_quantize.txt" 2>&1
echo "exit $?"; cut -c1-140 "$OUT/bench_quantize.txt"
date -u
cd "$OUT" && tar czf ../call8_out.tgz . && rm -rf ./* && mv ../call8_out.tgz .
