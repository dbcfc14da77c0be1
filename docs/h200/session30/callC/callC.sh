#!/usr/bin/env bash
# Session 30 call C, main after the padguard + mslots2 fold (the quantizer's cubins
# rebaked; its sm_90a cubin is call B's `both`, byte for byte): every GPU test
# (require-GPU), then the fused MoE layer benchmark (quantize + grouped GEMMs, --quick).
set -u
OUT=${OUT:-out}; OUT=$(realpath "$OUT"); mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
NVFP4_AOT_REQUIRE_GPU=1 timeout 400 python3 -m pytest -q -rf -m gpu tests/ -p no:cacheprovider \
  > "$OUT/gpu_tests.log" 2>&1
echo "gpu tests exit $?"; grep -E "FAILED|ERROR" "$OUT/gpu_tests.log" | head; tail -n 1 "$OUT/gpu_tests.log"; date -u
PYTHONPATH=. timeout 150 python3 bench/bench_moe_layer.py --quick --json "$OUT/bench_moe_layer.json" \
  > "$OUT/bench_moe_layer.txt" 2>&1
echo "moe layer bench exit $?"; cut -c1-200 "$OUT/bench_moe_layer.txt" | tail -n 25; date -u
