#!/usr/bin/env bash
# Session 22 call 7: scb2 against other orders of a lane's block steps (s: scale chain, c:
# element math + stores; scb2 is "s0 s1 c0 c1 | s2 s3 c2 c3" with the stores after both):
# p_a s0 s1 c0 s2 c1 s3 c2 c3, p_c s0 c0 s1 c1 .., p_d s0 s1 c0 c1 s2 s3 c2 c3 (stores after
# each), p_e s0 s1 s2 c0 c1 s3 c2 c3, p_f s1 s0 c1 c0 s3 s2 c3 c2, p_g s0 s1 c1 c0 s2 s3 c3 c2,
# p_h s0 s1 c0 s2 s3 c1 c2 c3: replay of the plain rows, 3 passes.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD NVFP4_AOT_SHAPES=$PWD/tests/data/shapes.json
date -u
QCOMPARE_PLAIN_ONLY=1 timeout 500 python3 scratch/qcompare.py --passes 3 --json "$OUT/compare.json" base=scratch/base_art \
  scb2=scratch/scb2 p_a=scratch/p_a p_c=scratch/p_c p_d=scratch/p_d p_e=scratch/p_e p_f=scratch/p_f \
  p_g=scratch/p_g p_h=scratch/p_h 2>&1 | tee "$OUT/compare.txt"
date -u
cd "$OUT" && tar czf ../out.tgz . && rm -rf ./* && mv ../out.tgz .
