#!/usr/bin/env bash
# Session 28 call B (right after call A, the machine warm; run as one command line):
# session 27's mslots candidate (scratch/mslots) under the quantizer's MoE / padding /
# PDL-chain GPU tests on a copy of artifacts/ holding its cubin (main's semantics, with
# padding), then memcheck + racecheck on the mnopad tree (scratch/mnopad_tree).
set -u
date -u; rm -rf /tmp/mslots && cp -r artifacts /tmp/mslots && cp scratch/mslots/* /tmp/mslots/
PYTHONUNBUFFERED=1 PYTHONPATH=$PWD NVFP4_AOT_ARTIFACTS=/tmp/mslots NVFP4_AOT_REQUIRE_GPU=1 timeout 90 \
  python3 -m pytest -q -p no:cacheprovider tests/test_quantizer_gpu.py -k "contiguous or masked or wait_for or padding" \
  > $OUT/mslots_tests.log 2>&1
echo "mslots tests exit $?"; grep FAILED $OUT/mslots_tests.log | head -5; tail -1 $OUT/mslots_tests.log; date -u
cd scratch/mnopad_tree && for tool in memcheck racecheck; do
  PYTHONPATH=$PWD NVFP4_AOT_REQUIRE_GPU=1 NVFP4_AOT_QUANT_ROUTINGS=2 timeout 80 compute-sanitizer --tool $tool \
    --error-exitcode 9 python3 -m pytest -q -p no:cacheprovider tests/test_quantizer_gpu.py \
    -k "contiguous or masked or wait_for or padding_rows or T129-k160 or k1056 or T1-k32" > $OUT/mnopad_${tool}.log 2>&1
  echo "$tool exit $?"; grep -E "SUMMARY|passed|failed" $OUT/mnopad_${tool}.log | tail -2
done; date -u
