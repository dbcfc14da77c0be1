#!/usr/bin/env bash
# session 17 call 18: the committed tree (ba1bae7): bench_quantize.py (#16's table),
# bench_moe_layer.py --quick (the fused layer, routed GEMMs + quantizer).
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"; rm -rf "$OUT"/e64t2048* "$OUT"/table_* 2>/dev/null
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD NVFP4_AOT_SHAPES=$PWD/tests/data/shapes.json
date -u
echo "=== bench_quantize $(date -u +%T)"
timeout 90 python3 bench/bench_quantize.py --json "$OUT/bench_quantize.json" > "$OUT/bench_quantize.txt" 2>&1
echo "exit $?"; cut -c1-140 "$OUT/bench_quantize.txt"
echo "=== bench_moe_layer --quick $(date -u +%T)"
timeout 120 python3 bench/bench_moe_layer.py --quick --json "$OUT/bench_moe_layer.json" > "$OUT/bench_moe_layer.txt" 2>&1
echo "exit $?"; tail -6 "$OUT/bench_moe_layer.txt" | cut -c1-160
date -u
