#!/usr/bin/env bash
# session 17 call 24 (torch_ops plans with 64 ring slots): bench_moe_layer.py --quick, the sync check at 16 eager steps, 250 ms hold (call 21:
# at 32 steps torch's own BF16 layer blocks the host behind a held GPU too).
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"; rm -rf "$OUT"/e64t2048* "$OUT"/table_* 2>/dev/null
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
date -u
timeout 150 python3 bench/bench_moe_layer.py --quick --json "$OUT/bench_moe_layer.json" > "$OUT/bench_moe_layer.txt" 2>&1
echo "exit $?"; tail -6 "$OUT/bench_moe_layer.txt" | cut -c1-170
python3 -c "import json; [print(r['tokens'], r['syncs']) for r in json.load(open('$OUT/bench_moe_layer.json'))['rows']]"
date -u
