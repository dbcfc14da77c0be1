#!/usr/bin/env bash
# session 10 call 4: the final code (= 7511d88 artifacts): issue #17's table with the
# same-bytes copy column (one elementwise kernel), MoE layer quick.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import hashlib,pathlib; print('manifest sha256', hashlib.sha256(pathlib.Path('artifacts/manifest.json').read_bytes()).hexdigest()[:16])"
echo "=== bench_decode (final code, plan's choice)"
timeout 240 python3 bench/bench_decode.py --budget-s 200 --json "$OUT/bench_decode.json" 2> "$OUT/bench_decode.log" > "$OUT/bench_decode.txt"
echo "exit $?"; tail -2 "$OUT/bench_decode.txt"
echo "=== bench_moe_layer --quick"
timeout 120 python3 bench/bench_moe_layer.py --quick 2>&1 | tail -6
date -u
