#!/usr/bin/env bash
# Session 28 call C (prepared, not run): the kernel to land — masked runs write no padding
# scale rows (mnopad) and masked plans whose slots fit one round take the slots as units,
# described before the PDL wait (session 27's mslots) — the mslots branch (3c4dc9a),
# rebaked for every arch (GEMM cubins unchanged), copied into scratch/mm_tree (tracked
# files but docs/; prepare_callC.sh). Most needed first, so that a call cut short still
# says whether to merge: the quantizer's whole GPU suite (require-GPU), a replay
# comparison against main's cubin before session 28 (scratch/base) and
# make_plainaligned.py's variant (scratch/plainaligned: plain runs with T % 128 == 0
# without padding code), bench_quantize.py, memcheck + racecheck on the MoE / padding /
# short-row tests, the torch / JAX quantize and masked tests.
set -u
OUT=${OUT:-out}; OUT=$(realpath "$OUT"); mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
ROOT=$PWD
cd scratch/mm_tree
export PYTHONPATH=$PWD NVFP4_AOT_SHAPES=$PWD/tests/data/shapes.json NVFP4_AOT_REQUIRE_GPU=1
timeout 100 python3 -m pytest -q -p no:cacheprovider -rf tests/test_quantizer_gpu.py > "$OUT/tests.log" 2>&1
echo "tests exit $?"; grep FAILED "$OUT/tests.log" | head; tail -1 "$OUT/tests.log"; date -u
(cd "$ROOT" && PYTHONPATH=$ROOT timeout 40 python3 scratch/qcompare.py --passes 3 --json "$OUT/compare.json" \
  base=scratch/base landed=scratch/mm_tree/artifacts plainaligned=scratch/plainaligned > "$OUT/compare.txt" 2>&1)
echo "compare exit $?"; cut -c1-200 "$OUT/compare.txt"; date -u
timeout 100 python3 bench/bench_quantize.py --json "$OUT/bench_quantize.json" > "$OUT/bench_quantize.txt" 2>&1
echo "bench exit $?"; cut -c1-190 "$OUT/bench_quantize.txt" | tail -30; date -u
for tool in memcheck racecheck; do
  NVFP4_AOT_QUANT_ROUTINGS=2 timeout 90 compute-sanitizer --tool $tool --error-exitcode 9 \
    python3 -m pytest -q -p no:cacheprovider tests/test_quantizer_gpu.py \
    -k "contiguous or masked or wait_for or padding_rows or T129-k160 or k1056 or T1-k32" > "$OUT/${tool}.log" 2>&1
  echo "$tool exit $?"; grep -E "SUMMARY|passed|failed" "$OUT/${tool}.log" | tail -2
done
timeout 60 python3 -m pytest -q -p no:cacheprovider -rf tests/test_torch_gpu.py tests/test_jax_gpu.py \
  -k "quantize or masked" > "$OUT/torch_jax_tests.log" 2>&1
echo "torch/jax tests exit $?"; grep FAILED "$OUT/torch_jax_tests.log" | head; tail -1 "$OUT/torch_jax_tests.log"
date -u
