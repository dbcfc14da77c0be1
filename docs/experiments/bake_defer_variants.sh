#!/usr/bin/env bash
# Main's activation quantizer (sm_90a) with one wave's CTAs sleeping before their first
# copies (quantizer_defer.patch; plain and masked slot runs), for a replay comparison on
# the GPU (docs/h200/session32/next_call.sh). Prepared in session 32, when no machine was
# lent: not measured yet. o<N>: the first wave's CTAs (cta < %nsmid) sleep N ns; y200:
# the second wave's (a control: if the issue order is by warp age, o<N> balances an SM's
# two CTAs and y200 makes them worse); otab: the first wave's CTAs start their first
# copies after their multiplier table instead (a delay spent on work they must do
# anyway). Run from the repository root:
#   bash docs/experiments/bake_defer_variants.sh
exec bash docs/experiments/bake_quantizer_variants.sh docs/experiments/quantizer_defer.patch \
  base:NVFP4_DEFER_NS=0 o100:NVFP4_DEFER_NS=100 o200:NVFP4_DEFER_NS=200 \
  o400:NVFP4_DEFER_NS=400 o800:NVFP4_DEFER_NS=800 y200:NVFP4_DEFER_NS=200,NVFP4_DEFER_FIRST_WAVE=0 \
  otab:NVFP4_DEFER_TABLE=1
