#!/usr/bin/env bash
# session 11 call 5: final kernels (posts read by lane 0 and shuffled; warp sync before the
# shared-memory descriptor rewrite): sanitizers on per-group and MoE runs of both per-CTA
# families, GPU suite, MoE, torch, examples, quantizer and JAX GPU tests.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NVFP4_AOT_SHAPES=$PWD/tests/data/shapes.json
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for tool in racecheck memcheck; do
  for fam in sm90_nvfp4_grouped_gemm_decode sm90_nvfp4_grouped_gemm; do
    timeout 100 compute-sanitizer --tool $tool --error-exitcode 9 python3 -m nvfp4_aot verify --kernel $fam \
      --shape 200,256,512 --shape 72,384,256 --shape 1000,1536,2048 --out-dtype bfloat16 --alpha > "$OUT/${tool}_$fam.log" 2>&1
    echo "$tool $fam per-group exit code: $?"; grep -m 6 "Error\|SUMMARY" "$OUT/${tool}_$fam.log"
  done
  timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 python3 -m nvfp4_aot verify --kernel sm90_nvfp4_grouped_gemm_decode \
    --moe 130,128,256 --tokens 8 --top-k 8 --layout contiguous --layout masked --routings 3 2>&1 | tail -1
  echo "MoE $tool exit code: ${PIPESTATUS[0]}"
done
echo "=== GPU suite (h200_batch tests step)"
NVFP4_AOT_REQUIRE_GPU=1 timeout 300 python3 -m pytest -q -x -m gpu tests/ -p no:cacheprovider \
  --ignore=tests/test_jax_gpu.py --ignore=tests/test_quantizer_gpu.py --ignore=tests/test_torch_gpu.py 2>&1 | tail -2
echo "pytest exit code: ${PIPESTATUS[0]}"
echo "=== MoE, torch, examples, quantizer, JAX GPU tests"
NVFP4_AOT_REQUIRE_GPU=1 timeout 300 python3 -m pytest -q -x tests/test_moe_gpu.py tests/test_torch_gpu.py tests/test_examples_gpu.py tests/test_quantizer_gpu.py tests/test_jax_gpu.py -p no:cacheprovider 2>&1 | tail -2
echo "pytest exit code: ${PIPESTATUS[0]}"
python3 -c "import hashlib,pathlib; print('manifest sha256', hashlib.sha256(pathlib.Path('artifacts/manifest.json').read_bytes()).hexdigest()[:16])"
echo "=== bench_decode (final code, plan's choice)"
timeout 240 python3 bench/bench_decode.py --budget-s 200 --json "$OUT/bench_decode.json" 2> "$OUT/bench_decode.log" > "$OUT/bench_decode.txt"
echo "exit $?"; tail -2 "$OUT/bench_decode.txt"
echo "=== bench_moe_layer --quick"
timeout 120 python3 bench/bench_moe_layer.py --quick 2>&1 | tail -6
date -u
