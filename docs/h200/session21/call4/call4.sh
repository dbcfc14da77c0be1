#!/usr/bin/env bash
# Session 21 call 4: 24 warps an SM at 80 registers (spills 96-180 LDL/STL, mostly in the
# bookkeeping): 1 CTA of 768 or 2 of 384 threads, INTERLEAVE 2 or 1, widths by rule / 64.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD NVFP4_AOT_SHAPES=$PWD/tests/data/shapes.json
date -u
timeout 400 python3 scratch/qcompare.py --passes 3 --json "$OUT/compare.json" base=scratch/base_art \
  t768i2=scratch/t768c1i2 t768i1=scratch/t768c1i1 t384i2=scratch/t384c2i2 t384i1=scratch/t384c2i1 \
  t384i1w64=scratch/t384c2i1:64 t768i1w64=scratch/t768c1i1:64 2>&1 | tee "$OUT/compare.txt"
date -u
cd "$OUT" && tar czf ../out.tgz . && rm -rf ./* && mv ../out.tgz .
