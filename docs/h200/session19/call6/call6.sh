#!/usr/bin/env bash
# Session 19 call 6: the tree to commit (the quantizer with PDL, rebaked for every arch).
# First the PDL chain test against a deliberately broken quantizer (use_pdl, no
# griddepcontrol.wait: scratch/nowait_art), which it must catch; then the whole GPU suite,
# require-GPU on.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD NVFP4_AOT_SHAPES=$PWD/tests/data/shapes.json
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for i in 1 2 3; do
  NVFP4_AOT_ARTIFACTS=$PWD/scratch/nowait_art NVFP4_AOT_REQUIRE_GPU=1 timeout 60 python3 -m pytest -q \
    -p no:cacheprovider --tb=line tests/test_quantizer_gpu.py -k wait_for > "$OUT/nowait_$i.log" 2>&1
  echo "broken quantizer, try $i: exit $? (1 = the test caught it)"; grep -E "attempt|passed|failed" "$OUT/nowait_$i.log" | cut -c1-220 | tail -2
done
NVFP4_AOT_REQUIRE_GPU=1 timeout 330 python3 -m pytest -q -p no:cacheprovider -rf -m gpu tests/ > "$OUT/suite.log" 2>&1
echo "suite exit $?"; grep FAILED "$OUT/suite.log" | head; tail -1 "$OUT/suite.log"
date -u
cd "$OUT" && tar czf ../final_out.tgz . && rm -rf ./* && mv ../final_out.tgz .
