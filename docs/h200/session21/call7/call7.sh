#!/usr/bin/env bash
# Session 21 call 7: narrow units with more copies in flight a warp (stages of 2 KB x 4 at
# width 64, 1 KB x 4 / x 8 at width 32) vs main by its rule and forced to 64 / 32 (plain rows).
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD NVFP4_AOT_SHAPES=$PWD/tests/data/shapes.json
date -u
QCOMPARE_PLAIN_ONLY=1 timeout 300 python3 scratch/qcompare.py --passes 3 --json "$OUT/compare.json" base=scratch/base_art \
  base64=scratch/base_art:64 base32=scratch/base_art:32 n2k4w64=scratch/n2048s4:64 n1k4w32=scratch/n1024s4:32 \
  n1k8w32=scratch/n1024s8:32 2>&1 | tee "$OUT/compare.txt"
date -u
cd "$OUT" && tar czf ../out.tgz . && rm -rf ./* && mv ../out.tgz .
