#!/usr/bin/env bash
# session 18 call 6: the committed tree's torch / torch_ops / examples / JAX GPU tests
# (require-GPU) after the review's allocation-helper change.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD NVFP4_AOT_SHAPES=$PWD/tests/data/shapes.json
date -u; git log --oneline -1 2>/dev/null
NVFP4_AOT_REQUIRE_GPU=1 timeout 200 python3 -m pytest -q -rf -p no:cacheprovider tests/test_torch_gpu.py tests/test_torch_ops.py \
  tests/test_examples_gpu.py tests/test_jax_gpu.py > "$OUT/tests.log" 2>&1
echo "pytest exit code: $?"; grep FAILED "$OUT/tests.log" | head; tail -1 "$OUT/tests.log"
date -u
