#!/usr/bin/env bash
# session 10 call 1: narrow-tile activation decode spread over all warps (new artifacts/)
# vs the committed decode family (scratch/old_artifacts), same run; same-bytes copy columns.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NVFP4_AOT_SHAPES=$PWD/tests/data/shapes.json
OLD=$PWD/scratch/old_artifacts
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "=== sanitizers, decode family"
for tool in memcheck racecheck; do
  timeout 100 compute-sanitizer --tool $tool --error-exitcode 9 python3 -m nvfp4_aot verify --kernel sm90_nvfp4_grouped_gemm_decode \
    --shape 200,256,512 --shape 72,384,256 --shape 1000,1536,2048 --out-dtype bfloat16 --alpha 2>&1 | tail -1
  echo "$tool per-group exit code: ${PIPESTATUS[0]}"
  timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 python3 -m nvfp4_aot verify --kernel sm90_nvfp4_grouped_gemm_decode \
    --moe 130,128,256 --tokens 8 --top-k 8 --layout contiguous --layout masked --routings 3 2>&1 | tail -1
  echo "MoE $tool exit code: ${PIPESTATUS[0]}"
done
echo "=== MoE, torch (torch.cuda.graph global mode), examples, quantizer GPU tests"
NVFP4_AOT_REQUIRE_GPU=1 timeout 200 python3 -m pytest -q tests/test_torch_gpu.py tests/test_examples_gpu.py tests/test_quantizer_gpu.py -p no:cacheprovider 2>&1 | tail -3
echo "=== ncu instructions per scheduler: E=128 (4096,7168) T=8, new then old"
NCU=$(command -v ncu || ls -d /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | tail -1)
M=gpu__time_duration.sum,smsp__inst_executed.avg,smsp__inst_executed.max,smsp__inst_executed.min,smsp__issue_active.avg.pct_of_peak_sustained_active,smsp__issue_active.max.pct_of_peak_sustained_active,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__registers_per_thread
for which in new old; do
  [ $which = old ] && export NVFP4_AOT_ARTIFACTS=$OLD
  timeout 200 "$NCU" --clock-control none --profile-from-start off --metrics $M --csv --print-units base \
    python3 bench/bench_decode.py --profile --experts 128 --tokens 8 --shape 4096,7168 --profile-runs 1 > "$OUT/ncu_$which.csv" 2>&1
  echo "ncu $which exit $?"; grep -v "^==PROF==" "$OUT/ncu_$which.csv" | grep "grouped_gemm\|kernel" | cut -c1-400 | head -20
  unset NVFP4_AOT_ARTIFACTS
done
date -u
