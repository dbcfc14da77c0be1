#!/usr/bin/env bash
# Session 21 call 5: "halves": the first unit's second half copied after every warp's first
# half (after the multiplier table), its math started on the first half (2 CTAs of 8 warps;
# halves512: 1 CTA of 16) vs main: replay + bytes; quantizer GPU tests of both.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD NVFP4_AOT_SHAPES=$PWD/tests/data/shapes.json
date -u
timeout 240 python3 scratch/qcompare.py --passes 3 --json "$OUT/compare.json" base=scratch/base_art \
  halves=scratch/halves halves512=scratch/halves512 2>&1 | tee "$OUT/compare.txt"
export NVFP4_AOT_REQUIRE_GPU=1
for v in halves halves512; do
  NVFP4_AOT_ARTIFACTS=$PWD/scratch/$v timeout 150 python3 -m pytest -q -p no:cacheprovider --tb=short tests/test_quantizer_gpu.py > "$OUT/tests_quantizer_$v.log" 2>&1
  echo "$v tests exit $?"; grep FAILED "$OUT/tests_quantizer_$v.log" | head; tail -1 "$OUT/tests_quantizer_$v.log"
done
date -u
cd "$OUT" && tar czf ../out.tgz . && rm -rf ./* && mv ../out.tgz .
