#!/usr/bin/env bash
# Session 20 call 4: where call 2's candidate ("pre", artifacts/) spends its time: timing-only
# probes of it (bytes differ by design; docs/h200/session19/make_probe_variants.py on pre):
# no scale-byte stores, no codes (nor their math), no block math, whole scale sectors,
# none of math/scales/codes, no multiplier table. Plain rows, replay.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD QCOMPARE_PLAIN_ONLY=1
date -u
timeout 300 python3 scratch/qcompare.py --passes 3 --json "$OUT/compare.json" base=scratch/base_art \
  pre=artifacts nosf=scratch/p_nosf nocodes=scratch/p_nocodes nomath=scratch/p_nomath \
  sffull=scratch/p_sffull bare=scratch/p_nomath_nosf_nocodes notable=scratch/p_notable 2>&1 | tee "$OUT/compare.txt"
date -u
