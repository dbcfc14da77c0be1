#!/usr/bin/env bash
# Session 21 call 6: timeline of "halves" (probe), and "halvesnow" (the second half's copy
# right after the first's) vs main and halves: replay + bytes.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD NVFP4_AOT_SHAPES=$PWD/tests/data/shapes.json
date -u
QCOMPARE_PLAIN_ONLY=1 timeout 200 python3 scratch/qcompare.py --passes 3 --json "$OUT/compare.json" base=scratch/base_art \
  halves=scratch/halves halvesnow=scratch/halvesnow 2>&1 | tee "$OUT/compare.txt"
timeout 120 python3 scratch/timeline.py scratch/halves scratch/tlhalves "$OUT/tlhalves" > "$OUT/timeline_halves.txt" 2>&1
echo "timeline exit $?"
grep -E "===|data 0 arrived \(after|unit 0 math|span" "$OUT"/timeline_*.txt | head -12
date -u
cd "$OUT" && tar czf ../out.tgz . && rm -rf ./* && mv ../out.tgz .
