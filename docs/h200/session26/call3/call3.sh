#!/usr/bin/env bash
# Session 26 call 3: bench_jax.py's per-call part (no layers) with the new split of our
# FFI call's plan runs (host µs inside run, ring waits, GPU µs of a run and start to
# start, from events on XLA's stream), command buffers on and off; the JAX GPU tests.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD XLA_PYTHON_CLIENT_PREALLOCATE=false
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 120 python3 bench/bench_jax.py --skip-layers --json "$OUT/bench_jax.json" > "$OUT/bench_jax.txt" 2>&1
echo "bench_jax (command buffers on) exit $?"; tail -22 "$OUT/bench_jax.txt"; date -u
XLA_FLAGS=--xla_gpu_enable_command_buffer= timeout 120 python3 bench/bench_jax.py --skip-layers \
  --json "$OUT/bench_jax_no_cmdbuf.json" > "$OUT/bench_jax_no_cmdbuf.txt" 2>&1
echo "bench_jax (command buffers off) exit $?"; tail -22 "$OUT/bench_jax_no_cmdbuf.txt"; date -u
NVFP4_AOT_REQUIRE_GPU=1 timeout 200 python3 -m pytest -q -p no:cacheprovider -rf tests/test_jax_gpu.py \
  tests/test_jax.py tests/test_bench_jax.py > "$OUT/jax_tests.log" 2>&1
echo "jax tests exit $?"; grep FAILED "$OUT/jax_tests.log" | head; tail -1 "$OUT/jax_tests.log"; date -u
cd "$OUT" && tar czf ../out.tgz . && rm -rf ./* && mv ../out.tgz .
