#!/usr/bin/env bash
# Session 20 call 7: the committed tree (artifacts/ fully rebaked: the quantizer reads the
# plan words, and a plain run describes its first units, before griddepcontrol.wait; the
# global scale right after it; the prologue's copies without the proxy fence) against
# main's quantizer (scratch/base_art): replay, 3 passes; the whole GPU suite (require-GPU);
# memcheck + racecheck on the quantizer's MoE / padding / short-row / PDL-chain tests.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD NVFP4_AOT_SHAPES=$PWD/tests/data/shapes.json
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 100 python3 scratch/qcompare.py --passes 3 --json "$OUT/compare.json" base=scratch/base_art \
  committed=artifacts 2>&1 | tee "$OUT/compare.txt"
NVFP4_AOT_REQUIRE_GPU=1 timeout 300 python3 -m pytest -q -p no:cacheprovider -rf -m gpu tests/ > "$OUT/suite.log" 2>&1
echo "suite exit $?"; grep FAILED "$OUT/suite.log" | head; tail -1 "$OUT/suite.log"
for tool in memcheck racecheck; do
  NVFP4_AOT_REQUIRE_GPU=1 NVFP4_AOT_QUANT_ROUTINGS=2 timeout 80 compute-sanitizer --tool $tool --error-exitcode 9 \
    python3 -m pytest -q -p no:cacheprovider tests/test_quantizer_gpu.py \
    -k "contiguous or masked or wait_for or padding_rows or T129-k160 or k1056 or T1-k32" > "$OUT/${tool}.log" 2>&1
  echo "$tool exit $?"; grep -E "SUMMARY|passed|failed" "$OUT/${tool}.log" | tail -2
done
date -u
cd "$OUT" && tar czf ../out.tgz . && rm -rf ./* && mv ../out.tgz .
