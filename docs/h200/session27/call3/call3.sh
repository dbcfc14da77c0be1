#!/usr/bin/env bash
# Session 27 call 3 (prepared, not run in session 27): the JAX FFI call with session 27's
# faster call-frame decoding (1a9c337): bench_jax.py's per-call part and split (against
# session 26's 80.7 µs an extra call, 54.5 prologue only, 18.0-24.1 inside plan.run) and
# call 1's cProfile again (against call1/profile_on.txt).
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD XLA_PYTHON_CLIENT_PREALLOCATE=false
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 90 python3 bench/bench_jax.py --skip-layers --json "$OUT/bench_jax.json" > "$OUT/bench_jax.txt" 2>&1
echo "bench_jax exit $?"; grep -E "plan runs|us_per_extra" "$OUT/bench_jax.txt"; date -u
timeout 120 python3 docs/h200/session26/call5/profile_jax_call.py > "$OUT/profile_on.txt" 2>&1
echo "profile exit $?"; head -30 "$OUT/profile_on.txt" | cut -c1-150; date -u
cd "$OUT" && tar czf ../out.tgz . && rm -rf ./* && mv ../out.tgz .
