#!/usr/bin/env bash
# session 16 call 2 (#16): ncu of why plain rows and masked E=256 max_m=64 are slower
# since the MoE-unit change. Plain 4096x4096 and 4096x2048 on tp2 (f62b81e) and lean
# (call 1's); masked E=256 max_m=64 k=7168 on lean's diagnostics: nopadstore (padding
# units store nothing) and nopadunits (no padding units at all); both write wrong
# padding scales: timing only.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
date -u
prof() {  # name shape artifacts
  timeout 90 ncu --cache-control none --clock-control none -k regex:kernel_cutlass --launch-skip 3 --launch-count 1 \
    --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis --section InstructionStats \
    --metrics regex:^smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio$,smsp__inst_executed.sum,dram__bytes_read.sum,dram__bytes_write.sum,sm__cycles_active.max,sm__cycles_active.min \
    python3 scratch/qprofile.py $2 $3 > "$OUT/ncu_$1.txt" 2>&1
  echo "== $1 exit $?"; grep -E "Duration|Elapsed Cyc|SM Active Cycles|sm__cycles_active|inst_executed.sum|dram__bytes" "$OUT/ncu_$1.txt" | head -9
}
for v in tp2 lean; do
  for s in 4096x4096 4096x2048; do prof plain_${s}_$v $s scratch/$v/artifacts; done
done
for v in lean nopadstore nopadunits tp2; do prof masked_$v masked scratch/$v/artifacts; done
date -u
cd "$OUT" && tar czf ../call2_out.tgz . && rm -rf ./* && mv ../call2_out.tgz .
