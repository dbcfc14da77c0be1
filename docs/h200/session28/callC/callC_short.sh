#!/usr/bin/env bash
# callC.sh cut to the ~3 minutes of device time the session had left: the same steps,
# most needed first (the quantizer GPU suite, the comparison, the benchmark, racecheck on
# the MoE / padding tests, then the torch / JAX quantize tests).
set -u
OUT=${OUT:-out}; OUT=$(realpath "$OUT"); mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
ROOT=$PWD
cd scratch/mm_tree
export PYTHONPATH=$PWD NVFP4_AOT_SHAPES=$PWD/tests/data/shapes.json NVFP4_AOT_REQUIRE_GPU=1
timeout 70 python3 -m pytest -q -p no:cacheprovider -rf tests/test_quantizer_gpu.py > "$OUT/tests.log" 2>&1
echo "tests exit $?"; grep FAILED "$OUT/tests.log" | head; tail -1 "$OUT/tests.log"; date -u
(cd "$ROOT" && PYTHONPATH=$ROOT timeout 30 python3 scratch/qcompare.py --passes 3 --json "$OUT/compare.json" \
  base=scratch/base landed=scratch/mm_tree/artifacts plainaligned=scratch/plainaligned > "$OUT/compare.txt" 2>&1)
echo "compare exit $?"; cut -c1-200 "$OUT/compare.txt"; date -u
timeout 30 python3 bench/bench_quantize.py --json "$OUT/bench_quantize.json" > "$OUT/bench_quantize.txt" 2>&1
echo "bench exit $?"; cut -c1-190 "$OUT/bench_quantize.txt" | tail -8; date -u
NVFP4_AOT_QUANT_ROUTINGS=2 timeout 75 compute-sanitizer --tool racecheck --error-exitcode 9 \
  python3 -m pytest -q -p no:cacheprovider tests/test_quantizer_gpu.py \
  -k "contiguous or masked or wait_for or padding_rows" > "$OUT/racecheck.log" 2>&1
echo "racecheck exit $?"; grep -E "SUMMARY|passed|failed" "$OUT/racecheck.log" | tail -2; date -u
timeout 40 python3 -m pytest -q -p no:cacheprovider -rf tests/test_torch_gpu.py tests/test_jax_gpu.py \
  -k "quantize or masked" > "$OUT/torch_jax_tests.log" 2>&1
echo "torch/jax tests exit $?"; tail -1 "$OUT/torch_jax_tests.log"; date -u
