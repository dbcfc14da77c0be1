#!/usr/bin/env bash
# Session 31 call D, main at 3ef04ba + bench_quantize.py timing each of three buffer
# sets (fresh random inputs each, ours checked on every set) in graphs of its own, the
# median over the sets a pass (a first try had each graph cycle through the sets: its
# output is callD_cycling/), on the H200 if one is lent, else on what comes:
#  1. bench_quantize.py (require-GPU; 3 passes x 3 buffer sets);
#  2. on an H200 only, the fused MoE layer (--quick).
set -u
OUT=${OUT:-out}; OUT=$(realpath "$OUT"); mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 NVFP4_AOT_REQUIRE_GPU=1
date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
timeout 240 python3 bench/bench_quantize.py --json "$OUT/bench_quantize.json" > "$OUT/bench_quantize.txt" 2>&1
echo "bench exit $?"; cut -c1-190 "$OUT/bench_quantize.txt" | tail -n 30; date -u
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  PYTHONPATH=. timeout 150 python3 bench/bench_moe_layer.py --quick --json "$OUT/bench_moe_layer.json" \
    > "$OUT/bench_moe_layer.txt" 2>&1
  echo "moe layer bench exit $?"; cut -c1-200 "$OUT/bench_moe_layer.txt" | tail -n 8; date -u
fi
