#!/usr/bin/env bash
# session 14 call 9: the committed tree (2852d27): the fused MoE layer benchmark
# (quantize + GEMM + activation + quantize + GEMM in one graph, against the same layer with
# torch._grouped_mm on BF16 weights), after the descriptor-switch change.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 200 python3 bench/bench_moe_layer.py --json "$OUT/bench_moe_layer.json" > "$OUT/bench_moe_layer.txt" 2>&1
echo "exit $?"; tail -22 "$OUT/bench_moe_layer.txt"
date -u
cd "$OUT" && tar czf ../call9_out.tgz . && rm -f ./* && mv ../call9_out.tgz .
