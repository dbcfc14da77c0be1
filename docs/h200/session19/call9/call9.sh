#!/usr/bin/env bash
# Session 19 call 9 (timing only, bytes differ by design): the scale-byte stores as full
# 32-byte sectors. In the blocked layout a sector holds 8 scale rows (s, s+1, s+32, s+33,
# ... s+97) x 4 blocks, which today 8 warps write 4 bytes each. sffull: only the warp of
# the sector's first row writes it, whole, with two 16-byte stores (garbage values), the
# others nothing: the cost of writing each sector once; with and without the block math.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD QCOMPARE_PLAIN_ONLY=1
date -u
timeout 200 python3 scratch/qcompare.py --passes 3 --json "$OUT/sectors.json" base=scratch/base_art \
  sffull=scratch/sffull_art nomath=scratch/nomath_art nosf=scratch/nomath_nosf_art \
  sffull_nomath=scratch/nomath_sffull_art 2>&1 | tee "$OUT/sectors.txt"
date -u
cd "$OUT" && tar czf ../sectors_out.tgz . && rm -rf ./* && mv ../sectors_out.tgz .
