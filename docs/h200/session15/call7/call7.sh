#!/usr/bin/env bash
# session 15 call 7 (#16): scratch/compact2 = call 6's compact with its two faults mended (scale rows past the plan's bounded, as the unit list bounded them; a padding unit's row count in its input-row field: 5 descriptor words again) — the committed quantizer whose MoE forms
# (contiguous and masked) work through this routing's unit rows only: each expert's token
# rows, then its padding scale rows 32 at a time (a lane a row, a 32-bit zero a 4-block
# group), counted in the CTA's expert scan; was: every scale row of the plan's worst case
# a unit (padding rows one each, rows past the routing's last segment too). Quantizer GPU
# tests (require-GPU) with the copy's own package, memcheck + racecheck on its MoE tests,
# graph replay against the committed kernel incl. decode-size MoE runs.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
ROOT=$PWD
date -u
cd "$ROOT/scratch/compact2"; export PYTHONPATH=$PWD NVFP4_AOT_ARTIFACTS=$PWD/artifacts
echo "=== compact: quantizer GPU tests $(date -u +%T)"
NVFP4_AOT_REQUIRE_GPU=1 timeout 150 python3 -m pytest -q -p no:cacheprovider --tb=short tests/test_quantizer_gpu.py > "$OUT/tests_compact2.log" 2>&1
echo "exit $?"; grep -E "FAILED|Error" "$OUT/tests_compact2.log" | head -8; tail -1 "$OUT/tests_compact2.log" | cut -c1-300
for tool in memcheck racecheck; do
  NVFP4_AOT_QUANT_ROUTINGS=2 NVFP4_AOT_REQUIRE_GPU=1 timeout 120 compute-sanitizer --tool $tool --error-exitcode 9 \
    python3 -m pytest -q -p no:cacheprovider tests/test_quantizer_gpu.py \
    -k "contiguous or masked or padding_rows or T129-k160 or k1056" > "$OUT/${tool}_compact2.log" 2>&1
  echo "$tool exit $?"; grep -E "SUMMARY|passed|failed" "$OUT/${tool}_compact2.log" | tail -2
done
cd "$ROOT"; export PYTHONPATH=$PWD; unset NVFP4_AOT_ARTIFACTS
echo "=== compare $(date -u +%T)"
timeout 200 python3 scratch/qcompare.py --passes 3 --json "$OUT/compare.json" base=artifacts \
  compact2=scratch/compact2/artifacts 2>&1 | tee "$OUT/compare.txt"
date -u
cd "$OUT" && tar czf ../call7_out.tgz . && rm -rf ./* && mv ../call7_out.tgz .
