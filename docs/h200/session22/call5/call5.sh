#!/usr/bin/env bash
# Session 22 call 5: scb2 (740) vs its two further cuts one at a time: scb2A (+ the halves'
# max as one swizzled max; 737), scb2B (+ no mask after the conversion; 736), both (scb3,
# 733), and main (760): replay of the plain rows, 5 passes, bytes.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD NVFP4_AOT_SHAPES=$PWD/tests/data/shapes.json
date -u
QCOMPARE_PLAIN_ONLY=1 timeout 400 python3 scratch/qcompare.py --passes 5 --json "$OUT/compare.json" base=scratch/base_art \
  scb2=scratch/scb2 scb2A=scratch/scb2A scb2B=scratch/scb2B scb3=scratch/scb3 2>&1 | tee "$OUT/compare.txt"
date -u
cd "$OUT" && tar czf ../out.tgz . && rm -rf ./* && mv ../out.tgz .
