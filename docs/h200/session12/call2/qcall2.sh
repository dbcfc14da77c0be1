#!/usr/bin/env bash
# session 12 call 2: the staged quantizer with a unit's blocks in straight-line code (no
# division branch), interleave x stages x CTAs per SM, against the committed kernel.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
ROOT=$PWD
date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
SUBSET="T129-k160 or T3-k48 or E8-T300 or E8-maxm100 or padding_rows or ties"
for v in i4s3 base i2s2 i2s3 i4s2 w8i2s2 s64i2s3; do
  echo "=== $v"
  cd "$ROOT/scratch/$v"
  export PYTHONPATH=$PWD NVFP4_AOT_ARTIFACTS=$PWD/artifacts
  if [ "$v" != base ]; then
    NVFP4_AOT_REQUIRE_GPU=1 timeout 120 python3 -m pytest -q -x -p no:cacheprovider --tb=line tests/test_quantizer_gpu.py -k "$SUBSET" 2>&1 | tail -6 | cut -c1-600
  fi
  timeout 200 python3 bench/bench_quantize.py --json "$OUT/bench_$v.json" > "$OUT/bench_$v.txt" 2>&1
  echo "bench exit $?"; head -19 "$OUT/bench_$v.txt" | cut -c1-100
done
cd "$ROOT"
date -u
