#!/usr/bin/env bash
# Session 22 call 9: the committed kernel (x1) against its schedule variants: none / A (the
# halves' max as one swizzled max) / B (no mask after the conversion) / AB (both), each with
# the committed block-step order and p_d, p_f, p_a's (x1-x16, in that order): replay of the
# plain rows vs main (f5ba190), 3 passes.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD NVFP4_AOT_SHAPES=$PWD/tests/data/shapes.json
date -u
QCOMPARE_PLAIN_ONLY=1 timeout 500 python3 scratch/qcompare.py --passes 3 --json "$OUT/compare.json" base=scratch/base_art x1=scratch/x1 x2=scratch/x2 x3=scratch/x3 x4=scratch/x4 x5=scratch/x5 x6=scratch/x6 x7=scratch/x7 x8=scratch/x8 x9=scratch/x9 x10=scratch/x10 x11=scratch/x11 x12=scratch/x12 x13=scratch/x13 x14=scratch/x14 x15=scratch/x15 x16=scratch/x16 2>&1 | tee "$OUT/compare.txt"
date -u
cd "$OUT" && tar czf ../out.tgz . && rm -rf ./* && mv ../out.tgz .
