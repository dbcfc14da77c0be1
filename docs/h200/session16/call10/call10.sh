#!/usr/bin/env bash
# session 16 call 10 (#16): unit widths. unitw = the committed kernel with the unit's
# width a plan word (128, 64 or 32 blocks: 4, 2 or 1 a lane, by the short-segment code
# paths) and the host's rule (quantize_layout.unit_blocks: the widest whose units at the
# plan's most token rows give half the grid's warps one; narrower at decode sizes).
# Replay (qcompare.py: NAME=ARTIFACTS[:WIDTH]) of the committed cubin (forced 128: its
# plan words as before), unitw by its rule and forced to 128 / 64 / 32; then from
# unitw's tree: quantizer GPU tests (+ every unit width), memcheck + racecheck.
# NOT RUN: the session's device time ran out (refused at start). To run it: git apply
# docs/h200/session16/unit_width_candidate.diff (the tree's host code is the candidate's;
# artifacts/ stays the committed cubin: base=artifacts:128), put session 15's qcompare.py
# patched with qcompare_widths.diff in scratch/, make_variant.py unitw.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
date -u
timeout 100 python3 scratch/qcompare.py --passes 3 --json "$OUT/compare.json" base=artifacts:128 \
  unitw=scratch/unitw/artifacts u128=scratch/unitw/artifacts:128 u64=scratch/unitw/artifacts:64 \
  u32=scratch/unitw/artifacts:32 2>&1 | tee "$OUT/compare.txt"
export NVFP4_AOT_ARTIFACTS=$PWD/scratch/unitw/artifacts NVFP4_AOT_REQUIRE_GPU=1
cd scratch/unitw
echo "=== unitw: quantizer GPU tests $(date -u +%T)"
timeout 100 python3 -m pytest -q -p no:cacheprovider --tb=short tests/test_quantizer_gpu.py > "$OUT/tests_quantizer.log" 2>&1
echo "exit $?"; grep -E "FAILED" "$OUT/tests_quantizer.log" | head -8; tail -1 "$OUT/tests_quantizer.log" | cut -c1-300
for tool in memcheck racecheck; do
  NVFP4_AOT_QUANT_ROUTINGS=2 timeout 70 compute-sanitizer --tool $tool --error-exitcode 9 \
    python3 -m pytest -q -p no:cacheprovider tests/test_quantizer_gpu.py \
    -k "contiguous or masked or unit_width or any_byte or T129-k160 or k1056 or T1-k32" > "$OUT/${tool}.log" 2>&1
  echo "$tool exit $?"; grep -E "SUMMARY|passed|failed" "$OUT/${tool}.log" | tail -2
done
date -u
cd "$OUT" && tar czf ../call10_out.tgz . && rm -rf ./* && mv ../call10_out.tgz .
