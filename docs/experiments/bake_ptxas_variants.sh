#!/usr/bin/env bash
# Main's activation quantizer (sm_90a) baked with other ptxas options, for a replay
# comparison on the H200 (measured in session 26, none kept: docs/quantizer_notes.md,
# "Tried and not kept", and docs/h200/session26/; session 26 compared the plain rows
# only, QCOMPARE_PLAIN_ONLY=1, in 5 passes). Run from the repository root:
#   bash docs/experiments/bake_ptxas_variants.sh
exec bash docs/experiments/bake_quantizer_variants.sh docs/experiments/quantizer_ptxas_options.patch \
  base:NVFP4_PTXAS_OPTIONS= O2:NVFP4_PTXAS_OPTIONS=-O2 \
  rul0:NVFP4_PTXAS_OPTIONS=--register-usage-level=0 rul10:NVFP4_PTXAS_OPTIONS=--register-usage-level=10
