#!/usr/bin/env bash
# Session 22 call 4: fewer instructions a block: scb2 (scale byte: y / 6 as RN(y h + RN(y l)),
# NaN through the conversion; 740 a 4-block path), scb3 (+ the halves' max as one swizzled
# HMNMX2, no mask after the conversion; 733), scb5 (+ padding columns zeroed once a unit,
# the scale store's compare without a select; 730) vs main (760): replay, all rows, bytes;
# quantizer GPU tests of scb5 (require-GPU).
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD NVFP4_AOT_SHAPES=$PWD/tests/data/shapes.json
date -u
timeout 400 python3 scratch/qcompare.py --passes 3 --json "$OUT/compare.json" base=scratch/base_art \
  scb2=scratch/scb2 scb3=scratch/scb3 scb5=scratch/scb5 2>&1 | tee "$OUT/compare.txt"
export NVFP4_AOT_REQUIRE_GPU=1
NVFP4_AOT_ARTIFACTS=$PWD/scratch/scb5 timeout 150 python3 -m pytest -q -p no:cacheprovider --tb=short tests/test_quantizer_gpu.py > "$OUT/tests_quantizer_scb5.log" 2>&1
echo "scb5 tests exit $?"; grep FAILED "$OUT/tests_quantizer_scb5.log" | head; tail -1 "$OUT/tests_quantizer_scb5.log"
date -u
cd "$OUT" && tar czf ../out.tgz . && rm -rf ./* && mv ../out.tgz .
