#!/usr/bin/env bash
# What callA.sh needs in scratch/ (repository root on the CPU machine, ~1 minute):
# session 28's callC inputs (scratch/base, scratch/mm_tree, scratch/plainaligned,
# scratch/qcompare.py) and the cspec branch's quantizer cubin and manifest (scratch/cspec);
# callB.sh needs scratch/libempty.so.
set -euo pipefail
bash docs/h200/session28/callC/prepare_callC.sh
mkdir -p scratch/cspec
git show cspec:artifacts/manifest.json > scratch/cspec/manifest.json
git show cspec:artifacts/nvfp4_quantize.sm_90a.g1.cubin > scratch/cspec/nvfp4_quantize.sm_90a.g1.cubin
cc -O2 -shared -fPIC -o scratch/libempty.so docs/experiments/jax_c_handler/empty_handler.c
