#!/usr/bin/env bash
# session 15 call 5 (#16): the tree with the rebaked quantizer (call 4's tp2: a row's short
# last segment quantizes only the blocks it has; two blocks' scale chains, then their
# element math on the words read again). Require-GPU on: quantizer, torch (quantize op,
# layer, example), torch_ops, examples and JAX GPU tests; memcheck + racecheck; the #16
# benchmark (bench_quantize.py) and the fused layer (bench_moe_layer.py --quick).
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NVFP4_AOT_SHAPES=$PWD/tests/data/shapes.json
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "=== GPU tests $(date -u +%T)"
NVFP4_AOT_REQUIRE_GPU=1 timeout 300 python3 -m pytest -q -rf -p no:cacheprovider tests/test_quantizer_gpu.py \
  tests/test_torch_gpu.py tests/test_torch_ops.py tests/test_examples_gpu.py tests/test_jax_gpu.py > "$OUT/tests.log" 2>&1
echo "pytest exit code: $?"; grep FAILED "$OUT/tests.log" | head; tail -1 "$OUT/tests.log"
for tool in memcheck racecheck; do
  NVFP4_AOT_QUANT_ROUTINGS=2 NVFP4_AOT_REQUIRE_GPU=1 timeout 100 compute-sanitizer --tool $tool --error-exitcode 9 \
    python3 -m pytest -q -x -p no:cacheprovider tests/test_quantizer_gpu.py \
    -k "T129-k160 or T3-k48 or E8-T300 or E8-maxm100 or padding_rows or E256-T512 or k7168 or k2080" > "$OUT/$tool.log" 2>&1
  echo "$tool exit $?"; grep -E "SUMMARY|passed|failed" "$OUT/$tool.log" | tail -2
done
echo "=== bench_quantize $(date -u +%T)"
timeout 150 python3 bench/bench_quantize.py --json "$OUT/bench_quantize.json" > "$OUT/bench_quantize.txt" 2>&1
echo "exit $?"; cat "$OUT/bench_quantize.txt" | cut -c1-140
echo "=== bench_moe_layer --quick $(date -u +%T)"
timeout 150 python3 bench/bench_moe_layer.py --quick --json "$OUT/bench_moe_layer.json" > "$OUT/bench_moe_layer.txt" 2>&1
echo "exit $?"; tail -12 "$OUT/bench_moe_layer.txt" | cut -c1-160
date -u
cd "$OUT" && tar czf ../call5_out.tgz . && rm -rf ./* && mv ../call5_out.tgz .
