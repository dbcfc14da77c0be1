#!/usr/bin/env bash
# session 18 call 4: host_probe2.py (the torch ops' host time by part, cProfile).
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
date -u; nproc; grep -m1 "model name" /proc/cpuinfo
timeout 150 python3 scratch/host_probe2.py > "$OUT/host_probe2.txt" 2>&1; echo "exit $?"
grep -v Warn "$OUT/host_probe2.txt" | head -150
date -u
cd "$OUT" && tar czf ../call4_out.tgz . && rm -rf ./* && mv ../call4_out.tgz .
