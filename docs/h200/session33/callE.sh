#!/usr/bin/env bash
# Session 33 call E, main as committed, on the H200 if one is lent, else on what comes:
#  1. session 31's callC: bench_quantize.py (require-GPU; 3 alternating passes; its eager
#     timing was refactored in session 32 and has not run since) and the fused MoE
#     layer (--quick);
#  2. boundary.py with the empty kernel also without shared memory and without PDL.
set -u
OUT=${OUT:-out}; OUT=$(realpath "$OUT"); mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 NVFP4_AOT_REQUIRE_GPU=1
OUT=$OUT/callC bash docs/h200/session31/callC/callC.sh
timeout 200 python3 docs/h200/session33/boundary.py > "$OUT/boundary.txt" 2>&1
echo "boundary exit $?"; cut -c1-260 "$OUT/boundary.txt" | tail -n 12; date -u
