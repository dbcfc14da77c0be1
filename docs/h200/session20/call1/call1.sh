#!/usr/bin/env bash
# Session 20 call 1: per-warp timeline of main's quantizer (scratch/tl_art: make_timeline_probe.py
# on main, baked with docs/h200/session19/bake_one.py) beside main's replay time (scratch/base_art).
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv
python3 scratch/timeline.py scratch/base_art scratch/tl_art $OUT/tl 2>&1 | tee $OUT/timeline.txt | head -300
