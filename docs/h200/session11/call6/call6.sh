#!/usr/bin/env bash
# session 11 call 6 (experiment, not committed): a 32-row decode family (two CTAs per SM,
# 6 stages; scratch/exp_artifacts) for 17-64 rows per expert, against the committed
# kernels, same run: bench_decode with 128, 512 and 2048 tokens.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
EXP=$PWD/scratch/exp_artifacts
date -u
T="--tokens 128 --tokens 512 --tokens 2048"
timeout 100 python3 bench/bench_decode.py $T --budget-s 60 --json "$OUT/base.json" > "$OUT/base.txt" 2> "$OUT/base.log"; echo "base exit $?"
NVFP4_AOT_ARTIFACTS=$EXP timeout 100 python3 bench/bench_decode.py $T --budget-s 60 --json "$OUT/exp_choice.json" > "$OUT/exp_choice.txt" 2> "$OUT/exp_choice.log"; echo "exp choice exit $?"
NVFP4_AOT_ARTIFACTS=$EXP timeout 100 python3 bench/bench_decode.py --tokens 512 --tokens 2048 --kernel sm90_nvfp4_grouped_gemm_decode32 --budget-s 60 --json "$OUT/exp_forced.json" > "$OUT/exp_forced.txt" 2> "$OUT/exp_forced.log"; echo "exp forced exit $?"
for f in base exp_choice exp_forced; do tail -1 "$OUT/$f.txt"; done
python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
load = lambda n: {(r["experts"], r["n"], r["k"], r["tokens"]): r for r in json.load(open(f"{out}/{n}.json"))["rows"]}
base, choice, forced = load("base"), load("exp_choice"), load("exp_forced")
for key in sorted(base):
    b = base[key]; c = choice.get(key); f = forced.get(key)
    line = f"{key} rows/e {b['rows_per_expert_hit']:.1f} base {b['family'][-6:]} {b['ours_graph_us']:.1f} gmm {b['grouped_mm_graph_us']:.1f} ({b['grouped_mm_over_ours']:.2f}x)"
    if c: line += f" | choice {c['family'][-6:]} {c['ours_graph_us']:.1f} ({c['grouped_mm_graph_us']/c['ours_graph_us']:.2f}x)"
    if f: line += f" | d32 {f['ours_graph_us']:.1f} ({f['grouped_mm_graph_us']/f['ours_graph_us']:.2f}x) err {f['check']['relative_error']:.1e}"
    print(line)
PY
date -u
