#!/usr/bin/env bash
# Session 20 call 5: "g1" (artifacts/) = call 2's "pre" + the global scale read right
# after griddepcontrol.wait and the prologue's first copies without the proxy fence (a
# stage not read yet; the fence's MEMBAR made the copy wait for the loads in flight) vs
# pre (scratch/pre) and main (scratch/base_art): replay; timeline probe of g1; quantizer
# GPU tests (require-GPU).
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD NVFP4_AOT_SHAPES=$PWD/tests/data/shapes.json
date -u
timeout 200 python3 scratch/qcompare.py --passes 3 --json "$OUT/compare.json" base=scratch/base_art \
  pre=scratch/pre g1=artifacts 2>&1 | tee "$OUT/compare.txt"
timeout 100 python3 scratch/timeline.py scratch/base_art scratch/tlg1 "$OUT/tl" > "$OUT/timeline.txt" 2>&1
echo "timeline exit $?"; grep -E "===|copy issued|prologue done|data 0 arrived \(after|unit 0 math|span" "$OUT/timeline.txt" | head -60
export NVFP4_AOT_REQUIRE_GPU=1
timeout 120 python3 -m pytest -q -p no:cacheprovider --tb=short tests/test_quantizer_gpu.py > "$OUT/tests_quantizer.log" 2>&1
echo "exit $?"; grep FAILED "$OUT/tests_quantizer.log" | head; tail -1 "$OUT/tests_quantizer.log"
date -u
cd "$OUT" && tar czf ../out.tgz . && rm -rf ./* && mv ../out.tgz .
