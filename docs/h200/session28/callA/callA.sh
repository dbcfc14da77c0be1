#!/usr/bin/env bash
# Session 28, first call (device time was short: the most needed first).
#  1. the mnopad branch (masked runs write no padding scale rows; quantizer cubins rebaked
#     for every arch, GEMM cubins unchanged), copied into scratch/mnopad_tree (its
#     tracked files but docs/): the quantizer's whole GPU suite (require-GPU; masked
#     padding rows now checked untouched), the torch / JAX GPU tests of quantize and the
#     masked layout, and bench_quantize.py;
#  2. replay comparison (scratch/qcompare.py, 3 alternating passes) of main's quantizer
#     against session 27's timing-only MoE variants, its three correct candidates and
#     mnopad, and mnopad on top of mslots (docs/h200/session27/bake_moe_variants.sh,
#     session28/make_mnopad.py).
set -u
OUT=${OUT:-out}; OUT=$(realpath "$OUT"); mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
(cd scratch/mnopad_tree && export PYTHONPATH=$PWD NVFP4_AOT_SHAPES=$PWD/tests/data/shapes.json &&
  NVFP4_AOT_REQUIRE_GPU=1 timeout 150 python3 -m pytest -q -p no:cacheprovider -rf tests/test_quantizer_gpu.py \
    > "$OUT/tests.log" 2>&1; echo "tests exit $?"; grep FAILED "$OUT/tests.log" | head; tail -1 "$OUT/tests.log"; date -u
  NVFP4_AOT_REQUIRE_GPU=1 timeout 90 python3 -m pytest -q -p no:cacheprovider -rf tests/test_torch_gpu.py \
    tests/test_jax_gpu.py -k "quantize or masked" > "$OUT/torch_jax_tests.log" 2>&1
  echo "torch/jax tests exit $?"; grep FAILED "$OUT/torch_jax_tests.log" | head; tail -1 "$OUT/torch_jax_tests.log"; date -u
  timeout 130 python3 bench/bench_quantize.py --json "$OUT/bench_quantize.json" > "$OUT/bench_quantize.txt" 2>&1
  echo "bench exit $?"; cut -c1-190 "$OUT/bench_quantize.txt" | head -40; date -u)
PYTHONPATH=$PWD timeout 200 python3 scratch/qcompare.py --passes 3 --json "$OUT/compare.json" \
  base=scratch/base slots=scratch/slots nopad=scratch/nopad slotsnopad=scratch/slotsnopad \
  search8=scratch/search8 idxpre=scratch/idxpre mslots=scratch/mslots \
  padafter=scratch/padafter mnopad=scratch/mnopad mnopadmslots=scratch/mnopadmslots > "$OUT/compare.txt" 2>&1
echo "compare exit $?"; cut -c1-420 "$OUT/compare.txt"; date -u
