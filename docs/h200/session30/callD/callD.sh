#!/usr/bin/env bash
# Session 30 call D (asked for as nvidia-h200; scratch/qcompare.py made as in session 28's
# prepare step): main's committed quantizer in a replay comparison against itself (main2:
# the same artifacts, its own buffers, the control for allocation-dependent spread) and
# with 32- and 128-block units forced (w32 / w128: the 1,024-row and decode rows' unit
# width), 3 alternating passes; then bench_quantize.py.
set -u
OUT=${OUT:-out}; OUT=$(realpath "$OUT"); mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
PYTHONPATH=$PWD timeout 150 python3 scratch/qcompare.py --passes 3 --json "$OUT/compare.json" \
  main=artifacts main2=artifacts w32=artifacts:32 w128=artifacts:128 > "$OUT/compare.txt" 2>&1
echo "compare exit $?"; cut -c1-200 "$OUT/compare.txt"; date -u
timeout 100 python3 bench/bench_quantize.py --json "$OUT/bench_quantize.json" > "$OUT/bench_quantize.txt" 2>&1
echo "bench exit $?"; cut -c1-190 "$OUT/bench_quantize.txt" | tail -n 30; date -u
