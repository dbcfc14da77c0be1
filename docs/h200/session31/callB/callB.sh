#!/usr/bin/env bash
# Session 31 call B, main after slotm (2e18e46 + the benchmark's alternating passes), on
# the H200 if one is lent, else on what comes. On the CPU machine first: scratch/rul0 as
# in call A (main's tree baked with ptxas --register-usage-level=0) and scratch/qcompare.py.
#  1. bench_quantize.py (require-GPU; ours and both copies in 3 alternating passes): #16's
#     rows on this card (H200: 1024 x 4096 needs 3.62 us for 70 %);
#  2. replay comparison, 5 alternating passes: main against rul0, two buffer sets each;
#  3. every GPU test (require-GPU).
set -u
OUT=${OUT:-out}; OUT=$(realpath "$OUT"); mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 NVFP4_AOT_REQUIRE_GPU=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
timeout 150 python3 bench/bench_quantize.py --json "$OUT/bench_quantize.json" > "$OUT/bench_quantize.txt" 2>&1
echo "bench exit $?"; cut -c1-190 "$OUT/bench_quantize.txt" | tail -n 30; date -u
PYTHONPATH=$PWD timeout 150 python3 scratch/qcompare.py --passes 5 --json "$OUT/compare.json" \
  main=artifacts rul0=scratch/rul0 main2=artifacts rul02=scratch/rul0 > "$OUT/compare.txt" 2>&1
echo "compare exit $?"; cut -c1-200 "$OUT/compare.txt"; date -u
timeout 330 python3 -m pytest -q -rf -m gpu tests/ -p no:cacheprovider > "$OUT/gpu_tests.log" 2>&1
echo "gpu tests exit $?"; grep -E "FAILED|ERROR" "$OUT/gpu_tests.log" | head; tail -n 1 "$OUT/gpu_tests.log"; date -u
