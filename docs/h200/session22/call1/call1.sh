#!/usr/bin/env bash
# Session 22 call 1: lds2 (conflict-free shared reads), wide (1 CTA of 16 warps), wideclaim
# (wide + single-round plain runs: warps claim (unit, block pair) tasks), wideclaimlds2:
# replay of the plain rows vs main, bytes; quantizer GPU tests of wideclaim / wideclaimlds2.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD NVFP4_AOT_SHAPES=$PWD/tests/data/shapes.json
date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv
QCOMPARE_PLAIN_ONLY=1 timeout 300 python3 scratch/qcompare.py --passes 3 --json "$OUT/compare.json" base=scratch/base_art \
  lds2=scratch/lds2 wide=scratch/wide wideclaim=scratch/wideclaim wideclaimlds2=scratch/wideclaimlds2 2>&1 | tee "$OUT/compare.txt"
export NVFP4_AOT_REQUIRE_GPU=1
for v in wideclaim wideclaimlds2; do
  NVFP4_AOT_ARTIFACTS=$PWD/scratch/$v timeout 120 python3 -m pytest -q -x -p no:cacheprovider --tb=short tests/test_quantizer_gpu.py > "$OUT/tests_quantizer_$v.log" 2>&1
  echo "$v tests exit $?"; grep FAILED "$OUT/tests_quantizer_$v.log" | head -5; tail -1 "$OUT/tests_quantizer_$v.log"
done
date -u
cd "$OUT" && tar czf ../out.tgz . && rm -rf ./* && mv ../out.tgz .
