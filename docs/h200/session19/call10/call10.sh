#!/usr/bin/env bash
# Session 19 call 10: candidate-scale-sectors — plain units in sector octets (a CTA's 8
# warps on the 8 scale rows of each 32-byte sector of the blocked layout, one segment),
# scale bytes staged in shared memory and stored by the CTA as whole sectors after a
# barrier (rows past T zeroed there; no padding pass for the plain form). Quantizer GPU
# tests (require-GPU), then replay against main's quantizer on every qcompare row.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD NVFP4_AOT_SHAPES=$PWD/tests/data/shapes.json
date -u
NVFP4_AOT_REQUIRE_GPU=1 timeout 100 python3 -m pytest -q -p no:cacheprovider --tb=short tests/test_quantizer_gpu.py > "$OUT/tests_quantizer.log" 2>&1
echo "exit $?"; grep FAILED "$OUT/tests_quantizer.log" | head; tail -1 "$OUT/tests_quantizer.log"
timeout 100 python3 scratch/qcompare.py --passes 3 --json "$OUT/compare.json" base=scratch/base_art \
  sectors=artifacts 2>&1 | tee "$OUT/compare.txt"
date -u
cd "$OUT" && tar czf ../sectors_out.tgz . && rm -rf ./* && mv ../sectors_out.tgz .
