#!/usr/bin/env bash
# Prepared for session 31 (not run): on the H200 if one is lent, else on what comes.
# On the CPU machine first:
#   mkdir -p scratch/pre && for f in manifest.json nvfp4_quantize.sm_90a.g1.cubin; do
#     git show 1f05dce:artifacts/$f > scratch/pre/$f; done
#   cp docs/h200/session15/qcompare.py scratch/ && patch -s scratch/qcompare.py < docs/h200/session16/qcompare_widths.diff && python3 docs/h200/session27/qcompare_sparse.py
#  1. bench_quantize.py on main (require-GPU): the standing of #16's rows on this card
#     (H200: does 1024 x 4096 reach 70 %, i.e. 3.62 us, after session 30's padding skip?);
#  2. main (8b40772's quantizer: routing words before the PDL wait) against 1f05dce's,
#     three buffer sets each (session 30 call F: contiguous E = 256, T = 4096 +2.7 %,
#     inside the 3.4 % one kernel moves between buffer sets), 3 passes.
set -u
OUT=${OUT:-out}; OUT=$(realpath "$OUT"); mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 NVFP4_AOT_REQUIRE_GPU=1
date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
timeout 100 python3 bench/bench_quantize.py --json "$OUT/bench_quantize.json" > "$OUT/bench_quantize.txt" 2>&1
echo "bench exit $?"; cut -c1-190 "$OUT/bench_quantize.txt" | tail -n 30; date -u
PYTHONPATH=$PWD timeout 200 python3 scratch/qcompare.py --passes 3 --json "$OUT/compare.json" \
  main=artifacts pre=scratch/pre main2=artifacts pre2=scratch/pre main3=artifacts pre3=scratch/pre \
  > "$OUT/compare.txt" 2>&1
echo "compare exit $?"; cut -c1-240 "$OUT/compare.txt"; date -u
