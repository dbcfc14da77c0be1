#!/usr/bin/env bash
# session 17 call 17 (#16): call 16's replay comparison (qcompare.py was not in the tree
# then): hoist vs the committed quantizer, alternating passes.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"; rm -rf "$OUT"/e64t2048* "$OUT"/table_* 2>/dev/null
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
date -u
timeout 150 python3 scratch/qcompare.py --passes 5 --json "$OUT/compare.json" base=artifacts \
  hoist=scratch/hoist/artifacts 2>&1 | tee "$OUT/compare.txt"
date -u
