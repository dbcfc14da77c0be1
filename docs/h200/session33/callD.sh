#!/usr/bin/env bash
# Session 33 call D (any card): main ("base") against the prewait variant
# (docs/experiments/quantizer_prewait.patch: a plain run's first copy from lane 0's own
# description, its source and size before the PDL wait, the shuffles after the copy),
# in replay chains (qcompare, 5 passes, twice each) and after a torch kernel
# (after_kernel.py). On the CPU machine first:
#   bash docs/experiments/bake_quantizer_variants.sh docs/experiments/quantizer_prewait.patch \
#     base:NVFP4_PREWAIT=0 pw:NVFP4_PREWAIT=1
set -u
OUT=${OUT:-out}; OUT=$(realpath "$OUT"); mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 NVFP4_AOT_REQUIRE_GPU=1
date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
timeout 300 python3 scratch/qcompare.py --passes 5 --json "$OUT/compare.json" \
  base=scratch/base pw=scratch/pw base2=scratch/base pw2=scratch/pw > "$OUT/compare.txt" 2>&1
echo "compare exit $?"; cut -c1-200 "$OUT/compare.txt"; date -u
timeout 200 python3 docs/h200/session32/after_kernel.py base=scratch/base pw=scratch/pw \
  base2=scratch/base pw2=scratch/pw > "$OUT/after_kernel.txt" 2>&1
echo "after kernel exit $?"; cut -c1-200 "$OUT/after_kernel.txt" | tail -n 8; date -u
