#!/usr/bin/env bash
# session 11 call 1: tile posts in shared memory + PDL after the routing kernel (new
# artifacts/) vs the committed kernels (scratch/old_artifacts), same run; GPU suite.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NVFP4_AOT_SHAPES=$PWD/tests/data/shapes.json
OLD=$PWD/scratch/old_artifacts
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "=== GPU suite (h200_batch tests step), new artifacts"
NVFP4_AOT_REQUIRE_GPU=1 timeout 300 python3 -m pytest -q -x -m gpu tests/ -p no:cacheprovider \
  --ignore=tests/test_jax_gpu.py --ignore=tests/test_quantizer_gpu.py --ignore=tests/test_torch_gpu.py 2>&1 | tail -15
echo "pytest exit code: ${PIPESTATUS[0]}"
echo "=== MoE GPU tests"
NVFP4_AOT_REQUIRE_GPU=1 timeout 200 python3 -m pytest -q -x tests/test_moe_gpu.py -p no:cacheprovider 2>&1 | tail -15
echo "=== bench_decode: new (all 72), then old (all 72), same run"
timeout 300 python3 bench/bench_decode.py --budget-s 200 --json "$OUT/decode_new.json" 2> "$OUT/decode_new.log" > "$OUT/decode_new.txt"
echo "new exit $?"; tail -2 "$OUT/decode_new.txt"
NVFP4_AOT_ARTIFACTS=$OLD timeout 240 python3 bench/bench_decode.py --budget-s 200 \
  --json "$OUT/decode_old.json" 2> "$OUT/decode_old.log" > "$OUT/decode_old.txt"
echo "old exit $?"; tail -2 "$OUT/decode_old.txt"
python3 "$(dirname "$0")"/compare.py "$OUT/decode_new.json" "$OUT/decode_old.json"
date -u
