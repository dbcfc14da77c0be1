#!/usr/bin/env bash
# Session 27 call 2 (prepared, not run in session 27: no machine was lent after call 1).
# Where the quantizer's MoE forms' extra ~1.4 µs a run goes: main's quantizer against
#    timing-only variants (docs/h200/session27/make_moe_variants.py, baked into scratch/
#    by `bash docs/h200/session27/bake_moe_variants.sh` on the CPU machine first): slots
#    (MoE units described from the plan before the wait), nopad (no padding zeroed),
#    both, search8 (8 search steps, not 11); and three correct candidates, idxpre
#    (contiguous runs load their first index entries beside the counts), mslots (masked
#    plans of one round take their slots as units, described before the wait) and
#    padafter (the padding zeroed after the units): their bytes are checked by call 5.
#    qcompare.py has two decode routings of the masked row added (qcompare_sparse.py:
#    one token's top-8, sixteen tokens').
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 300 python3 scratch/qcompare.py --passes 5 --json "$OUT/compare.json" \
  base=scratch/base slots=scratch/slots nopad=scratch/nopad slotsnopad=scratch/slotsnopad \
  search8=scratch/search8 idxpre=scratch/idxpre mslots=scratch/mslots \
  padafter=scratch/padafter 2>&1 | tee "$OUT/compare.txt"; date -u
cd "$OUT" && tar czf ../out.tgz . && rm -rf ./* && mv ../out.tgz .
