#!/usr/bin/env bash
# Session 21 call 9: issue rates of single instructions (scratch/pipes.py, cupy RawKernel).
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
date -u; nvidia-smi --query-gpu=clocks.sm,clocks.max.sm --format=csv
timeout 200 python3 scratch/pipes.py 2>&1 | tee "$OUT/pipes.txt"
date -u
