#!/usr/bin/env bash
# session 11 call 3: tile posts + PDL + warp tile range + shared-memory tensormap updates
# (new artifacts/) vs session 10's kernels (scratch/old_artifacts): GPU suite, MoE, torch,
# examples and quantizer tests, sanitizers, bench_decode both, same run.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NVFP4_AOT_SHAPES=$PWD/tests/data/shapes.json
OLD=$PWD/scratch/old_artifacts
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "=== GPU suite (h200_batch tests step), new artifacts"
NVFP4_AOT_REQUIRE_GPU=1 timeout 300 python3 -m pytest -q -x -m gpu tests/ -p no:cacheprovider \
  --ignore=tests/test_jax_gpu.py --ignore=tests/test_quantizer_gpu.py --ignore=tests/test_torch_gpu.py 2>&1 | tail -3
echo "pytest exit code: ${PIPESTATUS[0]}"
echo "=== MoE, torch (torch.cuda.graph global mode), examples, quantizer, JAX GPU tests"
NVFP4_AOT_REQUIRE_GPU=1 timeout 300 python3 -m pytest -q -x tests/test_moe_gpu.py tests/test_torch_gpu.py tests/test_examples_gpu.py tests/test_quantizer_gpu.py tests/test_jax_gpu.py -p no:cacheprovider 2>&1 | tail -3
echo "pytest exit code: ${PIPESTATUS[0]}"
echo "=== sanitizers"
for tool in memcheck racecheck; do
  for fam in sm90_nvfp4_grouped_gemm_decode sm90_nvfp4_grouped_gemm; do
    timeout 100 compute-sanitizer --tool $tool --error-exitcode 9 python3 -m nvfp4_aot verify --kernel $fam \
      --shape 200,256,512 --shape 72,384,256 --shape 1000,1536,2048 --out-dtype bfloat16 --alpha 2>&1 | tail -1
    echo "$tool $fam per-group exit code: ${PIPESTATUS[0]}"
  done
  timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 python3 -m nvfp4_aot verify --kernel sm90_nvfp4_grouped_gemm_decode \
    --moe 130,128,256 --tokens 8 --top-k 8 --layout contiguous --layout masked --routings 3 2>&1 | tail -1
  echo "MoE $tool exit code: ${PIPESTATUS[0]}"
done
echo "=== bench_decode: new (all 72), then old (all 72), same run"
timeout 300 python3 bench/bench_decode.py --budget-s 200 --json "$OUT/decode_new.json" 2> "$OUT/decode_new.log" > "$OUT/decode_new.txt"
echo "new exit $?"; tail -2 "$OUT/decode_new.txt"
NVFP4_AOT_ARTIFACTS=$OLD timeout 240 python3 bench/bench_decode.py --budget-s 200 \
  --json "$OUT/decode_old.json" 2> "$OUT/decode_old.log" > "$OUT/decode_old.txt"
echo "old exit $?"; tail -2 "$OUT/decode_old.txt"
python3 "$(dirname "$0")"/compare.py "$OUT/decode_new.json" "$OUT/decode_old.json"
date -u
