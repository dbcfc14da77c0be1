#!/usr/bin/env bash
# session 17 call 19: torch_ops plans with 64 ring slots (was 8): the fused layer's eager
# sync check (bench_moe_layer.py --quick: 32 eager steps queued behind a 50 ms GPU hold)
# and the torch / torch_ops / examples GPU tests, require-GPU on.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"; rm -rf "$OUT"/e64t2048* "$OUT"/table_* 2>/dev/null
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD NVFP4_AOT_SHAPES=$PWD/tests/data/shapes.json
date -u
timeout 120 python3 bench/bench_moe_layer.py --quick --json "$OUT/bench_moe_layer.json" > "$OUT/bench_moe_layer.txt" 2>&1
echo "exit $?"; tail -6 "$OUT/bench_moe_layer.txt" | cut -c1-170
NVFP4_AOT_REQUIRE_GPU=1 timeout 200 python3 -m pytest -q -rf -p no:cacheprovider tests/test_torch_gpu.py tests/test_torch_ops.py \
  tests/test_examples_gpu.py > "$OUT/tests_torch.log" 2>&1
echo "pytest exit code: $?"; grep FAILED "$OUT/tests_torch.log" | head; tail -1 "$OUT/tests_torch.log"
date -u
