#!/usr/bin/env bash
# session 14 call 6: the committed tree with call 5's descriptor switch (one release fence
# for four descriptors) baked into artifacts/ (its cubins are call 5's scratch/tmrel ones
# byte for byte): issue #17's whole table.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import hashlib,pathlib; print('manifest sha256', hashlib.sha256(pathlib.Path('artifacts/manifest.json').read_bytes()).hexdigest()[:16])"
echo "=== issue #17 table $(date -u +%T)"
timeout 200 python3 bench/bench_decode.py --budget-s 160 --json "$OUT/table.json" 2> "$OUT/table.log" > "$OUT/table.txt"
echo "exit $?"; tail -1 "$OUT/table.txt"
date -u
cd "$OUT" && tar czf ../call6_out.tgz . && rm -f ./* && mv ../call6_out.tgz .
