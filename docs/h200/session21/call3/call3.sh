#!/usr/bin/env bash
# Session 21 call 3: claimed second halves in the last round ("share": 2 CTAs of 8 warps,
# "share512": 1 CTA of 16 warps) vs main and b512: replay + bytes; timelines; quantizer GPU
# tests of both (require-GPU, NVFP4_AOT_ARTIFACTS).
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD NVFP4_AOT_SHAPES=$PWD/tests/data/shapes.json
date -u
timeout 240 python3 scratch/qcompare.py --passes 3 --json "$OUT/compare.json" base=scratch/base_art \
  b512=scratch/b512 share=scratch/share share512=scratch/share512 2>&1 | tee "$OUT/compare.txt"
timeout 120 python3 scratch/timeline.py scratch/share scratch/tlshare "$OUT/tlshare" > "$OUT/timeline_share.txt" 2>&1
echo "timeline exit $?"
timeout 120 python3 scratch/timeline.py scratch/share512 scratch/tlshare512 "$OUT/tlshare512" > "$OUT/timeline_share512.txt" 2>&1
echo "timeline exit $?"
grep -E "===|data 0 arrived \(after|unit 0 math|span" "$OUT"/timeline_*.txt | head -40
export NVFP4_AOT_REQUIRE_GPU=1
for v in share share512; do
  NVFP4_AOT_ARTIFACTS=$PWD/scratch/$v timeout 150 python3 -m pytest -q -p no:cacheprovider --tb=short tests/test_quantizer_gpu.py > "$OUT/tests_quantizer_$v.log" 2>&1
  echo "$v tests exit $?"; grep FAILED "$OUT/tests_quantizer_$v.log" | head; tail -1 "$OUT/tests_quantizer_$v.log"
done
date -u
cd "$OUT" && tar czf ../out.tgz . && rm -rf ./* && mv ../out.tgz .
