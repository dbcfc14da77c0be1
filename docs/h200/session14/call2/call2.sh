#!/usr/bin/env bash
# session 14 call 2: issue #17's whole table with the eager calls timed on the vCPU that
# runs a Python probe fastest right then (bench_decode --host-cpu fastest, the new
# default), twice; bench/host_cores.py again between them (is the two-speed host still
# there?); the table's host columns with --host-cpu any once more for the same-run contrast.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for pass in 1 2; do
  echo "=== issue #17 table, --host-cpu fastest, pass $pass $(date -u +%T)"
  timeout 200 python3 bench/bench_decode.py --budget-s 160 --json "$OUT/table_fastest_$pass.json" \
    2> "$OUT/table_fastest_$pass.log" > "$OUT/table_fastest_$pass.txt"
  echo "exit $?"; tail -1 "$OUT/table_fastest_$pass.txt"
  if [ $pass = 1 ]; then
    echo "=== host_cores $(date -u +%T)"
    timeout 120 python3 bench/host_cores.py --json "$OUT/host_cores.json" > "$OUT/host_cores.md" 2>&1
    echo "exit $?"; tail -1 "$OUT/host_cores.md"
  fi
done
echo "=== issue #17 table, --host-cpu any $(date -u +%T)"
timeout 200 python3 bench/bench_decode.py --host-cpu any --budget-s 160 --json "$OUT/table_any.json" \
  2> "$OUT/table_any.log" > "$OUT/table_any.txt"
echo "exit $?"; tail -1 "$OUT/table_any.txt"
date -u
cd "$OUT" && tar czf ../call2_out.tgz . && rm -f ./* && mv ../call2_out.tgz .
