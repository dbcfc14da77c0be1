#!/usr/bin/env bash
# Session 19 call 7 (timing only, bytes differ by design): what the committed quantizer's
# plain runs cost without their block math (nomath: no scale / code math, zero bytes
# stored; 56 registers) and without waiting for their input (nocopy: the mbarrier wait
# before each unit's math removed, the math runs on whatever the stage holds), each beside
# the committed kernel (base) in its own process.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD QCOMPARE_PLAIN_ONLY=1
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 120 python3 scratch/qcompare.py --passes 3 --json "$OUT/nomath.json" base=scratch/base_art \
  nomath=scratch/nomath_art 2>&1 | tee "$OUT/nomath.txt"
timeout 120 python3 scratch/qcompare.py --passes 3 --json "$OUT/nocopy.json" base=scratch/base_art \
  nocopy=scratch/nowait_copy_art 2>&1 | tee "$OUT/nocopy.txt"
date -u
cd "$OUT" && tar czf ../probe_out.tgz . && rm -rf ./* && mv ../probe_out.tgz .
