#!/usr/bin/env bash
# session 16 call 5 (#16): where the padding zeroing goes. pad (call 4: after the CTA's
# multiplier table, before the first unit) made contiguous E=128 T=1 0.7 us slower;
# padend = the same after the warp's units; padnf = pad without the copy's proxy fence
# (diagnostic: does the fence wait for the padding stores?).
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
date -u
timeout 150 python3 scratch/qcompare.py --passes 5 --json "$OUT/compare.json" pad=scratch/pad/artifacts \
  padend=scratch/padend/artifacts padnf=scratch/padnf/artifacts 2>&1 | tee "$OUT/compare.txt"
date -u
cd "$OUT" && tar czf ../call5_out.tgz . && rm -rf ./* && mv ../call5_out.tgz .
