#!/usr/bin/env bash
# Session 27 call 2 (prepared, not run in session 27: no machine was lent after call 1).
# Where the quantizer's MoE forms' extra ~1.4 µs a run goes: main's quantizer against
#    timing-only variants (docs/h200/session27/make_moe_variants.py, baked into scratch/
#    by `bash docs/h200/session27/bake_moe_variants.sh` on the CPU machine first): slots
#    (MoE units described from the plan before the wait), nopad (no padding zeroed),
#    both, search8 (8 search steps, not 11); and two correct candidates, idxpre
#    (contiguous runs load their first index entries beside the counts) and mslots
#    (masked plans of one round take their slots as units, described before the wait):
#    their bytes checked by the quantizer's GPU tests on copies of artifacts/ holding
#    their cubins. qcompare.py has two decode routings of the masked row added
#    (qcompare_sparse.py: one token's top-8, sixteen tokens').
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for cand in idxpre mslots; do
  rm -rf /tmp/$cand && cp -r artifacts /tmp/$cand && cp scratch/$cand/* /tmp/$cand/
  NVFP4_AOT_ARTIFACTS=/tmp/$cand NVFP4_AOT_REQUIRE_GPU=1 timeout 120 python3 -m pytest -q -p no:cacheprovider \
    tests/test_quantizer_gpu.py -k "contiguous or masked or wait_for or padding" > "$OUT/${cand}_tests.log" 2>&1
  echo "$cand tests exit $?"; grep FAILED "$OUT/${cand}_tests.log" | head; tail -1 "$OUT/${cand}_tests.log"; date -u
done
timeout 300 python3 scratch/qcompare.py --passes 5 --json "$OUT/compare.json" \
  base=scratch/base slots=scratch/slots nopad=scratch/nopad slotsnopad=scratch/slotsnopad \
  search8=scratch/search8 idxpre=scratch/idxpre mslots=scratch/mslots 2>&1 | tee "$OUT/compare.txt"; date -u
cd "$OUT" && tar czf ../out.tgz . && rm -rf ./* && mv ../out.tgz .
