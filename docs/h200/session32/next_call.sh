#!/usr/bin/env bash
# Prepared in session 32 (no machine was lent); the first call of a session with a GPU.
# On the CPU machine first: bash docs/experiments/bake_defer_variants.sh (writes scratch/)
#  1. on an H200: #16's benchmark and the fused MoE layer (session 31's callC): does
#     1024 x 4096 reach 70 % (3.62 us) on the target card?
#  2. on any card: the replay comparison of main ("base") with the defer variants (one
#     wave's CTAs sleep before their first copies; docs/experiments/README.md);
#  3. the same plain rows after another kernel (after_kernel.py: graphs of x *= 1 then one
#     quantizer run): in the replay comparison the kernel before a run is the run before
#     it, whose first CTAs leave first, so the first wave (cta < %nsmid) is the first CTA
#     of each SM; after another kernel it need not be, and a layer meets the quantizer
#     there. (The fused MoE layer quantizes in the contiguous form, which the variants
#     leave as it is.)
set -u
OUT=${OUT:-out}; OUT=$(realpath "$OUT"); mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 NVFP4_AOT_REQUIRE_GPU=1
date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  OUT=$OUT/callC bash docs/h200/session31/callC/callC.sh
fi
timeout 240 python3 scratch/qcompare.py --passes 3 --json "$OUT/compare.json" \
  base=scratch/base o100=scratch/o100 o200=scratch/o200 o400=scratch/o400 o800=scratch/o800 \
  y200=scratch/y200 otab=scratch/otab base2=scratch/base o2002=scratch/o200 o4002=scratch/o400 > "$OUT/compare.txt" 2>&1
echo "compare exit $?"; cut -c1-330 "$OUT/compare.txt"; date -u
timeout 200 python3 docs/h200/session32/after_kernel.py base=scratch/base o200=scratch/o200 \
  o400=scratch/o400 o800=scratch/o800 y200=scratch/y200 otab=scratch/otab > "$OUT/after_kernel.txt" 2>&1
echo "after kernel exit $?"; cut -c1-200 "$OUT/after_kernel.txt" | tail -n 8; date -u
