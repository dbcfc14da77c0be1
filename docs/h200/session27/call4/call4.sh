#!/usr/bin/env bash
# Session 27 call 4 (prepared, not run in session 27): the quantizer's per-warp timeline in
# every form (plain 1024 x 2048 / 4096, masked E = 128 max_m = 8 full and with one token's
# 8 rows, contiguous E = 128 with 1 / 16 / 1024 tokens): main's kernel against its
# timing-only probe (scratch/probe, baked by bake_moe_variants.sh), timeline_moe.py.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 200 python3 docs/h200/session27/timeline_moe.py scratch/base scratch/probe "$OUT/timeline.json" \
  2>&1 | tee "$OUT/timeline.txt"; date -u
cd "$OUT" && tar czf ../out.tgz . && rm -rf ./* && mv ../out.tgz .
