#!/usr/bin/env bash
# session 17 call 13 (#17): routed GEMMs against the routing kernel + GEMM (the same
# cubins otherwise): the 1/8/32-token rows of issue #17's table, alternating passes
# (bench_decode.py --routing-kernel = tables, default = routed); then issue #17's whole
# table with the plans' defaults (routed) and bench_moe_layer.py --quick.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"; rm -rf "$OUT"/e64t2048* "$OUT"/table_* 2>/dev/null
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NVFP4_AOT_SHAPES=$PWD/tests/data/shapes.json
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
run() {  # NAME PASS FLAGS...
  local name=$1 pass=$2; shift 2
  timeout 100 python3 bench/bench_decode.py --tokens 1 --tokens 8 --tokens 32 --budget-s 80 "$@" \
    --json "$OUT/bd_${name}_${pass}.json" > "$OUT/bd_${name}_${pass}.txt" 2> "$OUT/bd_${name}_${pass}.log"
  echo "$name pass $pass exit $? $(date -u +%T)"; tail -1 "$OUT/bd_${name}_${pass}.txt" | cut -c1-160
}
echo "=== bench_decode 1/8/32 tokens $(date -u +%T)"
run tables 1 --routing-kernel
run routed 1
run routed 2
run tables 2 --routing-kernel
python3 docs/h200/session14/compare_passes.py "$OUT" tables routed | tee "$OUT/compare.md" | tail -45
echo "=== issue #17's table (routed) $(date -u +%T)"
timeout 200 python3 bench/bench_decode.py --json "$OUT/table.json" > "$OUT/table.txt" 2> "$OUT/table.log"
echo "exit $?"; tail -3 "$OUT/table.txt" | cut -c1-400
echo "=== bench_moe_layer --quick $(date -u +%T)"
timeout 120 python3 bench/bench_moe_layer.py --quick --json "$OUT/bench_moe_layer.json" > "$OUT/bench_moe_layer.txt" 2>&1
echo "exit $?"; tail -12 "$OUT/bench_moe_layer.txt" | cut -c1-160
date -u
cd "$OUT" && tar czf ../call13_out.tgz . && rm -rf ./* && mv ../call13_out.tgz .
