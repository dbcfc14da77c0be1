#!/usr/bin/env bash
# Session 19 call 8 (timing only, bytes differ by design): where the committed quantizer's
# time goes without its block math (call 7's nomath) — nomath without the scale-byte
# stores (nosf), without the code stores (nocodes), without both, and without the CTA's
# multiplier table and its barrier (notable); plain rows only.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD QCOMPARE_PLAIN_ONLY=1
date -u
timeout 200 python3 scratch/qcompare.py --passes 3 --json "$OUT/parts.json" base=scratch/base_art \
  nomath=scratch/nomath_art nosf=scratch/nomath_nosf_art nocodes=scratch/nomath_nocodes_art \
  nostores=scratch/nomath_nosf_nocodes_art notable=scratch/nomath_notable_art 2>&1 | tee "$OUT/parts.txt"
date -u
cd "$OUT" && tar czf ../parts_out.tgz . && rm -rf ./* && mv ../parts_out.tgz .
