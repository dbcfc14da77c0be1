#!/usr/bin/env bash
# Session 19 call 2 (run 2026-12-04 14:17 UTC): even segments (a row's lane columns spread
# evenly over its segments, k = 7168: 96/128/96/128 blocks; a 3-block-a-lane path; per-unit
# store bounds; source: ../even.diff) vs main's quantizer. From a checkout of the variant
# with its sm_90a quantizer baked into artifacts/ (../bake_one.py), scratch/qcompare.py =
# docs/h200/session15/qcompare.py + docs/h200/session16/qcompare_widths.diff and
# scratch/base_art = main's artifacts/. Replay comparison, then the variant's quantizer GPU
# tests, memcheck + racecheck, torch / torch_ops / examples / JAX GPU tests, bench_quantize.py.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD NVFP4_AOT_SHAPES=$PWD/tests/data/shapes.json
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 150 python3 scratch/qcompare.py --passes 3 --json "$OUT/compare.json" base=scratch/base_art \
  even=artifacts 2>&1 | tee "$OUT/compare.txt"
export NVFP4_AOT_REQUIRE_GPU=1
timeout 150 python3 -m pytest -q -p no:cacheprovider --tb=short tests/test_quantizer_gpu.py > "$OUT/tests_quantizer.log" 2>&1
echo "exit $?"; grep FAILED "$OUT/tests_quantizer.log" | head; tail -1 "$OUT/tests_quantizer.log"
for tool in memcheck racecheck; do
  NVFP4_AOT_QUANT_ROUTINGS=2 timeout 120 compute-sanitizer --tool $tool --error-exitcode 9 \
    python3 -m pytest -q -p no:cacheprovider tests/test_quantizer_gpu.py \
    -k "contiguous or masked or unit_width or padding_rows or any_byte or T129-k160 or k1056 or T1-k32" > "$OUT/${tool}.log" 2>&1
  echo "$tool exit $?"; grep -E "SUMMARY|passed|failed" "$OUT/${tool}.log" | tail -2
done
timeout 150 python3 -m pytest -q -rf -p no:cacheprovider tests/test_torch_gpu.py tests/test_torch_ops.py \
  tests/test_examples_gpu.py tests/test_jax_gpu.py > "$OUT/tests_more.log" 2>&1
echo "exit $?"; tail -1 "$OUT/tests_more.log"
unset NVFP4_AOT_REQUIRE_GPU
timeout 90 python3 bench/bench_quantize.py --json "$OUT/bench_quantize.json" > "$OUT/bench_quantize.txt" 2>&1
echo "exit $?"; cut -c1-140 "$OUT/bench_quantize.txt"
date -u
cd "$OUT" && tar czf ../even_out.tgz . && rm -rf ./* && mv ../even_out.tgz .
