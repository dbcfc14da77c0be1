#!/usr/bin/env bash
# session 17 call 10 (#16): unit widths (session 16's call 10, not run then, plus the
# torch / JAX GPU tests and bench_quantize.py from the candidate's tree). unitw = the
# committed kernel with the unit's width a plan word (128, 64 or 32 blocks: 4, 2 or 1 a
# lane) and the host's rule (quantize_layout.unit_blocks). Replay (qcompare.py:
# NAME=ARTIFACTS[:WIDTH]) of the committed cubin (forced 128), unitw by its rule and
# forced to 128 / 64 / 32; then from unitw's tree: quantizer GPU tests (+ every unit
# width), memcheck + racecheck, torch / torch_ops / examples / JAX GPU tests,
# bench_quantize.py (all from the repo root, whose host code is the candidate's). Tree: git apply docs/h200/session16/unit_width_candidate.diff
# (artifacts/ = the committed cubin), session 15's qcompare.py + qcompare_widths.diff
# in scratch/, make_variant.py unitw.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"; rm -rf "$OUT"/e64t2048* "$OUT"/table_* 2>/dev/null
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD NVFP4_AOT_SHAPES=$PWD/tests/data/shapes.json
date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
timeout 120 python3 scratch/qcompare.py --passes 3 --json "$OUT/compare.json" base=artifacts:128 \
  unitw=scratch/unitw/artifacts u128=scratch/unitw/artifacts:128 u64=scratch/unitw/artifacts:64 \
  u32=scratch/unitw/artifacts:32 2>&1 | tee "$OUT/compare.txt"
export NVFP4_AOT_ARTIFACTS=$PWD/scratch/unitw/artifacts NVFP4_AOT_REQUIRE_GPU=1
echo "=== unitw: quantizer GPU tests $(date -u +%T)"
timeout 100 python3 -m pytest -q -p no:cacheprovider --tb=short tests/test_quantizer_gpu.py > "$OUT/tests_quantizer.log" 2>&1
echo "exit $?"; grep -E "FAILED" "$OUT/tests_quantizer.log" | head -8; tail -1 "$OUT/tests_quantizer.log" | cut -c1-300
for tool in memcheck racecheck; do
  NVFP4_AOT_QUANT_ROUTINGS=2 timeout 90 compute-sanitizer --tool $tool --error-exitcode 9 \
    python3 -m pytest -q -p no:cacheprovider tests/test_quantizer_gpu.py \
    -k "contiguous or masked or unit_width or padding_rows or any_byte or T129-k160 or k1056 or T1-k32" > "$OUT/${tool}.log" 2>&1
  echo "$tool exit $?"; grep -E "SUMMARY|passed|failed" "$OUT/${tool}.log" | tail -2
done
echo "=== torch, torch_ops, examples, JAX GPU tests $(date -u +%T)"
timeout 150 python3 -m pytest -q -rf -p no:cacheprovider tests/test_torch_gpu.py tests/test_torch_ops.py \
  tests/test_examples_gpu.py tests/test_jax_gpu.py > "$OUT/tests_more.log" 2>&1
echo "pytest exit code: $?"; grep FAILED "$OUT/tests_more.log" | head; tail -1 "$OUT/tests_more.log"
echo "=== bench_quantize $(date -u +%T)"
timeout 70 python3 bench/bench_quantize.py --json "$OUT/bench_quantize.json" > "$OUT/bench_quantize.txt" 2>&1
echo "exit $?"; cut -c1-140 "$OUT/bench_quantize.txt"
date -u
cd "$OUT" && tar czf ../call10_out.tgz . && rm -rf ./* && mv ../call10_out.tgz .
