#!/usr/bin/env bash
# Session 21 call 8: timing-only probes of main (bytes differ by design): noload (no input
# copy: the math and the stores on whatever the stages hold) and nomath (session 19's: the
# copies and the stores, no block math), plain rows, 5 passes.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD NVFP4_AOT_SHAPES=$PWD/tests/data/shapes.json
date -u
QCOMPARE_PLAIN_ONLY=1 timeout 300 python3 scratch/qcompare.py --passes 5 --json "$OUT/compare.json" base=scratch/base_art \
  noload=scratch/noload nomath=scratch/nomath 2>&1 | tee "$OUT/compare.txt"
date -u
cd "$OUT" && tar czf ../out.tgz . && rm -rf ./* && mv ../out.tgz .
