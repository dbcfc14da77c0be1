#!/usr/bin/env bash
# Session 30 call E (`bash docs/h200/session30/prepare.sh` first): main's quantizer (the
# tree's artifacts, 1f05dce's then) against the timing-only probes nocount, densesf and
# both (make_variants.py), 3 alternating
# passes, main twice (main2: its own buffers, the control). Only the masked decode rows
# are about the probes (their bytes differ there by design: DIFF).
set -u
OUT=${OUT:-out}; OUT=$(realpath "$OUT"); mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
PYTHONPATH=$PWD timeout 150 python3 scratch/qcompare.py --passes 3 --json "$OUT/compare.json" \
  main=artifacts main2=artifacts nocount=scratch/nocount densesf=scratch/densesf \
  probes=scratch/probes > "$OUT/compare.txt" 2>&1
echo "compare exit $?"; cut -c1-220 "$OUT/compare.txt"; date -u
