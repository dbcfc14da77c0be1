#!/usr/bin/env bash
# Session 21 call 1: b512 (one CTA of 16 warps an SM) vs main: replay, bytes; per-warp
# timelines (with %warpid, cta) of main and b512.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD NVFP4_AOT_SHAPES=$PWD/tests/data/shapes.json
date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv
timeout 200 python3 scratch/qcompare.py --passes 3 --json "$OUT/compare.json" base=scratch/base_art \
  b512=scratch/b512 2>&1 | tee "$OUT/compare.txt"
timeout 120 python3 scratch/timeline.py scratch/base_art scratch/tlbase "$OUT/tlbase" > "$OUT/timeline_base.txt" 2>&1
echo "timeline exit $?"
timeout 120 python3 scratch/timeline.py scratch/b512 scratch/tlb512 "$OUT/tlb512" > "$OUT/timeline_b512.txt" 2>&1
echo "timeline exit $?"
grep -E "===|data 0 arrived \(after|unit 0 math|span" "$OUT"/timeline_*.txt | head -60
date -u
cd "$OUT" && tar czf ../out.tgz . && rm -rf ./* && mv ../out.tgz .
