#!/usr/bin/env bash
# session 12 call 1: the staged quantizer (bulk copies into per-warp shared-memory rings)
# in four shapes of ring against the committed kernel (scratch/base), same run.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
ROOT=$PWD
date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
SUBSET="T129-k160 or T3-k48 or E8-T300 or E8-maxm100 or padding_rows or ties"
for v in q3 base q2 s64q3 s64q4 q4 q3w8; do
  echo "=== $v"
  cd "$ROOT/scratch/$v"
  export PYTHONPATH=$PWD NVFP4_AOT_ARTIFACTS=$PWD/artifacts
  if [ "$v" != base ]; then
    NVFP4_AOT_REQUIRE_GPU=1 timeout 120 python3 -m pytest -q -x -p no:cacheprovider tests/test_quantizer_gpu.py -k "$SUBSET" 2>&1 | tail -4
  fi
  timeout 200 python3 bench/bench_quantize.py --json "$OUT/bench_$v.json" > "$OUT/bench_$v.txt" 2>&1
  echo "bench exit $?"; head -19 "$OUT/bench_$v.txt" | cut -c1-100
done
cd "$ROOT"
date -u
