#!/usr/bin/env bash
# Session 20 call 8: the committed tree's benchmarks: bench_quantize.py (#16's table: ours
# vs the floor, a same-bytes copy and the torch version) and bench_moe_layer.py --quick.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD NVFP4_AOT_SHAPES=$PWD/tests/data/shapes.json
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 200 python3 bench/bench_quantize.py --json "$OUT/bench_quantize.json" > "$OUT/bench_quantize.txt" 2>&1
echo "exit $?"; cut -c1-160 "$OUT/bench_quantize.txt" | head -30
timeout 200 python3 bench/bench_moe_layer.py --quick > "$OUT/bench_moe_layer.txt" 2>&1
echo "exit $?"; tail -12 "$OUT/bench_moe_layer.txt"
date -u
cd "$OUT" && tar czf ../out.tgz . && rm -rf ./* && mv ../out.tgz .
