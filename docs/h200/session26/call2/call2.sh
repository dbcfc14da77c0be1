#!/usr/bin/env bash
# Session 26 call 2: main as committed — the whole GPU suite with the require-GPU switch
# (last whole-suite run: session 23; since then the JAX handler keeps its thread state),
# then bench_jax.py with XLA's command buffers on and off: its empty-handler and
# prologue-only rows split the ~80 µs an FFI call cost in session 8.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD NVFP4_AOT_SHAPES=$PWD/tests/data/shapes.json \
  XLA_PYTHON_CLIENT_PREALLOCATE=false
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c 'import jax, jaxlib; print("jax", jax.__version__, "jaxlib", jaxlib.__version__, jax.devices())'
NVFP4_AOT_REQUIRE_GPU=1 timeout 330 python3 -m pytest -q -p no:cacheprovider -rf -m gpu tests/ > "$OUT/suite.log" 2>&1
echo "suite exit $?"; grep FAILED "$OUT/suite.log" | head; tail -1 "$OUT/suite.log"; date -u
timeout 110 python3 bench/bench_jax.py --json "$OUT/bench_jax.json" > "$OUT/bench_jax.txt" 2>&1
echo "bench_jax (command buffers on) exit $?"; tail -25 "$OUT/bench_jax.txt"; date -u
XLA_FLAGS=--xla_gpu_enable_command_buffer= timeout 100 python3 bench/bench_jax.py \
  --json "$OUT/bench_jax_no_cmdbuf.json" > "$OUT/bench_jax_no_cmdbuf.txt" 2>&1
echo "bench_jax (command buffers off) exit $?"; tail -25 "$OUT/bench_jax_no_cmdbuf.txt"; date -u
cd "$OUT" && tar czf ../out.tgz . && rm -rf ./* && mv ../out.tgz .
