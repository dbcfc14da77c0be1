#!/usr/bin/env bash
# session 13 call 1: the committed tree (89cb6f3) on hardware, everything sessions 11-12 left
# unrun: the GPU suite with the 32-row decode family in every runtime test, the MoE, torch,
# examples, quantizer (incl. the k = 6144 / 10240 shapes) and JAX GPU tests on the final
# quantizer, sanitizers on the 32-row family, the fused MoE layer benchmark.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NVFP4_AOT_SHAPES=$PWD/tests/data/shapes.json
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
git log -1 --format='commit %H' 2>/dev/null
python3 -c "import hashlib,pathlib; print('manifest sha256', hashlib.sha256(pathlib.Path('artifacts/manifest.json').read_bytes()).hexdigest()[:16])"
echo "=== GPU suite (h200_batch tests step) $(date -u +%T)"
NVFP4_AOT_REQUIRE_GPU=1 timeout 240 python3 -m pytest -q -m gpu tests/ -p no:cacheprovider \
  --ignore=tests/test_jax_gpu.py --ignore=tests/test_quantizer_gpu.py --ignore=tests/test_torch_gpu.py > "$OUT/suite.log" 2>&1
echo "pytest exit code: $?"; tail -2 "$OUT/suite.log"
echo "=== MoE, torch, examples, quantizer, JAX GPU tests $(date -u +%T)"
NVFP4_AOT_REQUIRE_GPU=1 timeout 240 python3 -m pytest -q -rf tests/test_moe_gpu.py tests/test_torch_gpu.py tests/test_torch_ops.py \
  tests/test_examples_gpu.py tests/test_quantizer_gpu.py tests/test_jax_gpu.py -p no:cacheprovider > "$OUT/more.log" 2>&1
echo "pytest exit code: $?"; grep FAILED "$OUT/more.log" | head; tail -2 "$OUT/more.log"
NVFP4_AOT_REQUIRE_GPU=1 timeout 60 python3 -m pytest -v tests/test_quantizer_gpu.py -k "k6144 or k10240" -p no:cacheprovider 2>&1 | grep "PASSED\|FAILED\|passed\|failed"
echo "=== sanitizers, 32-row decode family $(date -u +%T)"
for tool in memcheck racecheck; do
  timeout 60 compute-sanitizer --tool $tool --error-exitcode 9 python3 -m nvfp4_aot verify --kernel sm90_nvfp4_grouped_gemm_decode32 \
    --shape 200,256,512 --shape 72,384,256 --shape 1000,1536,2048 --out-dtype bfloat16 --alpha > "$OUT/${tool}_decode32.log" 2>&1
  echo "$tool decode32 per-group exit code: $?"; grep -m 4 "Error\|SUMMARY" "$OUT/${tool}_decode32.log"
  timeout 80 compute-sanitizer --tool $tool --error-exitcode 9 python3 -m nvfp4_aot verify --kernel sm90_nvfp4_grouped_gemm_decode32 \
    --moe 130,128,256 --tokens 32 --top-k 8 --layout contiguous --layout masked --routings 3 > "$OUT/${tool}_decode32_moe.log" 2>&1
  echo "MoE $tool decode32 exit code: $?"; grep -m 4 "Error\|SUMMARY" "$OUT/${tool}_decode32_moe.log"
done
echo "=== bench_moe_layer $(date -u +%T)"
timeout 150 python3 bench/bench_moe_layer.py --json "$OUT/bench_moe_layer.json" > "$OUT/bench_moe_layer.txt" 2>&1
echo "exit $?"; tail -20 "$OUT/bench_moe_layer.txt"
date -u
cd "$OUT" && tar czf ../call1_out.tgz . && mv ../call1_out.tgz .
