#!/usr/bin/env bash
# session 13 call 4: (1) the 32-row decode family at one CTA per SM with 14 raw stages
# (120 registers, 206,848 B of shared memory; scratch/art_d32one = the committed
# artifacts with every sm90_nvfp4_grouped_gemm_decode32 cubin so rebaked, every other one
# unchanged) against the committed one (two CTAs per SM, 6 stages, 95 registers), both
# forced, on rows with 16-32 rows per expert: its GPU tests and sanitizers first;
# (2) issue #17's whole table (72 rows, plan's choice) with the committed artifacts: the
# first full run with the 32-row family in the plans' choice.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NVFP4_AOT_SHAPES=$PWD/tests/data/shapes.json
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
D32=sm90_nvfp4_grouped_gemm_decode32
echo "=== one-CTA decode32: runtime + MoE GPU tests, sanitizers $(date -u +%T)"
NVFP4_AOT_ARTIFACTS=scratch/art_d32one NVFP4_AOT_REQUIRE_GPU=1 timeout 200 python3 -m pytest -q -rf -p no:cacheprovider \
  tests/test_runtime_gpu.py tests/test_moe_gpu.py -k decode32 > "$OUT/tests_d32one.log" 2>&1
echo "pytest exit code: $?"; grep FAILED "$OUT/tests_d32one.log" | head; tail -1 "$OUT/tests_d32one.log"
for tool in memcheck racecheck; do
  NVFP4_AOT_ARTIFACTS=scratch/art_d32one timeout 80 compute-sanitizer --tool $tool --error-exitcode 9 python3 -m nvfp4_aot verify --kernel $D32 \
    --moe 130,128,256 --tokens 32 --top-k 8 --layout contiguous --layout masked --routings 3 > "$OUT/${tool}_d32one_moe.log" 2>&1
  echo "MoE $tool one-CTA decode32 exit code: $?"; grep -m 3 "Error\|SUMMARY" "$OUT/${tool}_d32one_moe.log"
done
run() {  # NAME, ART (artifacts dir), PASS from the environment
  for rows in "128 512" "64 128" "256 512"; do
    set -- $rows; e=$1; t=$2
    NVFP4_AOT_ARTIFACTS=$ART timeout 120 python3 bench/bench_decode.py --experts $e --tokens $t --budget-s 100 --kernel $D32 \
      --json "$OUT/bd_${NAME}_${PASS}_E${e}T${t}.json" > /dev/null 2> "$OUT/bd_${NAME}_${PASS}_E${e}T${t}.log"
    echo "$NAME pass $PASS E=$e T=$t exit $?"
  done
}
echo "=== bench_decode, decode32 forced: committed (2 CTAs/SM) vs one CTA/SM $(date -u +%T)"
NAME=committed ART=artifacts PASS=1 run
NAME=one ART=scratch/art_d32one PASS=1 run
NAME=one ART=scratch/art_d32one PASS=2 run
NAME=committed ART=artifacts PASS=2 run
echo "=== issue #17 table: bench_decode, 72 rows, plan's choice, committed artifacts $(date -u +%T)"
timeout 240 python3 bench/bench_decode.py --budget-s 200 --json "$OUT/table.json" 2> "$OUT/table.log" > "$OUT/table.txt"
echo "exit $?"; tail -2 "$OUT/table.txt"
date -u
# only ~8 files come back from a call: one archive, nothing else
cd "$OUT" && tar czf ../call4_out.tgz . && rm -f ./* && mv ../call4_out.tgz .
