#!/usr/bin/env bash
# Session 21 call 11: "tbar": the multiplier table's CTA barrier replaced by an mbarrier
# each warp arrives on and a unit waits on before it reads the table; replay vs main and
# notable (call 10's probe), all rows; quantizer GPU tests of tbar (require-GPU).
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD NVFP4_AOT_SHAPES=$PWD/tests/data/shapes.json
date -u
timeout 240 python3 scratch/qcompare.py --passes 3 --json "$OUT/compare.json" base=scratch/base_art \
  tbar=scratch/tbar notable=scratch/notable 2>&1 | tee "$OUT/compare.txt"
export NVFP4_AOT_REQUIRE_GPU=1
NVFP4_AOT_ARTIFACTS=$PWD/scratch/tbar timeout 150 python3 -m pytest -q -p no:cacheprovider --tb=short tests/test_quantizer_gpu.py > "$OUT/tests_quantizer_tbar.log" 2>&1
echo "tbar tests exit $?"; grep FAILED "$OUT/tests_quantizer_tbar.log" | head; tail -1 "$OUT/tests_quantizer_tbar.log"
date -u
cd "$OUT" && tar czf ../out.tgz . && rm -rf ./* && mv ../out.tgz .
