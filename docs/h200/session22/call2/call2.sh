#!/usr/bin/env bash
# Session 22 call 2: fat (one CTA of 8 warps an SM, registers up to 255: 128 used) and fati4
# (the same with INTERLEAVE 4: 156 registers): replay of the plain rows vs main.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD NVFP4_AOT_SHAPES=$PWD/tests/data/shapes.json
date -u
QCOMPARE_PLAIN_ONLY=1 timeout 300 python3 scratch/qcompare.py --passes 3 --json "$OUT/compare.json" base=scratch/base_art \
  fat=scratch/fat fati4=scratch/fati4 2>&1 | tee "$OUT/compare.txt"
date -u
cd "$OUT" && tar czf ../out.tgz . && rm -rf ./* && mv ../out.tgz .
