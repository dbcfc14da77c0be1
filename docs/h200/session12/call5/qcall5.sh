#!/usr/bin/env bash
# session 12 call 5: 64-block units with 32 / 24 warps an SM (w8c4s64, w8c3s64) against the
# tree's configuration (cur), same run; the 64-block units' tie test failure in detail.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT/r"
export PYTHONUNBUFFERED=1
ROOT=$PWD
date -u
for v in w8c4s64 s64; do
  cd "$ROOT/scratch/$v"; export PYTHONPATH=$PWD NVFP4_AOT_ARTIFACTS=$PWD/artifacts
  echo "=== $v tests"
  NVFP4_AOT_REQUIRE_GPU=1 timeout 200 python3 -m pytest -q -p no:cacheprovider --tb=line tests/test_quantizer_gpu.py > "$OUT/r/${v}_tests.log" 2>&1
  echo "exit $?"; grep -E "^FAILED|passed|failed" "$OUT/r/${v}_tests.log" | head -12 | cut -c1-300
done
for v in w8c4s64 cur w8c3s64; do
  echo "=== bench $v"
  cd "$ROOT/scratch/$v"; export PYTHONPATH=$PWD NVFP4_AOT_ARTIFACTS=$PWD/artifacts
  timeout 200 python3 bench/bench_quantize.py --json "$OUT/r/bench_$v.json" > "$OUT/r/bench_$v.txt" 2>&1
  echo "bench exit $?"; head -19 "$OUT/r/bench_$v.txt" | cut -c1-100
done
cd "$ROOT"; tar -czf "$OUT/call5.tgz" -C "$OUT" r; rm -rf "$OUT/r"; date -u
