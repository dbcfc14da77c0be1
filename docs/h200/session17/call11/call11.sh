#!/usr/bin/env bash
# session 17 call 11 (#17): what the MoE routing kernel costs a run in a CUDA graph
# (scratch/fold_probe.py, committed kernels): plan.run replayed as bench_decode does, and
# hand-captured launches of one eager slot: routing + GEMM, the GEMM alone, routing alone.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"; rm -rf "$OUT"/e64t2048* "$OUT"/table_* 2>/dev/null
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 400 python3 scratch/fold_probe.py --steps 300 --passes 2 2>&1 | tee "$OUT/fold_probe.txt"
date -u
