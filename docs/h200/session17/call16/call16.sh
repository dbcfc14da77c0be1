#!/usr/bin/env bash
# session 17 call 16 (#16): hoist = the committed quantizer with the run's addresses and
# global scale read before the form's dispatch (which waits for the plan words), so that
# the run words' and the plan words' round trips overlap (was: one after the other).
# Replay vs the committed kernel (qcompare.py, NAME=ARTIFACTS[:WIDTH]); then hoist's
# quantizer GPU tests, memcheck + racecheck, torch / torch_ops / examples / JAX GPU tests.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"; rm -rf "$OUT"/e64t2048* "$OUT"/table_* 2>/dev/null
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD NVFP4_AOT_SHAPES=$PWD/tests/data/shapes.json
date -u
timeout 150 python3 scratch/qcompare.py --passes 4 --json "$OUT/compare.json" base=artifacts \
  hoist=scratch/hoist/artifacts 2>&1 | tee "$OUT/compare.txt"
export NVFP4_AOT_ARTIFACTS=$PWD/scratch/hoist/artifacts NVFP4_AOT_REQUIRE_GPU=1
echo "=== hoist: quantizer GPU tests $(date -u +%T)"
timeout 100 python3 -m pytest -q -p no:cacheprovider --tb=short tests/test_quantizer_gpu.py > "$OUT/tests_quantizer.log" 2>&1
echo "exit $?"; grep -E "FAILED" "$OUT/tests_quantizer.log" | head -8; tail -1 "$OUT/tests_quantizer.log" | cut -c1-300
for tool in memcheck racecheck; do
  NVFP4_AOT_QUANT_ROUTINGS=2 timeout 90 compute-sanitizer --tool $tool --error-exitcode 9 \
    python3 -m pytest -q -p no:cacheprovider tests/test_quantizer_gpu.py \
    -k "contiguous or masked or unit_width or padding_rows or any_byte or T129-k160 or k1056 or T1-k32" > "$OUT/${tool}.log" 2>&1
  echo "$tool exit $?"; grep -E "SUMMARY|passed|failed" "$OUT/${tool}.log" | tail -2
done
echo "=== torch, torch_ops, examples, JAX GPU tests $(date -u +%T)"
timeout 150 python3 -m pytest -q -rf -p no:cacheprovider tests/test_torch_gpu.py tests/test_torch_ops.py \
  tests/test_examples_gpu.py tests/test_jax_gpu.py > "$OUT/tests_more.log" 2>&1
echo "pytest exit code: $?"; grep FAILED "$OUT/tests_more.log" | head; tail -1 "$OUT/tests_more.log"
date -u
cd "$OUT" && tar czf ../call16_out.tgz . && rm -rf ./* && mv ../call16_out.tgz .
