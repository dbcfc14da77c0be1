#!/usr/bin/env bash
# Session 26 call 5: our JAX FFI call's host time by function (cProfile around a jitted
# 16-GEMM function; profile_jax_call.py), command buffers on and off.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD XLA_PYTHON_CLIENT_PREALLOCATE=false
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 120 python3 docs/h200/session26/call5/profile_jax_call.py > "$OUT/profile_on.txt" 2>&1
echo "on exit $?"; head -45 "$OUT/profile_on.txt" | cut -c1-150
XLA_FLAGS=--xla_gpu_enable_command_buffer= timeout 120 python3 docs/h200/session26/call5/profile_jax_call.py \
  > "$OUT/profile_off.txt" 2>&1
echo "off exit $?"; head -3 "$OUT/profile_off.txt"; date -u
cd "$OUT" && tar czf ../out.tgz . && rm -rf ./* && mv ../out.tgz .
