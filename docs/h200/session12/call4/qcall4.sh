#!/usr/bin/env bash
# session 12 call 4: row segments a plan cuts k into, 3 or 5 (not a power of two): which
# blocks differ from the reference, for the 64-block-unit build, the tree's and the committed.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
ROOT=$PWD
date -u
for v in s64 cur base; do
  cd "$ROOT/scratch/$v"; export PYTHONPATH=$PWD NVFP4_AOT_ARTIFACTS=$PWD/artifacts
  echo "=== $v"
  for shape in "300 2080" "300 6144" "64 10240" "300 5120" "129 2048"; do
    timeout 60 python3 "$ROOT/scratch/q_diag.py" $shape 2>&1 | tail -4
  done
done
cd "$ROOT"; date -u
