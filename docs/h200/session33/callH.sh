#!/usr/bin/env bash
# Session 33 call H: on an H200 only (elsewhere nothing but nvidia-smi), main as committed:
# the quantizer's GPU tests, #16's benchmark and compute-sanitizer (bench/h200_batch.sh
# STEPS="env quant": does 1024 x 4096 reach 70 %, 3.62 us, on the target card?) and the
# fused MoE layer (--quick). The quantizer cubin changed in sessions 30-31 (H100s only).
set -u
OUT=${OUT:-out}; OUT=$(realpath "$OUT"); mkdir -p "$OUT"
date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  mkdir -p "$OUT/batch"
  OUT=$OUT/batch STEPS="env quant" bash bench/h200_batch.sh 2>&1 | tee "$OUT/batch/batch.log" | tail -n 60
  PYTHONPATH=. NVFP4_AOT_REQUIRE_GPU=1 timeout 150 python3 bench/bench_moe_layer.py --quick \
    --json "$OUT/bench_moe_layer.json" > "$OUT/bench_moe_layer.txt" 2>&1
  echo "moe layer bench exit $?"; cut -c1-200 "$OUT/bench_moe_layer.txt" | tail -n 6; date -u
fi
