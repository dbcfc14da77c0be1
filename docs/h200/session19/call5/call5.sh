#!/usr/bin/env bash
# Session 19 call 5: the quantizer launched with programmatic stream serialization (branch
# pdl: griddepcontrol.launch_dependents at the start, griddepcontrol.wait after the plan
# and run words, before the global scale, the input, the routing and any store; use_pdl in
# its host code; sm_90a baked into artifacts/) against main's quantizer (scratch/base_art):
# replay comparison; quantizer GPU tests (a new chain test: each run quantizes the codes of
# the one before it), memcheck + racecheck; torch / torch_ops / examples / JAX GPU tests;
# bench_quantize.py; bench_moe_layer.py --quick.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD NVFP4_AOT_SHAPES=$PWD/tests/data/shapes.json
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 150 python3 scratch/qcompare.py --passes 3 --json "$OUT/compare.json" base=scratch/base_art \
  pdl=artifacts 2>&1 | tee "$OUT/compare.txt"
export NVFP4_AOT_REQUIRE_GPU=1
timeout 120 python3 -m pytest -q -p no:cacheprovider --tb=short tests/test_quantizer_gpu.py > "$OUT/tests_quantizer.log" 2>&1
echo "exit $?"; grep FAILED "$OUT/tests_quantizer.log" | head; tail -1 "$OUT/tests_quantizer.log"
for tool in memcheck racecheck; do
  NVFP4_AOT_QUANT_ROUTINGS=2 timeout 100 compute-sanitizer --tool $tool --error-exitcode 9 \
    python3 -m pytest -q -p no:cacheprovider tests/test_quantizer_gpu.py \
    -k "contiguous or masked or wait_for or padding_rows or T129-k160 or k1056 or T1-k32" > "$OUT/${tool}.log" 2>&1
  echo "$tool exit $?"; grep -E "SUMMARY|passed|failed" "$OUT/${tool}.log" | tail -2
done
timeout 150 python3 -m pytest -q -rf -p no:cacheprovider tests/test_torch_gpu.py tests/test_torch_ops.py \
  tests/test_examples_gpu.py tests/test_jax_gpu.py > "$OUT/tests_more.log" 2>&1
echo "exit $?"; tail -1 "$OUT/tests_more.log"
unset NVFP4_AOT_REQUIRE_GPU
timeout 90 python3 bench/bench_quantize.py --json "$OUT/bench_quantize.json" > "$OUT/bench_quantize.txt" 2>&1
echo "exit $?"; cut -c1-150 "$OUT/bench_quantize.txt" | head -24
timeout 100 python3 bench/bench_moe_layer.py --quick > "$OUT/bench_moe_layer.txt" 2>&1
echo "exit $?"; tail -12 "$OUT/bench_moe_layer.txt"
date -u
cd "$OUT" && tar czf ../pdl_out.tgz . && rm -rf ./* && mv ../pdl_out.tgz .
