#!/usr/bin/env bash
# Session 33 call B (any card): session 32's after_kernel.py again, now that the
# quantizer runs inside its graphs (call A's ran it on the stream taken at set-up,
# outside the capture: every difference came out 0.00), and boundary.py (the
# quantizer's run against an empty PDL kernel and a PDL copy of its bytes on its own grid).
# On the CPU machine first: bash docs/experiments/bake_defer_variants.sh (writes scratch/)
set -u
OUT=${OUT:-out}; OUT=$(realpath "$OUT"); mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 NVFP4_AOT_REQUIRE_GPU=1
date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
timeout 200 python3 docs/h200/session32/after_kernel.py base=scratch/base o200=scratch/o200 \
  o400=scratch/o400 y200=scratch/y200 otab=scratch/otab > "$OUT/after_kernel.txt" 2>&1
echo "after kernel exit $?"; cut -c1-200 "$OUT/after_kernel.txt" | tail -n 8; date -u
timeout 200 python3 docs/h200/session33/boundary.py > "$OUT/boundary.txt" 2>&1
echo "boundary exit $?"; cut -c1-220 "$OUT/boundary.txt" | tail -n 12; date -u
