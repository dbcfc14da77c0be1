#!/usr/bin/env bash
# Session 23 call 3: octets with per-lane 16-byte copies (octg: cp.async, every lane 16
# bytes of each of the 8 rows) and the row units with per-lane copies (stdg) vs main and
# call 2's oct (8 bulk copies a unit); quantizer GPU tests of octg and stdg.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD NVFP4_AOT_SHAPES=$PWD/tests/data/shapes.json
date -u
export NVFP4_AOT_REQUIRE_GPU=1
for v in octg stdg; do
NVFP4_AOT_ARTIFACTS=$PWD/scratch/$v timeout 200 python3 -m pytest -q -p no:cacheprovider --tb=short tests/test_quantizer_gpu.py > "$OUT/tests_quantizer_$v.log" 2>&1
echo "$v tests exit $?"; grep FAILED "$OUT/tests_quantizer_$v.log" | head -20; tail -1 "$OUT/tests_quantizer_$v.log"
done
QCOMPARE_PLAIN_ONLY=1 timeout 300 python3 scratch/qcompare.py --passes 5 --json "$OUT/compare.json" base=scratch/base_art:128 \
  oct=scratch/oct octg=scratch/octg stdg=scratch/stdg:128 2>&1 | tee "$OUT/compare.txt"
date -u
cd "$OUT" && tar czf ../out.tgz . && rm -rf ./* && mv ../out.tgz .
