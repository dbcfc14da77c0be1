#!/usr/bin/env bash
# session 15 call 3 (#16): the short-segment quantizer (call 2's) with its block math in
# two phases: every interleaved block's scale chain first (amax, E4M3 byte, multiplier),
# then the element math from the stage again (tp2: 2 blocks at a time; tp4: all 4 of a
# lane). Graph replay against the committed kernel (base) and short, alternating passes;
# bytes compared with base's on every shape. ncu of the committed kernel: stall reasons.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
date -u
timeout 200 python3 scratch/qcompare.py --passes 3 --json "$OUT/compare.json" base=scratch/base/artifacts \
  short=scratch/short/artifacts tp2=scratch/tp2/artifacts tp4=scratch/tp4/artifacts 2>&1 | tee "$OUT/compare.txt"
for s in 1024x4096 contig; do
  echo "=== ncu base $s $(date -u +%T)"
  timeout 120 ncu --cache-control none --clock-control none -k regex:kernel_cutlass --launch-skip 3 --launch-count 1 \
    --section SchedulerStats --section WarpStateStats --section SpeedOfLight --section InstructionStats \
    --metrics regex:^smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio$ \
    python3 scratch/qprofile.py $s scratch/base/artifacts > "$OUT/ncu_$s.txt" 2>&1
  echo "exit $?"; grep -E "Duration|SM Active|Elapsed Cyc|Issued Warp|Executed Instructions  " "$OUT/ncu_$s.txt" | head -6
done
date -u
cd "$OUT" && tar czf ../call3_out.tgz . && rm -rf ./* && mv ../call3_out.tgz .
