#!/usr/bin/env bash
# Session 21 call 12: "fastm": the multiplier table from reciprocals taken before the PDL
# wait (Markstein's correction after g, the division only for g outside 2^-90..2^91) vs
# main and notable: replay, all rows; quantizer GPU tests of fastm (require-GPU).
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD NVFP4_AOT_SHAPES=$PWD/tests/data/shapes.json
date -u
timeout 240 python3 scratch/qcompare.py --passes 3 --json "$OUT/compare.json" base=scratch/base_art \
  fastm=scratch/fastm notable=scratch/notable 2>&1 | tee "$OUT/compare.txt"
export NVFP4_AOT_REQUIRE_GPU=1
NVFP4_AOT_ARTIFACTS=$PWD/scratch/fastm timeout 150 python3 -m pytest -q -p no:cacheprovider --tb=short tests/test_quantizer_gpu.py > "$OUT/tests_quantizer_fastm.log" 2>&1
echo "fastm tests exit $?"; grep FAILED "$OUT/tests_quantizer_fastm.log" | head; tail -1 "$OUT/tests_quantizer_fastm.log"
date -u
cd "$OUT" && tar czf ../out.tgz . && rm -rf ./* && mv ../out.tgz .
