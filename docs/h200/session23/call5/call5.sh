#!/usr/bin/env bash
# Session 23 call 5: shorter dependency chains, same or fewer instructions: lat1 (the
# element's last two roundings as one: 2 clamp(q - 2) + clamp(q - 4) is exact, so
# t = RNE(2^23 + RNE(2 min(q,2)) + that): depth 3 after q instead of 4; 740), lat2 (lat1
# + the sign bits combined from the inputs before the codes: 748), lat3 (lat1 + signs
# by prmt's sign mode and one select, one op on the codes' path: 732) vs main, all rows,
# 5 passes; quantizer GPU tests of lat1 and lat3.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD NVFP4_AOT_SHAPES=$PWD/tests/data/shapes.json
date -u
export NVFP4_AOT_REQUIRE_GPU=1
for v in lat1 lat3; do
NVFP4_AOT_ARTIFACTS=$PWD/scratch/$v timeout 200 python3 -m pytest -q -p no:cacheprovider --tb=short tests/test_quantizer_gpu.py > "$OUT/tests_quantizer_$v.log" 2>&1
echo "$v tests exit $?"; grep FAILED "$OUT/tests_quantizer_$v.log" | head -20; tail -1 "$OUT/tests_quantizer_$v.log"
done
timeout 400 python3 scratch/qcompare.py --passes 5 --json "$OUT/compare.json" base=scratch/base_art \
  lat1=scratch/lat1 lat2=scratch/lat2 lat3=scratch/lat3 2>&1 | tee "$OUT/compare.txt"
date -u
cd "$OUT" && tar czf ../out.tgz . && rm -rf ./* && mv ../out.tgz .
