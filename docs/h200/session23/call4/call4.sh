#!/usr/bin/env bash
# Session 23 call 4: the codes' packing: srep (the even elements' sign bits by prmt's sign
# mode: no shift; 732 instructions a 4-block path) and fm (+ the odd element's code folded
# into the even one's magic: no odd gather, no multiply-add; 733, 32 ALU ops fewer) vs main
# (740), all rows; quantizer GPU tests of both.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD NVFP4_AOT_SHAPES=$PWD/tests/data/shapes.json
date -u
export NVFP4_AOT_REQUIRE_GPU=1
for v in srep fm; do
NVFP4_AOT_ARTIFACTS=$PWD/scratch/$v timeout 200 python3 -m pytest -q -p no:cacheprovider --tb=short tests/test_quantizer_gpu.py > "$OUT/tests_quantizer_$v.log" 2>&1
echo "$v tests exit $?"; grep FAILED "$OUT/tests_quantizer_$v.log" | head -20; tail -1 "$OUT/tests_quantizer_$v.log"
done
timeout 300 python3 scratch/qcompare.py --passes 3 --json "$OUT/compare.json" base=scratch/base_art \
  srep=scratch/srep fm=scratch/fm 2>&1 | tee "$OUT/compare.txt"
date -u
cd "$OUT" && tar czf ../out.tgz . && rm -rf ./* && mv ../out.tgz .
