#!/usr/bin/env bash
# Session 22 call 8: the committed tree (artifacts/ fully rebaked: the scale byte as y h +
# RN(y l) with the NaN through the conversion, no sign mask): quantizer,
# torch, torch_ops, examples and JAX GPU tests (require-GPU); replay vs main's quantizer
# (scratch/base_art); bench_quantize.py; memcheck + racecheck on the quantizer's MoE /
# padding / short-row / PDL-chain tests; bench_moe_layer.py --quick.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD NVFP4_AOT_SHAPES=$PWD/tests/data/shapes.json
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
NVFP4_AOT_REQUIRE_GPU=1 timeout 200 python3 -m pytest -q -p no:cacheprovider -rf tests/test_quantizer_gpu.py \
  tests/test_torch_ops.py tests/test_torch_gpu.py tests/test_examples_gpu.py tests/test_jax_gpu.py > "$OUT/tests.log" 2>&1
echo "tests exit $?"; grep FAILED "$OUT/tests.log" | head; tail -1 "$OUT/tests.log"
timeout 90 python3 scratch/qcompare.py --passes 3 --json "$OUT/compare.json" base=scratch/base_art \
  committed=artifacts 2>&1 | tee "$OUT/compare.txt"
timeout 150 python3 bench/bench_quantize.py --json "$OUT/bench_quantize.json" > "$OUT/bench_quantize.txt" 2>&1
echo "bench exit $?"; cut -c1-160 "$OUT/bench_quantize.txt" | head -30
for tool in memcheck racecheck; do
  NVFP4_AOT_REQUIRE_GPU=1 NVFP4_AOT_QUANT_ROUTINGS=2 timeout 70 compute-sanitizer --tool $tool --error-exitcode 9 \
    python3 -m pytest -q -p no:cacheprovider tests/test_quantizer_gpu.py \
    -k "contiguous or masked or wait_for or padding_rows or T129-k160 or k1056 or T1-k32" > "$OUT/${tool}.log" 2>&1
  echo "$tool exit $?"; grep -E "SUMMARY|passed|failed" "$OUT/${tool}.log" | tail -2
done
timeout 100 python3 bench/bench_moe_layer.py --quick > "$OUT/bench_moe_layer.txt" 2>&1
echo "moe exit $?"; tail -12 "$OUT/bench_moe_layer.txt"
date -u
cd "$OUT" && tar czf ../out.tgz . && rm -rf ./* && mv ../out.tgz .
