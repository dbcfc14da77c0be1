#!/usr/bin/env bash
# Session 26 call 1: main as committed (8618b5c) — the quantizer's GPU tests (require-GPU),
# bench_quantize.py (its `copy PDL` column: are 1024 x 2048 / 2080 in reach for a PDL
# kernel?), replay of main's quantizer against the same source baked with other ptxas
# options (docs/experiments/bake_ptxas_variants.sh, scratch/), memcheck + racecheck on
# the quantizer's MoE / padding / short-row tests.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD NVFP4_AOT_SHAPES=$PWD/tests/data/shapes.json
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
NVFP4_AOT_REQUIRE_GPU=1 timeout 200 python3 -m pytest -q -p no:cacheprovider -rf tests/test_quantizer_gpu.py \
  > "$OUT/tests.log" 2>&1
echo "tests exit $?"; grep FAILED "$OUT/tests.log" | head; tail -1 "$OUT/tests.log"; date -u
timeout 150 python3 bench/bench_quantize.py --json "$OUT/bench_quantize.json" > "$OUT/bench_quantize.txt" 2>&1
echo "bench exit $?"; cut -c1-190 "$OUT/bench_quantize.txt" | head -40; date -u
QCOMPARE_PLAIN_ONLY=1 timeout 150 python3 scratch/qcompare.py --passes 5 --json "$OUT/compare.json" \
  base=scratch/base O2=scratch/O2 rul0=scratch/rul0 rul10=scratch/rul10 2>&1 | tee "$OUT/compare.txt"; date -u
for tool in memcheck racecheck; do
  NVFP4_AOT_REQUIRE_GPU=1 NVFP4_AOT_QUANT_ROUTINGS=2 timeout 80 compute-sanitizer --tool $tool --error-exitcode 9 \
    python3 -m pytest -q -p no:cacheprovider tests/test_quantizer_gpu.py \
    -k "contiguous or masked or wait_for or padding_rows or T129-k160 or k1056 or T1-k32" > "$OUT/${tool}.log" 2>&1
  echo "$tool exit $?"; grep -E "SUMMARY|passed|failed" "$OUT/${tool}.log" | tail -2
done
date -u
cd "$OUT" && tar czf ../out.tgz . && rm -rf ./* && mv ../out.tgz .
