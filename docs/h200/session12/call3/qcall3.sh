#!/usr/bin/env bash
# session 12 call 3: the staged quantizer as configured in the tree (256 threads, 2 stages
# a warp, 2 CTAs an SM; scratch/cur), its GPU tests and sanitizers, benches against the
# committed kernel and two other configurations, ncu on a 1024-row and a contiguous run.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
ROOT=$PWD
date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
cd "$ROOT/scratch/cur"; export PYTHONPATH=$PWD NVFP4_AOT_ARTIFACTS=$PWD/artifacts
echo "=== cur: quantizer GPU tests"
NVFP4_AOT_REQUIRE_GPU=1 timeout 300 python3 -m pytest -q -p no:cacheprovider --tb=line tests/test_quantizer_gpu.py > "$OUT/cur_tests.log" 2>&1
echo "pytest exit $?"; tail -4 "$OUT/cur_tests.log" | cut -c1-800
for v in cur base cur_s3 cur_w4; do
  echo "=== bench $v"
  cd "$ROOT/scratch/$v"; export PYTHONPATH=$PWD NVFP4_AOT_ARTIFACTS=$PWD/artifacts
  timeout 200 python3 bench/bench_quantize.py --json "$OUT/bench_$v.json" > "$OUT/bench_$v.txt" 2>&1
  echo "bench exit $?"; head -19 "$OUT/bench_$v.txt" | cut -c1-130
done
cd "$ROOT/scratch/cur"; export PYTHONPATH=$PWD NVFP4_AOT_ARTIFACTS=$PWD/artifacts
echo "=== cur: sanitizers"
QUANT_SUBSET="T129-k160 or T3-k48 or E8-T300 or E8-maxm100 or padding_rows"
for tool in memcheck racecheck; do
  NVFP4_AOT_QUANT_ROUTINGS=2 NVFP4_AOT_REQUIRE_GPU=1 timeout 200 compute-sanitizer --tool $tool \
    --error-exitcode 9 python3 -m pytest -q -x -p no:cacheprovider tests/test_quantizer_gpu.py \
    -k "$QUANT_SUBSET" > "$OUT/cur_$tool.log" 2>&1
  echo "quant $tool exit code: $?"; grep -E "SUMMARY|passed|failed" "$OUT/cur_$tool.log" | tail -3
done
echo "=== cur: ncu"
for args in "plain 1024 4096" "contiguous 128 1024 2048" "plain 4096 2048"; do
  timeout 120 ncu --kernel-name regex:kernel_cutlass --launch-skip 2 --launch-count 1 \
    --section SpeedOfLight --section SchedulerStats --section WarpStateStats --section Occupancy \
    --section LaunchStats --section SourceCounters python3 "$ROOT/scratch/q_ncu.py" $args > "$OUT/ncu_${args// /_}.txt" 2>&1
  echo "ncu $args exit $?"
  grep -E "Duration|Issue Slots Busy|No Eligible|Active Warps Per Scheduler|Eligible Warps|Warp Cycles Per Issued|Achieved Occupancy|DRAM Throughput|Stall|stall" "$OUT/ncu_${args// /_}.txt" | head -24
done
cd "$ROOT"; date -u
