#!/usr/bin/env bash
# Session 29 call A: session 28's call C (not run there; this script replaces its own)
# with this session's contiguous candidate beside it. Most needed first:
#  1. the mslots branch (3c4dc9a: masked runs write no padding, masked plans whose slots
#     fit one round take the slots as units), its tracked files but docs/ in
#     scratch/mm_tree: the quantizer's whole GPU suite (require-GPU);
#  2. cspec (branch cspec on mslots; sm_90a cubin in scratch/cspec): a contiguous run
#     starts round 0's copy from a guess (unit row u = output row u) right after the PDL
#     wait, the scans and search while it flies, a wrong guess copied again: the
#     quantizer's contiguous / padding / PDL-chain GPU tests on a copy of mm_tree's
#     artifacts holding its cubin (hostile routings take the re-copy);
#  3. replay comparison, 3 alternating passes: main before session 28 (scratch/base),
#     mslots (landed), plainaligned (plain runs with T % 128 == 0 without padding code),
#     cspec, and mslots with 64-block units forced (landed64: 1024 x 4096's units halved);
#  4. memcheck + racecheck on mm_tree and cspec; 5. bench_quantize.py on mm_tree;
#  6. the torch / JAX quantize and masked tests on mm_tree.
set -u
OUT=${OUT:-out}; OUT=$(realpath "$OUT"); mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false NVFP4_AOT_REQUIRE_GPU=1
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
ROOT=$PWD
rm -rf /tmp/cspec && cp -r scratch/mm_tree/artifacts /tmp/cspec && cp scratch/cspec/* /tmp/cspec/
cd scratch/mm_tree
export PYTHONPATH=$PWD NVFP4_AOT_SHAPES=$PWD/tests/data/shapes.json
SUBSET="contiguous or masked or wait_for or padding_rows or T129-k160 or k1056 or T1-k32"
timeout 100 python3 -m pytest -q -p no:cacheprovider -rf tests/test_quantizer_gpu.py > "$OUT/tests.log" 2>&1
echo "tests exit $?"; grep FAILED "$OUT/tests.log" | head; tail -n 1 "$OUT/tests.log"; date -u
NVFP4_AOT_ARTIFACTS=/tmp/cspec timeout 90 python3 -m pytest -q -p no:cacheprovider -rf \
  tests/test_quantizer_gpu.py -k "contiguous or wait_for or padding" > "$OUT/cspec_tests.log" 2>&1
echo "cspec tests exit $?"; grep FAILED "$OUT/cspec_tests.log" | head; tail -n 1 "$OUT/cspec_tests.log"; date -u
(cd "$ROOT" && PYTHONPATH=$ROOT timeout 120 python3 scratch/qcompare.py --passes 3 --json "$OUT/compare.json" \
  base=scratch/base landed=scratch/mm_tree/artifacts plainaligned=scratch/plainaligned \
  cspec=scratch/cspec landed64=scratch/mm_tree/artifacts:64 > "$OUT/compare.txt" 2>&1)
echo "compare exit $?"; cut -c1-260 "$OUT/compare.txt"; date -u
for tool in memcheck racecheck; do
  NVFP4_AOT_QUANT_ROUTINGS=2 timeout 80 compute-sanitizer --tool $tool --error-exitcode 9 \
    python3 -m pytest -q -p no:cacheprovider tests/test_quantizer_gpu.py -k "$SUBSET" > "$OUT/${tool}.log" 2>&1
  echo "$tool exit $?"; grep -E "SUMMARY|passed|failed" "$OUT/${tool}.log" | tail -n 2
  NVFP4_AOT_ARTIFACTS=/tmp/cspec NVFP4_AOT_QUANT_ROUTINGS=2 timeout 60 compute-sanitizer --tool $tool \
    --error-exitcode 9 python3 -m pytest -q -p no:cacheprovider tests/test_quantizer_gpu.py \
    -k "contiguous or padding_rows" > "$OUT/cspec_${tool}.log" 2>&1
  echo "cspec $tool exit $?"; grep -E "SUMMARY|passed|failed" "$OUT/cspec_${tool}.log" | tail -n 2
done; date -u
timeout 100 python3 bench/bench_quantize.py --json "$OUT/bench_quantize.json" > "$OUT/bench_quantize.txt" 2>&1
echo "bench exit $?"; cut -c1-190 "$OUT/bench_quantize.txt" | tail -n 30; date -u
timeout 60 python3 -m pytest -q -p no:cacheprovider -rf tests/test_torch_gpu.py tests/test_jax_gpu.py \
  -k "quantize or masked" > "$OUT/torch_jax_tests.log" 2>&1
echo "torch/jax tests exit $?"; grep FAILED "$OUT/torch_jax_tests.log" | head; tail -n 1 "$OUT/torch_jax_tests.log"
date -u
