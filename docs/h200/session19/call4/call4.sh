#!/usr/bin/env bash
# Session 19 call 4 (2026-12-04 14:27 UTC; source ../v2.diff, v2n baked as call 3's nosplit):
# v2 = even segments with main's store bounds (a unit runs exactly its lane columns: 4, 3, 2 or 1), v2n = v2 without the even split; then v2's quantizer GPU tests and memcheck.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD NVFP4_AOT_SHAPES=$PWD/tests/data/shapes.json
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 240 python3 scratch/qcompare.py --passes 3 --json "$OUT/compare.json" base=scratch/base_art \
  v2=scratch/v2_art v2n=scratch/v2n_art 2>&1 | tee "$OUT/compare.txt"
cp scratch/v2_art/* artifacts/
export NVFP4_AOT_REQUIRE_GPU=1
timeout 120 python3 -m pytest -q -p no:cacheprovider --tb=short tests/test_quantizer_gpu.py > "$OUT/tests_quantizer.log" 2>&1
echo "exit $?"; grep FAILED "$OUT/tests_quantizer.log" | head; tail -1 "$OUT/tests_quantizer.log"
NVFP4_AOT_QUANT_ROUTINGS=2 timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 \
  python3 -m pytest -q -p no:cacheprovider tests/test_quantizer_gpu.py \
  -k "contiguous or masked or unit_width or padding_rows or any_byte or T129-k160 or k1056 or T1-k32" > "$OUT/memcheck.log" 2>&1
echo "memcheck exit $?"; grep -E "SUMMARY|passed|failed" "$OUT/memcheck.log" | tail -2
date -u
cd "$OUT" && tar czf ../v2_out.tgz . && rm -rf ./* && mv ../v2_out.tgz .
