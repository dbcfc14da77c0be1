#!/usr/bin/env bash
# Session 23 call 6: the committed tree (main, unchanged this session) — the whole GPU
# suite with the require-GPU switch (last whole-suite run: session 20).
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD NVFP4_AOT_SHAPES=$PWD/tests/data/shapes.json
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
git log -1 --format=%H 2>/dev/null
NVFP4_AOT_REQUIRE_GPU=1 timeout 500 python3 -m pytest -q -p no:cacheprovider -rf -m gpu tests/ > "$OUT/suite.log" 2>&1
echo "suite exit $?"; grep FAILED "$OUT/suite.log" | head; tail -1 "$OUT/suite.log"
date -u
cd "$OUT" && tar czf ../out.tgz . && rm -rf ./* && mv ../out.tgz .
