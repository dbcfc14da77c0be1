#!/usr/bin/env bash
# Session 27 call 5 (prepared, not run in session 27): the correct candidates' bytes
# (make_moe_variants.py: idxpre, mslots, padafter; baked into scratch/ by
# bake_moe_variants.sh): the quantizer's MoE, padding and PDL-chain GPU tests
# (require-GPU) on a copy of artifacts/ holding each candidate's cubin
# (NVFP4_AOT_ARTIFACTS). CANDIDATES="..." picks some.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for cand in ${CANDIDATES:-idxpre mslots padafter}; do
  rm -rf /tmp/$cand && cp -r artifacts /tmp/$cand && cp scratch/$cand/* /tmp/$cand/
  NVFP4_AOT_ARTIFACTS=/tmp/$cand NVFP4_AOT_REQUIRE_GPU=1 timeout 120 python3 -m pytest -q -p no:cacheprovider \
    tests/test_quantizer_gpu.py -k "contiguous or masked or wait_for or padding" > "$OUT/${cand}_tests.log" 2>&1
  echo "$cand tests exit $?"; grep FAILED "$OUT/${cand}_tests.log" | head; tail -1 "$OUT/${cand}_tests.log"; date -u
done
cd "$OUT" && tar czf ../out.tgz . && rm -rf ./* && mv ../out.tgz .
