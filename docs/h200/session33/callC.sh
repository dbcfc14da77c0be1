#!/usr/bin/env bash
# Session 33 call C (any card): boundary.py again, its plan's capture slots mended (call
# B's ran out of them: each graph captures PER_GRAPH runs).
set -u
OUT=${OUT:-out}; OUT=$(realpath "$OUT"); mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 NVFP4_AOT_REQUIRE_GPU=1
date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
timeout 200 python3 docs/h200/session33/boundary.py > "$OUT/boundary.txt" 2>&1
echo "boundary exit $?"; cut -c1-220 "$OUT/boundary.txt" | tail -n 12; date -u
