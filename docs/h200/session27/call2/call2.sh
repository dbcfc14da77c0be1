#!/usr/bin/env bash
# Session 27 call 2 (prepared, not run in session 27: no machine was lent after call 1).
# 1. Where the quantizer's MoE forms' extra ~1.4 µs a run goes: main's quantizer against
#    timing-only variants (docs/h200/session27/make_moe_variants.py, baked into scratch/
#    by `bash docs/h200/session27/bake_moe_variants.sh` on the CPU machine first): slots
#    (MoE units described from the plan before the wait), nopad (no padding zeroed),
#    both, search8 (8 search steps, not 11).
# 2. The JAX FFI call with session 27's faster call-frame decoding: bench_jax.py's
#    per-call part and split (against session 26's 80.7 µs an extra call, 54.5 prologue
#    only) and the cProfile of call 1 again (against call1/).
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD XLA_PYTHON_CLIENT_PREALLOCATE=false
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 300 python3 scratch/qcompare.py --passes 5 --json "$OUT/compare.json" \
  base=scratch/base slots=scratch/slots nopad=scratch/nopad slotsnopad=scratch/slotsnopad \
  search8=scratch/search8 2>&1 | tee "$OUT/compare.txt"; date -u
timeout 90 python3 bench/bench_jax.py --skip-layers --json "$OUT/bench_jax.json" > "$OUT/bench_jax.txt" 2>&1
echo "bench_jax exit $?"; grep -E "plan runs|us_per_extra" "$OUT/bench_jax.txt"; date -u
timeout 120 python3 docs/h200/session26/call5/profile_jax_call.py > "$OUT/profile_on.txt" 2>&1
echo "profile exit $?"; head -30 "$OUT/profile_on.txt" | cut -c1-150; date -u
cd "$OUT" && tar czf ../out.tgz . && rm -rf ./* && mv ../out.tgz .
