#!/usr/bin/env bash
# session 16 call 8 (#16): where a decode-size contiguous run's 5.5 us go. nopad = the
# committed kernel without the padding zeroing (wrong padding scales: timing only),
# replay vs committed; ncu of the committed kernel on contiguous E=128, T=1 (top-8: 8
# rows), k=2048 and on plain 1x4096 (stall reasons, source counters).
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
date -u
timeout 100 python3 scratch/qcompare.py --passes 5 --json "$OUT/compare.json" base=artifacts \
  nopad=scratch/nopad/artifacts 2>&1 | tee "$OUT/compare.txt"
for s in contigT 1x4096; do
  timeout 90 ncu --cache-control none --clock-control none -k regex:kernel_cutlass --launch-skip 3 --launch-count 1 \
    --section SpeedOfLight --section LaunchStats --section WarpStateStats --section SourceCounters \
    --metrics regex:^smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio$,smsp__inst_executed.sum,sm__cycles_active.max \
    python3 scratch/qprofile.py $s artifacts > "$OUT/ncu_$s.txt" 2>&1
  echo "== $s exit $?"; grep -E "Duration|Elapsed Cyc|sm__cycles_active|inst_executed.sum" "$OUT/ncu_$s.txt" | head -5
done
date -u
cd "$OUT" && tar czf ../call8_out.tgz . && rm -rf ./* && mv ../call8_out.tgz .
