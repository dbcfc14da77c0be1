#!/usr/bin/env bash
# session 14 call 3: issue #17's whole table with a Python probe around each row's host
# columns (bench_decode's "probe µs": how fast the VM's vCPU ran Python right then), and
# bench/host_cores.py (every core, three rounds; full-speed vs slowed samples).
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "=== issue #17 table $(date -u +%T)"
timeout 200 python3 bench/bench_decode.py --budget-s 160 --json "$OUT/table.json" 2> "$OUT/table.log" > "$OUT/table.txt"
echo "exit $?"; tail -1 "$OUT/table.txt"
echo "=== host_cores $(date -u +%T)"
timeout 120 python3 bench/host_cores.py --json "$OUT/host_cores.json" > "$OUT/host_cores.md" 2>&1
echo "exit $?"; tail -2 "$OUT/host_cores.md"
date -u
cd "$OUT" && tar czf ../call3_out.tgz . && rm -f ./* && mv ../call3_out.tgz .
