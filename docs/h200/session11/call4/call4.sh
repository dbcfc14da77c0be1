#!/usr/bin/env bash
# session 11 call 4: racecheck details on the decode family per-group run (call 3 found 8
# hazards there) after the warp sync before the shared-memory descriptor rewrite; both
# sanitizers on per-group and MoE runs; the decode suite tests.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NVFP4_AOT_SHAPES=$PWD/tests/data/shapes.json
date -u
for tool in racecheck memcheck; do
  for fam in sm90_nvfp4_grouped_gemm_decode sm90_nvfp4_grouped_gemm; do
    timeout 100 compute-sanitizer --tool $tool --error-exitcode 9 python3 -m nvfp4_aot verify --kernel $fam \
      --shape 200,256,512 --shape 72,384,256 --shape 1000,1536,2048 --out-dtype bfloat16 --alpha > "$OUT/${tool}_$fam.log" 2>&1
    echo "$tool $fam per-group exit code: $?"; grep -m 30 "Error\|Warning\|hazard\|at 0x\|SUMMARY" "$OUT/${tool}_$fam.log" | head -30
  done
  timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 python3 -m nvfp4_aot verify --kernel sm90_nvfp4_grouped_gemm_decode \
    --moe 130,128,256 --tokens 8 --top-k 8 --layout contiguous --layout masked --routings 3 2>&1 | tail -1
  echo "MoE $tool exit code: ${PIPESTATUS[0]}"
done
NVFP4_AOT_REQUIRE_GPU=1 timeout 200 python3 -m pytest -q -x -m gpu tests/test_runtime_gpu.py tests/test_moe_gpu.py -p no:cacheprovider 2>&1 | tail -2
date -u
