#!/usr/bin/env bash
# Session 22 call 6: scb2 (740 instructions a 4-block path) against the same PTX operations
# in other orders (the 16 elements' code lines: even/odd, reverse, interleaved halves, six
# seeded shuffles; ptxas schedules each differently): replay of the plain rows, 3 passes.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD NVFP4_AOT_SHAPES=$PWD/tests/data/shapes.json
date -u
QCOMPARE_PLAIN_ONLY=1 timeout 500 python3 scratch/qcompare.py --passes 3 --json "$OUT/compare.json" base=scratch/base_art \
  scb2=scratch/scb2 v_eo=scratch/v_eo v_rev=scratch/v_rev v_il=scratch/v_il v_r1=scratch/v_r1 v_r2=scratch/v_r2 \
  v_r3=scratch/v_r3 v_r4=scratch/v_r4 v_r5=scratch/v_r5 v_r6=scratch/v_r6 2>&1 | tee "$OUT/compare.txt"
date -u
cd "$OUT" && tar czf ../out.tgz . && rm -rf ./* && mv ../out.tgz .
