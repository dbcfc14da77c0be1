#!/usr/bin/env bash
# session 14 call 7: call 5's descriptor switch (one release fence for the four
# descriptors; its cubins are in the working tree's artifacts/, "release" below) plus: the
# B and SFB descriptors keep their fields while n and k stay the same (every group of a MoE
# plan) and only their addresses are replaced (2 tensormap.replace instead of 20).
# scratch/tmaddr = the committed artifacts with every sm_90a GEMM cubin rebaked from that
# tree. (1) GPU suite + MoE / torch / examples GPU tests on tmaddr, require-GPU on; (2)
# memcheck + racecheck on MoE and per-group runs (groups of different n and k: the full
# replace) of the 16-row and 128-row families; (3) the 1/8/32-token rows of issue #17's
# table, release and tmaddr in alternating passes.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NVFP4_AOT_SHAPES=$PWD/tests/data/shapes.json
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
ART=scratch/tmaddr
echo "=== GPU suite on tmaddr $(date -u +%T)"
NVFP4_AOT_ARTIFACTS=$ART NVFP4_AOT_REQUIRE_GPU=1 timeout 240 python3 -m pytest -q -m gpu tests/ -p no:cacheprovider \
  --ignore=tests/test_jax_gpu.py --ignore=tests/test_quantizer_gpu.py --ignore=tests/test_torch_gpu.py > "$OUT/suite.log" 2>&1
echo "pytest exit code: $?"; grep FAILED "$OUT/suite.log" | head; tail -1 "$OUT/suite.log"
echo "=== MoE, torch, torch_ops, examples GPU tests on tmaddr $(date -u +%T)"
NVFP4_AOT_ARTIFACTS=$ART NVFP4_AOT_REQUIRE_GPU=1 timeout 200 python3 -m pytest -q -rf tests/test_moe_gpu.py tests/test_torch_gpu.py \
  tests/test_torch_ops.py tests/test_examples_gpu.py -p no:cacheprovider > "$OUT/more.log" 2>&1
echo "pytest exit code: $?"; grep FAILED "$OUT/more.log" | head; tail -1 "$OUT/more.log"
echo "=== sanitizers on tmaddr $(date -u +%T)"
for fam in sm90_nvfp4_grouped_gemm_decode sm90_nvfp4_grouped_gemm; do
  for tool in memcheck racecheck; do
    NVFP4_AOT_ARTIFACTS=$ART timeout 80 compute-sanitizer --tool $tool --error-exitcode 9 python3 -m nvfp4_aot verify --kernel $fam \
      --moe 130,128,256 --tokens 8 --tokens 64 --top-k 8 --layout contiguous --layout masked --routings 2 > "$OUT/${tool}_${fam}_moe.log" 2>&1
    echo "MoE $tool $fam exit code: $?"; grep -m 2 "SUMMARY" "$OUT/${tool}_${fam}_moe.log"
  done
  NVFP4_AOT_ARTIFACTS=$ART timeout 60 compute-sanitizer --tool racecheck --error-exitcode 9 python3 -m nvfp4_aot verify --kernel $fam \
    --shape 200,256,512 --shape 72,384,256 --shape 1000,1536,2048 --out-dtype bfloat16 --alpha > "$OUT/racecheck_${fam}_groups.log" 2>&1
  echo "per-group racecheck $fam exit code: $?"; grep -m 2 "SUMMARY" "$OUT/racecheck_${fam}_groups.log"
done
run() {  # NAME ART PASS
  NVFP4_AOT_ARTIFACTS=$2 timeout 150 python3 bench/bench_decode.py --tokens 1 --tokens 8 --tokens 32 --budget-s 120 \
    --json "$OUT/bd_$1_$3.json" > "$OUT/bd_$1_$3.txt" 2> "$OUT/bd_$1_$3.log"
  echo "$1 pass $3 exit $? $(date -u +%T)"; tail -1 "$OUT/bd_$1_$3.txt" | cut -c1-140
}
echo "=== bench_decode 1/8/32 tokens $(date -u +%T)"
run release artifacts 1
run tmaddr $ART 1
run tmaddr $ART 2
run release artifacts 2
python3 docs/h200/session14/compare_passes.py "$OUT" release tmaddr | tee "$OUT/compare.md" | tail -45
date -u
cd "$OUT" && tar czf ../call7_out.tgz . && rm -f ./* && mv ../call7_out.tgz .
