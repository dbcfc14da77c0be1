#!/usr/bin/env bash
# Session 21 call 14: "tbar2": call 11's tbar (the table's CTA barrier as an mbarrier
# waited on before a unit reads the table) on top of the committed table (ee1d465, base):
# replay, all rows; quantizer GPU tests of tbar2 (require-GPU).
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD NVFP4_AOT_SHAPES=$PWD/tests/data/shapes.json
date -u
timeout 150 python3 scratch/qcompare.py --passes 3 --json "$OUT/compare.json" base=scratch/base_art \
  tbar2=scratch/tbar2 2>&1 | tee "$OUT/compare.txt"
NVFP4_AOT_REQUIRE_GPU=1 NVFP4_AOT_ARTIFACTS=$PWD/scratch/tbar2 timeout 100 python3 -m pytest -q -p no:cacheprovider --tb=short tests/test_quantizer_gpu.py > "$OUT/tests_quantizer_tbar2.log" 2>&1
echo "tbar2 tests exit $?"; grep FAILED "$OUT/tests_quantizer_tbar2.log" | head; tail -1 "$OUT/tests_quantizer_tbar2.log"
date -u
cd "$OUT" && tar czf ../out.tgz . && rm -rf ./* && mv ../out.tgz .
