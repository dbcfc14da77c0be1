#!/usr/bin/env bash
# Session 23 call 1: plain units in scale-sector octets (8 rows x 16 blocks a warp: every
# scale sector written once, whole, by one warp) vs main; quantizer GPU tests of oct.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD NVFP4_AOT_SHAPES=$PWD/tests/data/shapes.json
date -u
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv
export NVFP4_AOT_REQUIRE_GPU=1
NVFP4_AOT_ARTIFACTS=$PWD/scratch/oct timeout 200 python3 -m pytest -q -p no:cacheprovider --tb=short tests/test_quantizer_gpu.py > "$OUT/tests_quantizer_oct.log" 2>&1
echo "oct tests exit $?"; grep FAILED "$OUT/tests_quantizer_oct.log" | head -20; tail -1 "$OUT/tests_quantizer_oct.log"
QCOMPARE_PLAIN_ONLY=1 timeout 300 python3 scratch/qcompare.py --passes 5 --json "$OUT/compare.json" base=scratch/base_art:128 \
  oct=scratch/oct octstd=scratch/oct:128 2>&1 | tee "$OUT/compare.txt"
date -u
cd "$OUT" && tar czf ../out.tgz . && rm -rf ./* && mv ../out.tgz .
