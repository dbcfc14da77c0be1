#!/usr/bin/env bash
# Session 21 call 15 (review): the slow multiplier path divides the v the reciprocal step
# already decoded (no second decode); quantizer GPU tests (require-GPU; g = 1e-30 and 3e37
# take the division) and replay vs the committed cubin, plain rows.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD NVFP4_AOT_SHAPES=$PWD/tests/data/shapes.json
date -u
NVFP4_AOT_REQUIRE_GPU=1 NVFP4_AOT_ARTIFACTS=$PWD/scratch/mend timeout 100 python3 -m pytest -q -p no:cacheprovider --tb=short tests/test_quantizer_gpu.py > "$OUT/tests_quantizer_mend.log" 2>&1
echo "mend tests exit $?"; grep FAILED "$OUT/tests_quantizer_mend.log" | head; tail -1 "$OUT/tests_quantizer_mend.log"
QCOMPARE_PLAIN_ONLY=1 timeout 80 python3 scratch/qcompare.py --passes 3 --json "$OUT/compare.json" base=scratch/base_art \
  mend=scratch/mend 2>&1 | tee "$OUT/compare.txt"
date -u
cd "$OUT" && tar czf ../out.tgz . && rm -rf ./* && mv ../out.tgz .
