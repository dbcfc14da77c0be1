#!/usr/bin/env bash
# session 16 call 3 (#16): does the copy's proxy fence (MEMBAR.ALL.CTA in SASS: it waits
# for the warp's earlier global stores) cost the units their time? lean (call 1) vs
# nofence (lean without fence.proxy.async before each bulk copy) vs nopadstore (call 2's
# diagnostic: padding units store nothing; wrong padding scales, timing only).
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
date -u
timeout 200 python3 scratch/qcompare.py --passes 3 --json "$OUT/compare.json" lean=scratch/lean/artifacts \
  nofence=scratch/nofence/artifacts nopadstore=scratch/nopadstore/artifacts 2>&1 | tee "$OUT/compare.txt"
date -u
cd "$OUT" && tar czf ../call3_out.tgz . && rm -rf ./* && mv ../call3_out.tgz .
