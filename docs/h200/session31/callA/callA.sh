#!/usr/bin/env bash
# Session 31 call A (session 30's call H plus the masked slot fix), on the H200 if one is
# lent, else on what comes. On the CPU machine first (branch slotm checked out):
#   mkdir -p scratch/pre && for f in manifest.json nvfp4_quantize.sm_90a.g1.cubin; do
#     git show 1f05dce:artifacts/$f > scratch/pre/$f; done
#   mkdir -p scratch/main && for f in manifest.json nvfp4_quantize.sm_90a.g1.cubin; do
#     git show 13cfb06:artifacts/$f > scratch/main/$f; done
#   mkdir -p scratch/slotm && git show 13cfb06:artifacts/manifest.json > scratch/slotm/manifest.json
#   cp docs/h200/session19/bake_one.py scratch/ && CUTE_DSL_ARCH=sm_90a .venv/bin/python scratch/bake_one.py sm_90a scratch/slotm
#   rul0 (slotm's tree baked with ptxas --register-usage-level=0, as
#   docs/experiments/bake_ptxas_variants.sh does it: session 26 saw it 0.1-1.1 % faster on
#   every plain row) into scratch/rul0 likewise
#   cp docs/h200/session15/qcompare.py scratch/ && patch -s scratch/qcompare.py < docs/h200/session16/qcompare_widths.diff && python3 docs/h200/session27/qcompare_sparse.py
#  1. bench_quantize.py on main's artifacts (require-GPU): #16's rows on this card
#     (H200: does 1024 x 4096 reach 70 %, i.e. 3.62 us, after session 30's padding skip?);
#  2. slotm (a masked slot run divides its row by the capacity once, not twice) through
#     the quantizer's whole GPU suite, then memcheck + racecheck on its masked tests and the torch / JAX
#     quantize and masked tests;
#  3. replay comparison, 3 passes: main (13cfb06) / pre (1f05dce: routing words after the
#     wait) / slotm / rul0, two buffer sets each.
set -u
OUT=${OUT:-out}; OUT=$(realpath "$OUT"); mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 NVFP4_AOT_REQUIRE_GPU=1
date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
rm -rf /tmp/main_art /tmp/slotm && cp -r artifacts /tmp/main_art && cp scratch/main/* /tmp/main_art/ \
  && cp -r artifacts /tmp/slotm && cp scratch/slotm/* /tmp/slotm/
NVFP4_AOT_ARTIFACTS=/tmp/main_art timeout 100 python3 bench/bench_quantize.py --json "$OUT/bench_quantize.json" > "$OUT/bench_quantize.txt" 2>&1
echo "bench exit $?"; cut -c1-190 "$OUT/bench_quantize.txt" | tail -n 30; date -u
export PYTHONPATH=$PWD NVFP4_AOT_SHAPES=$PWD/tests/data/shapes.json
NVFP4_AOT_ARTIFACTS=/tmp/slotm timeout 100 python3 -m pytest -q -p no:cacheprovider -rf tests/test_quantizer_gpu.py > "$OUT/slotm_tests.log" 2>&1
echo "slotm tests exit $?"; grep FAILED "$OUT/slotm_tests.log" | head; tail -n 1 "$OUT/slotm_tests.log"; date -u
for tool in memcheck racecheck; do
  NVFP4_AOT_ARTIFACTS=/tmp/slotm NVFP4_AOT_QUANT_ROUTINGS=2 timeout 70 compute-sanitizer --tool $tool --error-exitcode 9 \
    python3 -m pytest -q -p no:cacheprovider tests/test_quantizer_gpu.py -k masked > "$OUT/slotm_${tool}.log" 2>&1
  echo "slotm $tool exit $?"; grep -E "SUMMARY|passed|failed" "$OUT/slotm_${tool}.log" | tail -n 2
done; date -u
NVFP4_AOT_ARTIFACTS=/tmp/slotm timeout 60 python3 -m pytest -q -p no:cacheprovider -rf tests/test_torch_gpu.py tests/test_jax_gpu.py \
  -k "quantize or masked" > "$OUT/slotm_torch_jax_tests.log" 2>&1
echo "slotm torch/jax tests exit $?"; grep FAILED "$OUT/slotm_torch_jax_tests.log" | head; tail -n 1 "$OUT/slotm_torch_jax_tests.log"; date -u
timeout 240 python3 scratch/qcompare.py --passes 3 --json "$OUT/compare.json" \
  main=scratch/main pre=scratch/pre slotm=scratch/slotm rul0=scratch/rul0 \
  main2=scratch/main pre2=scratch/pre slotm2=scratch/slotm rul02=scratch/rul0 > "$OUT/compare.txt" 2>&1
echo "compare exit $?"; cut -c1-300 "$OUT/compare.txt"; date -u
