#!/usr/bin/env bash
# Session 22 call 3: scb (the scale byte's NaN through the conversion: y capped at 3072 by a
# NaN-keeping min, no compare/select, no sign mask before the float32 max: 3 instructions
# fewer a block) vs main: replay, all rows, bytes; quantizer GPU tests of scb (require-GPU).
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD NVFP4_AOT_SHAPES=$PWD/tests/data/shapes.json
date -u
timeout 300 python3 scratch/qcompare.py --passes 3 --json "$OUT/compare.json" base=scratch/base_art \
  scb=scratch/scb 2>&1 | tee "$OUT/compare.txt"
export NVFP4_AOT_REQUIRE_GPU=1
NVFP4_AOT_ARTIFACTS=$PWD/scratch/scb timeout 200 python3 -m pytest -q -p no:cacheprovider --tb=short tests/test_quantizer_gpu.py > "$OUT/tests_quantizer_scb.log" 2>&1
echo "scb tests exit $?"; grep FAILED "$OUT/tests_quantizer_scb.log" | head; tail -1 "$OUT/tests_quantizer_scb.log"
date -u
cd "$OUT" && tar czf ../out.tgz . && rm -rf ./* && mv ../out.tgz .
