#!/usr/bin/env bash
# Session 31 call C, main at ca2d759, on the H200 if one is lent, else on what comes:
#  1. bench_quantize.py (require-GPU; 3 alternating passes): #16's rows on this card
#     (H200: 1024 x 4096 needs 3.62 us for 70 %);
#  2. the fused MoE layer (quantize + routed GEMMs in one graph, --quick) on main after
#     session 30's hoist and session 31's slot fix.
set -u
OUT=${OUT:-out}; OUT=$(realpath "$OUT"); mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 NVFP4_AOT_REQUIRE_GPU=1
date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
timeout 150 python3 bench/bench_quantize.py --json "$OUT/bench_quantize.json" > "$OUT/bench_quantize.txt" 2>&1
echo "bench exit $?"; cut -c1-190 "$OUT/bench_quantize.txt" | tail -n 30; date -u
PYTHONPATH=. timeout 150 python3 bench/bench_moe_layer.py --quick --json "$OUT/bench_moe_layer.json" \
  > "$OUT/bench_moe_layer.txt" 2>&1
echo "moe layer bench exit $?"; cut -c1-200 "$OUT/bench_moe_layer.txt" | tail -n 25; date -u
