#!/usr/bin/env bash
# session 15 call 1: the quantizer's input in parts (#16). scratch/halves: each stage's copy
# in two pieces (a cp.async.bulk and an mbarrier each), a lane quantizes its first two
# blocks once the first piece is in; scratch/quarters: four pieces, one block at a time;
# scratch/halves3: halves with 3 stages; scratch/base: the committed kernel rebaked
# (byte-identical). Quantizer GPU tests (require-GPU) on each, memcheck + racecheck on
# halves, then every variant's graph replay on #16's shapes in alternating passes.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
ROOT=$PWD
date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
for v in halves quarters halves3; do
  cd "$ROOT/scratch/$v"; export PYTHONPATH=$PWD NVFP4_AOT_ARTIFACTS=$PWD/artifacts
  echo "=== $v: quantizer GPU tests $(date -u +%T)"
  NVFP4_AOT_REQUIRE_GPU=1 timeout 150 python3 -m pytest -q -p no:cacheprovider --tb=short tests/test_quantizer_gpu.py > "$OUT/tests_$v.log" 2>&1
  echo "exit $?"; grep -E "FAILED|Error" "$OUT/tests_$v.log" | head -5; tail -1 "$OUT/tests_$v.log" | cut -c1-300
done
cd "$ROOT/scratch/halves"; export PYTHONPATH=$PWD NVFP4_AOT_ARTIFACTS=$PWD/artifacts
for tool in memcheck racecheck; do
  NVFP4_AOT_QUANT_ROUTINGS=2 NVFP4_AOT_REQUIRE_GPU=1 timeout 100 compute-sanitizer --tool $tool --error-exitcode 9 \
    python3 -m pytest -q -x -p no:cacheprovider tests/test_quantizer_gpu.py \
    -k "T129-k160 or T3-k48 or E8-T300 or E8-maxm100 or padding_rows or E256-T512" > "$OUT/${tool}_halves.log" 2>&1
  echo "$tool halves exit $?"; grep -E "SUMMARY|passed|failed" "$OUT/${tool}_halves.log" | tail -2
done
cd "$ROOT"; export PYTHONPATH=$PWD; unset NVFP4_AOT_ARTIFACTS
echo "=== compare $(date -u +%T)"
timeout 200 python3 scratch/qcompare.py --passes 3 --json "$OUT/compare.json" base=scratch/base/artifacts \
  halves=scratch/halves/artifacts quarters=scratch/quarters/artifacts halves3=scratch/halves3/artifacts 2>&1 | tee "$OUT/compare.txt"
date -u
cd "$OUT" && tar czf ../call1_out.tgz . && rm -rf ./* && mv ../call1_out.tgz .
