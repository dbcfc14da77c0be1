#!/usr/bin/env bash
# session 17 call 14 (#17): the host cost of an eager routed MoE run: copy + launch as one
# slot graph (MoeLayout.slot_graphs) vs a copy and a direct launch vs the routing-kernel
# plan (scratch/host_probe.py); then issue #17's table again with the slot graphs.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"; rm -rf "$OUT"/e64t2048* "$OUT"/table_* 2>/dev/null
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NVFP4_AOT_SHAPES=$PWD/tests/data/shapes.json
date -u
timeout 120 python3 scratch/host_probe.py 2>&1 | tee "$OUT/host_probe.txt"
echo "=== issue #17's table (routed, slot graphs) $(date -u +%T)"
timeout 200 python3 bench/bench_decode.py --json "$OUT/table.json" > "$OUT/table.txt" 2> "$OUT/table.log"
echo "exit $?"; tail -1 "$OUT/table.txt" | cut -c1-400
date -u
cd "$OUT" && tar czf ../call14_out.tgz . && rm -rf ./* && mv ../call14_out.tgz .
