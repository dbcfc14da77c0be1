#!/usr/bin/env bash
# session 13 call 7: the 64-row tile family at TWO CTAs per SM
# (sm90_nvfp4_grouped_gemm_decode64, call 3's module with NUM_STAGES = 3 and the registry's
# blocks_per_sm=2: 64-row activation tiles, 96 registers with 13 spill instructions,
# 110,592 B of shared memory: twice the warps an SM of call 3's build; scratch/art_d64b =
# the committed artifacts + its 12 variants, every other cubin unchanged): its GPU tests,
# sanitizers, and bench_decode rows with 32-128 rows per expert, the plan's choice with
# the committed artifacts (128-row / a16 / 32-row families) against decode64 forced.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NVFP4_AOT_SHAPES=$PWD/tests/data/shapes.json
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
D64=sm90_nvfp4_grouped_gemm_decode64
echo "=== decode64: runtime + MoE GPU tests $(date -u +%T)"
NVFP4_AOT_ARTIFACTS=scratch/art_d64b NVFP4_AOT_REQUIRE_GPU=1 timeout 200 python3 -m pytest -q -rf -p no:cacheprovider \
  tests/test_runtime_gpu.py tests/test_moe_gpu.py -k decode64 > "$OUT/tests_d64.log" 2>&1
echo "pytest exit code: $?"; grep FAILED "$OUT/tests_d64.log" | head; tail -2 "$OUT/tests_d64.log"
echo "=== decode64: sanitizers $(date -u +%T)"
for tool in memcheck racecheck; do
  NVFP4_AOT_ARTIFACTS=scratch/art_d64b timeout 60 compute-sanitizer --tool $tool --error-exitcode 9 python3 -m nvfp4_aot verify --kernel $D64 \
    --shape 200,256,512 --shape 72,384,256 --shape 1000,1536,2048 --out-dtype bfloat16 --alpha > "$OUT/${tool}_d64.log" 2>&1
  echo "$tool decode64 per-group exit code: $?"; grep -m 3 "Error\|SUMMARY" "$OUT/${tool}_d64.log"
  NVFP4_AOT_ARTIFACTS=scratch/art_d64b timeout 80 compute-sanitizer --tool $tool --error-exitcode 9 python3 -m nvfp4_aot verify --kernel $D64 \
    --moe 130,128,256 --tokens 64 --top-k 8 --layout contiguous --layout masked --routings 3 > "$OUT/${tool}_d64_moe.log" 2>&1
  echo "MoE $tool decode64 exit code: $?"; grep -m 3 "Error\|SUMMARY" "$OUT/${tool}_d64_moe.log"
done
run() {  # name artifacts pass [--kernel family]
  local name=$1 art=$2 pass=$3; shift 3
  for rows in "64 512" "256 2048" "128 512" "128 2048"; do
    set -- $rows "$@"; e=$1; t=$2; shift 2
    NVFP4_AOT_ARTIFACTS=$art timeout 120 python3 bench/bench_decode.py --experts $e --tokens $t --budget-s 100 "$@" \
      --json "$OUT/bd_${name}_${pass}_E${e}T${t}.json" > /dev/null 2> "$OUT/bd_${name}_${pass}_E${e}T${t}.log"
    echo "$name pass $pass E=$e T=$t exit $?"
  done
}
echo "=== bench_decode: plan's choice (committed) vs decode64 forced $(date -u +%T)"
run committed artifacts 1
run d64 scratch/art_d64b 1 --kernel $D64
run d64 scratch/art_d64b 2 --kernel $D64
run committed artifacts 2
date -u
# only ~8 files come back from a call: one archive, nothing else
cd "$OUT" && tar czf ../call7_out.tgz . && rm -f ./* && mv ../call7_out.tgz .
