#!/usr/bin/env bash
# Session 20 call 3: "stag" = call 2's candidate ("pre", artifacts/) with each warp's next
# copy started after its current unit's data has landed (not before waiting for it), so
# that a one-wave run's first half-units land before the second halves are asked for;
# by the plan's unit-width rule and forced to 64-block units, beside pre (rule / 64) and
# main (scratch/base_art). Replay comparison only.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
date -u
timeout 300 python3 scratch/qcompare.py --passes 3 --json "$OUT/compare.json" base=scratch/base_art \
  pre=artifacts pre64=artifacts:64 stag=scratch/stag_art stag64=scratch/stag_art:64 2>&1 | tee "$OUT/compare.txt"
date -u
