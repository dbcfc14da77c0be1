#!/usr/bin/env bash
# session 15 call 4 (#16): around call 3's best (tp2: short segments + two-phase pairs):
# tp42 = the scale chains of all 4 of a lane's blocks first, then the element math two at
# a time; tp2ns = tp2 without the short-segment paths. Graph replay against the committed
# kernel (base) in alternating passes, bytes compared with base's.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
date -u
timeout 200 python3 scratch/qcompare.py --passes 4 --json "$OUT/compare.json" base=scratch/base/artifacts \
  tp2=scratch/tp2/artifacts tp42=scratch/tp42/artifacts tp2ns=scratch/tp2ns/artifacts 2>&1 | tee "$OUT/compare.txt"
date -u
cd "$OUT" && tar czf ../call4_out.tgz . && rm -rf ./* && mv ../call4_out.tgz .
