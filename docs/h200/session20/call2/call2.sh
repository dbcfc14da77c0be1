#!/usr/bin/env bash
# Session 20 call 2: the plan words and a plain run's first unit descriptions read before
# griddepcontrol.wait, the global scale after the first copies start (artifacts/ = the
# candidate's sm_90a quantizer) vs main's (scratch/base_art): replay comparison; timeline
# probe of the candidate (scratch/tlpre_art); quantizer GPU tests (require-GPU).
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD NVFP4_AOT_SHAPES=$PWD/tests/data/shapes.json
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 150 python3 scratch/qcompare.py --passes 3 --json "$OUT/compare.json" base=scratch/base_art \
  pre=artifacts 2>&1 | tee "$OUT/compare.txt"
timeout 100 python3 scratch/timeline.py scratch/base_art scratch/tlpre_art "$OUT/tl" > "$OUT/timeline.txt" 2>&1
echo "timeline exit $?"; grep -E "===|copy issued|data 0 arrived \(after|span" "$OUT/timeline.txt" | head -40
export NVFP4_AOT_REQUIRE_GPU=1
timeout 120 python3 -m pytest -q -p no:cacheprovider --tb=short tests/test_quantizer_gpu.py > "$OUT/tests_quantizer.log" 2>&1
echo "exit $?"; grep FAILED "$OUT/tests_quantizer.log" | head; tail -1 "$OUT/tests_quantizer.log"
date -u
cd "$OUT" && tar czf ../out.tgz . && rm -rf ./* && mv ../out.tgz .
