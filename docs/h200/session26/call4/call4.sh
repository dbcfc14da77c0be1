#!/usr/bin/env bash
# Session 26 call 4 (main at d89cace): the fused MoE layer benchmark (quantize + routed
# GEMMs end to end against torch._grouped_mm; #16's fused step, in the same session as
# call 1's quantizer table) and bench_jax.py's per-call part once more (run_split now
# destroys its events).
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD XLA_PYTHON_CLIENT_PREALLOCATE=false
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 150 python3 bench/bench_moe_layer.py --quick --json "$OUT/bench_moe_layer.json" > "$OUT/bench_moe_layer.txt" 2>&1
echo "moe layer exit $?"; tail -14 "$OUT/bench_moe_layer.txt"; date -u
timeout 90 python3 bench/bench_jax.py --skip-layers --json "$OUT/bench_jax.json" > "$OUT/bench_jax.txt" 2>&1
echo "bench_jax exit $?"; grep -E "plan runs|us_per_extra" "$OUT/bench_jax.txt"; date -u
cd "$OUT" && tar czf ../out.tgz . && rm -rf ./* && mv ../out.tgz .
