#!/usr/bin/env bash
# session 16 call 4 (#16): pad = the padding scale rows zeroed before the units (a warp a
# 512-byte atom, 16-byte stores; no padding units, no padding loop beside the token math)
# + call 1's lean. Graph replay vs tp2 (f62b81e) and base (committed); then, from pad's
# tree (its kernel source is pad's): quantizer GPU tests (+ scales at any byte address),
# memcheck + racecheck on the MoE / padding tests, torch / torch_ops / examples / JAX GPU
# tests (require-GPU), bench_quantize.py.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD NVFP4_AOT_SHAPES=$PWD/tests/data/shapes.json
date -u
echo "=== compare $(date -u +%T)"
timeout 150 python3 scratch/qcompare.py --passes 3 --json "$OUT/compare.json" tp2=scratch/tp2/artifacts \
  base=artifacts pad=scratch/pad/artifacts 2>&1 | tee "$OUT/compare.txt"
export NVFP4_AOT_ARTIFACTS=$PWD/scratch/pad/artifacts NVFP4_AOT_REQUIRE_GPU=1
cd scratch/pad
echo "=== pad: quantizer GPU tests $(date -u +%T)"
timeout 100 python3 -m pytest -q -p no:cacheprovider --tb=short tests/test_quantizer_gpu.py > "$OUT/tests_quantizer.log" 2>&1
echo "exit $?"; grep -E "FAILED" "$OUT/tests_quantizer.log" | head -8; tail -1 "$OUT/tests_quantizer.log" | cut -c1-300
for tool in memcheck racecheck; do
  NVFP4_AOT_QUANT_ROUTINGS=2 timeout 100 compute-sanitizer --tool $tool --error-exitcode 9 \
    python3 -m pytest -q -p no:cacheprovider tests/test_quantizer_gpu.py \
    -k "contiguous or masked or padding_rows or any_byte or T129-k160 or k1056" > "$OUT/${tool}.log" 2>&1
  echo "$tool exit $?"; grep -E "SUMMARY|passed|failed" "$OUT/${tool}.log" | tail -2
done
cd ../..
echo "=== torch, torch_ops, examples, JAX GPU tests $(date -u +%T)"
timeout 150 python3 -m pytest -q -rf -p no:cacheprovider tests/test_torch_gpu.py tests/test_torch_ops.py \
  tests/test_examples_gpu.py tests/test_jax_gpu.py > "$OUT/tests_more.log" 2>&1
echo "pytest exit code: $?"; grep FAILED "$OUT/tests_more.log" | head; tail -1 "$OUT/tests_more.log"
echo "=== bench_quantize $(date -u +%T)"
timeout 70 python3 bench/bench_quantize.py --json "$OUT/bench_quantize.json" > "$OUT/bench_quantize.txt" 2>&1
echo "exit $?"; cut -c1-140 "$OUT/bench_quantize.txt"
date -u
cd "$OUT" && tar czf ../call4_out.tgz . && rm -rf ./* && mv ../call4_out.tgz .
