#!/usr/bin/env bash
# session 17 call 12 (#17): routed GEMM variants (the per-CTA sm_90a families' CTAs build
# the MoE group tables from the device counts; no routing kernel), the working tree's
# artifacts (build_kernels.py bake: every earlier cubin byte-identical, 12 routed cubins
# new). MoE GPU tests (each per-CTA family routed and after the routing kernel), torch /
# torch_ops / examples / JAX GPU tests, require-GPU on; memcheck + racecheck on routed MoE
# verify runs of the 16-row and 128-row families.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"; rm -rf "$OUT"/e64t2048* "$OUT"/table_* 2>/dev/null
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NVFP4_AOT_SHAPES=$PWD/tests/data/shapes.json
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "=== MoE, torch, torch_ops, examples, JAX GPU tests $(date -u +%T)"
NVFP4_AOT_REQUIRE_GPU=1 timeout 330 python3 -m pytest -q -rf -x tests/test_moe_gpu.py tests/test_torch_gpu.py \
  tests/test_torch_ops.py tests/test_examples_gpu.py tests/test_jax_gpu.py -p no:cacheprovider > "$OUT/tests_moe.log" 2>&1
echo "pytest exit code: $?"; grep -E "FAILED|Error" "$OUT/tests_moe.log" | head; tail -1 "$OUT/tests_moe.log"
echo "=== sanitizers, routed $(date -u +%T)"
for fam in sm90_nvfp4_grouped_gemm_decode sm90_nvfp4_grouped_gemm; do
  for tool in memcheck racecheck; do
    timeout 80 compute-sanitizer --tool $tool --error-exitcode 9 python3 -m nvfp4_aot verify --kernel $fam \
      --moe 130,128,256 --tokens 8 --tokens 64 --top-k 8 --layout contiguous --layout masked --routings 2 > "$OUT/${tool}_${fam}_routed.log" 2>&1
    echo "MoE $tool $fam exit code: $?"; grep -m 2 "SUMMARY\|routed" "$OUT/${tool}_${fam}_routed.log"
  done
done
date -u
cd "$OUT" && tar czf ../call12_out.tgz . && rm -rf ./* && mv ../call12_out.tgz .
