#!/usr/bin/env bash
# session 12 call 6: the quantizer with warp-batched unit descriptions (scratch/bat, the
# tree's kernel): all its GPU tests and the torch / examples / JAX ones that run it,
# sanitizers, benches against the previous configuration (cur) and the committed one (base),
# ncu on three runs.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT/r"
export PYTHONUNBUFFERED=1
ROOT=$PWD
date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
export PYTHONPATH=$ROOT NVFP4_AOT_ARTIFACTS=$ROOT/scratch/bat/artifacts NVFP4_AOT_REQUIRE_GPU=1
echo "=== bat: quantizer, torch, examples, JAX GPU tests"
timeout 300 python3 -m pytest -q -p no:cacheprovider --tb=line tests/test_quantizer_gpu.py > "$OUT/r/quant_tests.log" 2>&1
echo "quantizer pytest exit $?"; tail -2 "$OUT/r/quant_tests.log" | cut -c1-600
timeout 300 python3 -m pytest -q -p no:cacheprovider --tb=line tests/test_torch_gpu.py tests/test_examples_gpu.py tests/test_jax_gpu.py > "$OUT/r/torch_jax_tests.log" 2>&1
echo "torch/examples/jax pytest exit $?"; tail -2 "$OUT/r/torch_jax_tests.log" | cut -c1-600
echo "=== bat: sanitizers"
QUANT_SUBSET="T129-k160 or T3-k48 or E8-T300 or E8-maxm100 or padding_rows or E256-T512"
for tool in memcheck racecheck; do
  NVFP4_AOT_QUANT_ROUTINGS=2 timeout 200 compute-sanitizer --tool $tool \
    --error-exitcode 9 python3 -m pytest -q -x -p no:cacheprovider tests/test_quantizer_gpu.py \
    -k "$QUANT_SUBSET" > "$OUT/r/$tool.log" 2>&1
  echo "quant $tool exit code: $?"; grep -E "SUMMARY|passed|failed" "$OUT/r/$tool.log" | tail -3
done
unset NVFP4_AOT_REQUIRE_GPU
for v in bat cur base; do
  echo "=== bench $v"
  cd "$ROOT/scratch/$v"; export PYTHONPATH=$PWD NVFP4_AOT_ARTIFACTS=$PWD/artifacts
  timeout 200 python3 bench/bench_quantize.py --json "$OUT/r/bench_$v.json" > "$OUT/r/bench_$v.txt" 2>&1
  echo "bench exit $?"; head -19 "$OUT/r/bench_$v.txt" | cut -c1-100
done
cd "$ROOT"; export PYTHONPATH=$ROOT NVFP4_AOT_ARTIFACTS=$ROOT/scratch/bat/artifacts
echo "=== bat: ncu (clocks locked at base, caches flushed: longer than graph replay)"
for args in "plain 1024 4096" "contiguous 128 1024 2048" "plain 16384 7168"; do
  timeout 120 ncu --kernel-name regex:kernel_cutlass --launch-skip 2 --launch-count 1 \
    --section SpeedOfLight --section SchedulerStats --section WarpStateStats --section Occupancy \
    --section LaunchStats --section SourceCounters python3 scratch/q_ncu.py $args > "$OUT/r/ncu_${args// /_}.txt" 2>&1
  echo "ncu $args exit $?"
  grep -E "Duration|No Eligible|Active Warps Per Scheduler|Eligible Warps|Warp Cycles Per Issued|DRAM Throughput|Memory Throughput" "$OUT/r/ncu_${args// /_}.txt" | head -10
done
tar -czf "$OUT/call6.tgz" -C "$OUT" r; rm -rf "$OUT/r"; date -u
