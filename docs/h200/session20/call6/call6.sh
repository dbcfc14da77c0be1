#!/usr/bin/env bash
# Session 20 call 6: pre vs g1 vs main again, 5 alternating passes (replay).
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
date -u
timeout 300 python3 scratch/qcompare.py --passes 5 --json "$OUT/compare.json" base=scratch/base_art \
  pre=scratch/pre g1=scratch/g1 2>&1 | tee "$OUT/compare.txt"
date -u
