#!/usr/bin/env bash
# Session 34 call A (any card; ran on an H100 at 01:02 UTC): main ("base", and main forced to 64-block units) against
# docs/experiments/quantizer_narrow4.patch: 4 CTAs of 8 warps an SM at 64 registers,
# 2 KB stages, units of 64 blocks (2 a lane; INTERLEAVE 2, or 1 for narrow4i1): twice the
# warps an SM, so that the late units' math runs with 8 warps a scheduler instead of 2-4.
# Replay chains (qcompare, 3 passes, bytes compared with base's). On the CPU machine first:
#   bash docs/experiments/bake_quantizer_variants.sh docs/experiments/quantizer_narrow4.patch \
#     base:NVFP4_NARROW=0 narrow4:NVFP4_NARROW=1 narrow4i1:NVFP4_NARROW=1,NVFP4_INTERLEAVE=1
set -u
OUT=${OUT:-out}; OUT=$(realpath "$OUT"); mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 NVFP4_AOT_REQUIRE_GPU=1
date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
QCOMPARE_PLAIN_ONLY=1 timeout 240 python3 scratch/qcompare.py --passes 3 --json "$OUT/compare.json" \
  base=scratch/base base64=scratch/base:64 narrow4=scratch/narrow4:64 \
  narrow4i1=scratch/narrow4i1:64 base2=scratch/base narrow4b=scratch/narrow4:64 \
  > "$OUT/compare.txt" 2>&1
echo "compare exit $?"; cut -c1-260 "$OUT/compare.txt"; date -u
# narrow4 (its slower instance) more than 1 % faster than main (its faster one) at
# 1024 x 4096: the quantizer's GPU tests on it
go=$(python3 - "$OUT/compare.json" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))["results"]["1024x4096"]["variants"]
base = min(rows["base"]["us"], rows["base2"]["us"])
print("yes" if max(rows["narrow4"]["us"], rows["narrow4b"]["us"]) < 0.99 * base else "")
PY
)
echo "test narrow4: '${go}'"
[ -n "$go" ] && [ -n "${RUN_TESTS:-}" ] || exit 0
# the quantizer's GPU tests on narrow4 (the patch applied to the tree: with NVFP4_NARROW=1
# the plans take 64- and 32-block units; the 128-block case is no longer a width)
rm -rf /tmp/full && mkdir -p /tmp/full && cp artifacts/* /tmp/full/ && cp scratch/narrow4/* /tmp/full/
NVFP4_NARROW=1 NVFP4_AOT_ARTIFACTS=/tmp/full timeout 240 python3 -m pytest -q -rf -x \
  tests/test_quantizer_gpu.py -p no:cacheprovider \
  --deselect "tests/test_quantizer_gpu.py::test_every_unit_width[128]" > "$OUT/quant_tests_narrow4.log" 2>&1
echo "pytest exit $?"; tail -5 "$OUT/quant_tests_narrow4.log"; date -u
