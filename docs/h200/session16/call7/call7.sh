#!/usr/bin/env bash
# session 16 call 7 (#16): guess = the committed kernel (85d93a2) with each lane's first
# index entry (index[u], the entry wherever a routing's offsets start at 0 and grow)
# loaded before the expert scan, so that its latency overlaps the counts' (decode-size
# contiguous runs: one dependent global load less before the first copy). qcompare.py is
# session 15's with the contiguous counts spread as capacity // E + (e < capacity % E):
# its "T = 1" row is now 8 experts of one row (was: all 128 empty). Replay vs committed;
# then, from guess's tree: quantizer GPU tests, memcheck + racecheck, torch / torch_ops /
# examples / JAX GPU tests (require-GPU).
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD NVFP4_AOT_SHAPES=$PWD/tests/data/shapes.json
date -u
timeout 150 python3 scratch/qcompare.py --passes 5 --json "$OUT/compare.json" base=artifacts \
  guess=scratch/guess/artifacts 2>&1 | tee "$OUT/compare.txt"
export NVFP4_AOT_ARTIFACTS=$PWD/scratch/guess/artifacts NVFP4_AOT_REQUIRE_GPU=1
cd scratch/guess
echo "=== guess: quantizer GPU tests $(date -u +%T)"
timeout 100 python3 -m pytest -q -p no:cacheprovider --tb=short tests/test_quantizer_gpu.py > "$OUT/tests_quantizer.log" 2>&1
echo "exit $?"; grep -E "FAILED" "$OUT/tests_quantizer.log" | head -8; tail -1 "$OUT/tests_quantizer.log" | cut -c1-300
for tool in memcheck racecheck; do
  NVFP4_AOT_QUANT_ROUTINGS=2 timeout 100 compute-sanitizer --tool $tool --error-exitcode 9 \
    python3 -m pytest -q -p no:cacheprovider tests/test_quantizer_gpu.py \
    -k "contiguous or masked or padding_rows or any_byte or T129-k160 or k1056 or T1-k32" > "$OUT/${tool}.log" 2>&1
  echo "$tool exit $?"; grep -E "SUMMARY|passed|failed" "$OUT/${tool}.log" | tail -2
done
cd ../..
echo "=== torch, torch_ops, examples, JAX GPU tests $(date -u +%T)"
timeout 150 python3 -m pytest -q -rf -p no:cacheprovider tests/test_torch_gpu.py tests/test_torch_ops.py \
  tests/test_examples_gpu.py tests/test_jax_gpu.py > "$OUT/tests_more.log" 2>&1
echo "pytest exit code: $?"; grep FAILED "$OUT/tests_more.log" | head; tail -1 "$OUT/tests_more.log"
date -u
cd "$OUT" && tar czf ../call7_out.tgz . && rm -rf ./* && mv ../call7_out.tgz .
