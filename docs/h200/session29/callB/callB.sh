#!/usr/bin/env bash
# Session 29 call B: session 27's prepared JAX calls on main (never run): call 3 (the JAX
# FFI call with session 27's faster call-frame decoding: bench_jax.py's per-call part and
# the cProfile of call 1) and call 6 (one extra FFI call with an empty C handler,
# scratch/libempty.so, against an empty Python one on the GPU client).
set -u
OUT=${OUT:-out}; OUT=$(realpath "$OUT"); mkdir -p "$OUT/call3" "$OUT/call6"
OUT=$OUT/call3 bash docs/h200/session27/call3/call3.sh
OUT=$OUT/call6 bash docs/h200/session27/call6/call6.sh
