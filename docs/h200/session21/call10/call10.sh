#!/usr/bin/env bash
# Session 21 call 10: timing-only probes of main, plain rows, 5 passes: noload (call 8's),
# notable (session 19's: no multiplier table, no CTA barrier), and both (the math and the
# stores alone: no input copy, no table).
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD NVFP4_AOT_SHAPES=$PWD/tests/data/shapes.json
date -u
QCOMPARE_PLAIN_ONLY=1 timeout 300 python3 scratch/qcompare.py --passes 5 --json "$OUT/compare.json" base=scratch/base_art \
  noload=scratch/noload notable=scratch/notable noload_notable=scratch/nlnt 2>&1 | tee "$OUT/compare.txt"
date -u
