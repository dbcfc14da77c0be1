#!/usr/bin/env bash
# Session 30 call G, main with the routing words read before the PDL wait (its sm_90a
# quantizer cubin is call F's `hoist` byte for byte): racecheck on the quantizer's MoE
# tests (call F ran memcheck), the torch / JAX quantize and masked tests, then
# bench_quantize.py (require-GPU throughout).
set -u
OUT=${OUT:-out}; OUT=$(realpath "$OUT"); mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false NVFP4_AOT_REQUIRE_GPU=1
date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
NVFP4_AOT_QUANT_ROUTINGS=2 timeout 90 compute-sanitizer --tool racecheck --error-exitcode 9 \
  python3 -m pytest -q -p no:cacheprovider tests/test_quantizer_gpu.py -k "masked or contiguous" \
  > "$OUT/racecheck.log" 2>&1
echo "racecheck exit $?"; grep -E "SUMMARY|passed|failed" "$OUT/racecheck.log" | tail -n 2; date -u
timeout 60 python3 -m pytest -q -p no:cacheprovider -rf tests/test_torch_gpu.py tests/test_jax_gpu.py \
  -k "quantize or masked" > "$OUT/torch_jax_tests.log" 2>&1
echo "torch/jax tests exit $?"; grep FAILED "$OUT/torch_jax_tests.log" | head; tail -n 1 "$OUT/torch_jax_tests.log"; date -u
timeout 100 python3 bench/bench_quantize.py --json "$OUT/bench_quantize.json" > "$OUT/bench_quantize.txt" 2>&1
echo "bench exit $?"; cut -c1-190 "$OUT/bench_quantize.txt" | tail -n 30; date -u
