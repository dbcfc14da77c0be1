#!/usr/bin/env bash
# Session 30 call B (`bash docs/h200/session30/prepare.sh` first, on the CPU machine):
#  1. `both` (main's kernel with make_variants.py's padguard and mslots2 edits) through
#     the quantizer's whole GPU suite (require-GPU) on a copy of main's artifacts holding
#     its cubin, then memcheck + racecheck on its plain-aligned and masked tests;
#  2. replay comparison, 5 alternating passes: main (mslots), plainaligned (session 28),
#     padguard, mslots2, both;
#  3. bench_quantize.py with `both`'s cubin.
set -u
OUT=${OUT:-out}; OUT=$(realpath "$OUT"); mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 NVFP4_AOT_REQUIRE_GPU=1
date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
ROOT=$PWD
rm -rf /tmp/both && cp -r scratch/tree/artifacts /tmp/both && cp scratch/both/* /tmp/both/
cd scratch/tree
export PYTHONPATH=$PWD NVFP4_AOT_SHAPES=$PWD/tests/data/shapes.json NVFP4_AOT_ARTIFACTS=/tmp/both
timeout 100 python3 -m pytest -q -p no:cacheprovider -rf tests/test_quantizer_gpu.py > "$OUT/both_tests.log" 2>&1
echo "both tests exit $?"; grep FAILED "$OUT/both_tests.log" | head; tail -n 1 "$OUT/both_tests.log"; date -u
for tool in memcheck racecheck; do
  NVFP4_AOT_QUANT_ROUTINGS=2 timeout 70 compute-sanitizer --tool $tool --error-exitcode 9 \
    python3 -m pytest -q -p no:cacheprovider tests/test_quantizer_gpu.py \
    -k "masked or T1024 or T128 or T129" > "$OUT/both_${tool}.log" 2>&1
  echo "both $tool exit $?"; grep -E "SUMMARY|passed|failed" "$OUT/both_${tool}.log" | tail -n 2
done; date -u
unset NVFP4_AOT_ARTIFACTS
(cd "$ROOT" && PYTHONPATH=$ROOT timeout 150 python3 scratch/qcompare.py --passes 5 --json "$OUT/compare.json" \
  main=scratch/mslots plainaligned=scratch/plainaligned padguard=scratch/padguard \
  mslots2=scratch/mslots2 both=scratch/both > "$OUT/compare.txt" 2>&1)
echo "compare exit $?"; cut -c1-240 "$OUT/compare.txt"; date -u
NVFP4_AOT_ARTIFACTS=/tmp/both timeout 100 python3 bench/bench_quantize.py --json "$OUT/bench_quantize.json" \
  > "$OUT/bench_quantize.txt" 2>&1
echo "bench exit $?"; cut -c1-190 "$OUT/bench_quantize.txt" | tail -n 30; date -u
