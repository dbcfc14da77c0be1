#!/usr/bin/env bash
# session 15 call 2 (#16): scratch/short = the quantizer with a row's short last segment
# quantizing only the lane blocks it has columns for (k = 7168: every fourth unit did
# twice the math it needed). Its quantizer GPU tests (require-GPU), graph replay against
# the committed kernel (base) in alternating passes, and ncu on the committed kernel
# (warm L2 and boost clocks as in graph replay): warp states, scheduler, instructions.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
ROOT=$PWD
date -u
cd "$ROOT/scratch/short"; export PYTHONPATH=$PWD NVFP4_AOT_ARTIFACTS=$PWD/artifacts
echo "=== short: quantizer GPU tests $(date -u +%T)"
NVFP4_AOT_REQUIRE_GPU=1 timeout 150 python3 -m pytest -q -p no:cacheprovider --tb=short tests/test_quantizer_gpu.py > "$OUT/tests_short.log" 2>&1
echo "exit $?"; grep -E "FAILED|Error" "$OUT/tests_short.log" | head -5; tail -1 "$OUT/tests_short.log" | cut -c1-300
cd "$ROOT"; export PYTHONPATH=$PWD; unset NVFP4_AOT_ARTIFACTS
echo "=== compare $(date -u +%T)"
timeout 150 python3 scratch/qcompare.py --passes 3 --json "$OUT/compare.json" base=scratch/base/artifacts \
  short=scratch/short/artifacts 2>&1 | tee "$OUT/compare.txt"
for s in 1024x4096 1024x7168 contig; do
  echo "=== ncu $s $(date -u +%T)"
  timeout 120 ncu --cache-control none --clock-control none -k regex:kernel --launch-skip 3 --launch-count 1 \
    --section SchedulerStats --section WarpStateStats --section InstructionStats --section LaunchStats \
    --section Occupancy --section SpeedOfLight --section MemoryWorkloadAnalysis \
    python3 scratch/qprofile.py $s scratch/base/artifacts > "$OUT/ncu_$s.txt" 2>&1
  echo "exit $?"; grep -E "Duration|Issue Slots Busy|No Eligible|Executed Instructions  |Stall|Achieved Occupancy" "$OUT/ncu_$s.txt" | head -12
done
date -u
cd "$OUT" && tar czf ../call2_out.tgz . && rm -rf ./* && mv ../call2_out.tgz .
