#!/usr/bin/env bash
# Session 19 call 3 (2026-12-04 14:25 UTC; sources ../v1.diff, nosplit = v1 with segment_start
# returning 32 * segment * ceil(lanes / segments), baked by ../bake_one.py): even segments with a 5-word description (v1: (first, end) packed in
# one word, the scale store bounded by (codes_end, end)) and the same kernel without the
# even split (nosplit: 128-block segments as main) against main's quantizer (base) and
# call 2's (even); then v1's quantizer GPU tests and memcheck.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD NVFP4_AOT_SHAPES=$PWD/tests/data/shapes.json
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 240 python3 scratch/qcompare.py --passes 3 --json "$OUT/compare.json" base=scratch/base_art \
  even=artifacts v1=scratch/v1_art nosplit=scratch/nosplit_art 2>&1 | tee "$OUT/compare.txt"
cp scratch/v1_art/* artifacts/
export NVFP4_AOT_REQUIRE_GPU=1
timeout 120 python3 -m pytest -q -p no:cacheprovider --tb=short tests/test_quantizer_gpu.py > "$OUT/tests_quantizer.log" 2>&1
echo "exit $?"; grep FAILED "$OUT/tests_quantizer.log" | head; tail -1 "$OUT/tests_quantizer.log"
NVFP4_AOT_QUANT_ROUTINGS=2 timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 \
  python3 -m pytest -q -p no:cacheprovider tests/test_quantizer_gpu.py \
  -k "contiguous or masked or unit_width or padding_rows or any_byte or T129-k160 or k1056 or T1-k32" > "$OUT/memcheck.log" 2>&1
echo "memcheck exit $?"; grep -E "SUMMARY|passed|failed" "$OUT/memcheck.log" | tail -2
date -u
cd "$OUT" && tar czf ../v1_out.tgz . && rm -rf ./* && mv ../v1_out.tgz .
