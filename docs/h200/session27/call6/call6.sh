#!/usr/bin/env bash
# Session 27 call 6 (prepared, not run in session 27): what a compiled JAX fast path could
# save on the H200's GPU client — one extra FFI call in a jitted function with an empty
# handler in C (docs/experiments/jax_c_handler/empty_handler.c; scratch/libempty.so,
# built by bake_moe_variants.sh, else compiled here) against an empty Python handler
# and a fused jnp op, XLA command buffers on and off. On the CPU client (development
# box): 2.1 / 5.5-6.7 / 1.9 µs.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD XLA_PYTHON_CLIENT_PREALLOCATE=false
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
LIB=""; [ -f scratch/libempty.so ] && LIB="--library scratch/libempty.so"
timeout 120 python3 docs/experiments/jax_c_handler/measure.py --platform CUDA $LIB 2>&1 | tee "$OUT/on.txt"
XLA_FLAGS=--xla_gpu_enable_command_buffer= timeout 120 python3 docs/experiments/jax_c_handler/measure.py \
  --platform CUDA $LIB 2>&1 | tee "$OUT/off.txt"; date -u
cd "$OUT" && tar czf ../out.tgz . && rm -rf ./* && mv ../out.tgz .
