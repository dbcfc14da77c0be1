#!/usr/bin/env bash
# Session 30 call F: `hoist` (the routing's run and plan words read before the PDL wait,
# so that the counts' load no longer waits for its pointer's: call E's nocount probe took
# 0.4 us off the masked decode row, and the SASS showed the pointer loaded after the
# wait) baked for sm_90a in scratch/hoist: the quantizer's whole GPU suite (require-GPU)
# on a copy of main's artifacts holding its cubin, racecheck on its MoE tests, then a
# replay comparison against main (and main2, the buffer control), 3 passes.
set -u
OUT=${OUT:-out}; OUT=$(realpath "$OUT"); mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
rm -rf /tmp/hoist && cp -r artifacts /tmp/hoist && cp scratch/hoist/* /tmp/hoist/
NVFP4_AOT_REQUIRE_GPU=1 NVFP4_AOT_ARTIFACTS=/tmp/hoist timeout 100 python3 -m pytest -q -p no:cacheprovider -rf \
  tests/test_quantizer_gpu.py > "$OUT/hoist_tests.log" 2>&1
echo "hoist tests exit $?"; grep FAILED "$OUT/hoist_tests.log" | head; tail -n 1 "$OUT/hoist_tests.log"; date -u
NVFP4_AOT_REQUIRE_GPU=1 NVFP4_AOT_ARTIFACTS=/tmp/hoist NVFP4_AOT_QUANT_ROUTINGS=2 timeout 60 compute-sanitizer \
  --tool memcheck --error-exitcode 9 python3 -m pytest -q -p no:cacheprovider tests/test_quantizer_gpu.py \
  -k "masked or contiguous" > "$OUT/hoist_memcheck.log" 2>&1
echo "hoist memcheck exit $?"; grep -E "SUMMARY|passed|failed" "$OUT/hoist_memcheck.log" | tail -n 2; date -u
PYTHONPATH=$PWD timeout 150 python3 scratch/qcompare.py --passes 3 --json "$OUT/compare.json" \
  main=artifacts main2=artifacts hoist=scratch/hoist > "$OUT/compare.txt" 2>&1
echo "compare exit $?"; cut -c1-200 "$OUT/compare.txt"; date -u
