#!/usr/bin/env bash
# session 14 call 4: what one per-group tensormap switch costs (issue #17: "every tile pays
# the per-group tensormap switch"). scratch/tmx2 = the committed artifacts with every
# sm_90a GEMM cubin rebaked from a tree whose producer points its four descriptors at each
# new group twice (_update_tensormaps' update + fences repeated; results unchanged). The
# 1- and 8-token rows of issue #17's table (one or two tiles per CTA, each a new group),
# committed and tmx2 in alternating passes; the time difference is one switch on the
# critical path of a CTA's tiles.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
run() {  # NAME ART PASS
  NVFP4_AOT_ARTIFACTS=$2 timeout 150 python3 bench/bench_decode.py --tokens 1 --tokens 8 --tokens 32 --budget-s 120 \
    --json "$OUT/bd_$1_$3.json" > "$OUT/bd_$1_$3.txt" 2> "$OUT/bd_$1_$3.log"
  echo "$1 pass $3 exit $? $(date -u +%T)"; tail -1 "$OUT/bd_$1_$3.txt" | cut -c1-200
}
run committed artifacts 1
run tmx2 scratch/tmx2 1
run tmx2 scratch/tmx2 2
run committed artifacts 2
python3 - "$OUT" <<'PY'
import json, statistics, sys
out = sys.argv[1]
def rows(name):
    got = {}
    for p in (1, 2):
        for r in json.load(open(f"{out}/bd_{name}_{p}.json"))["rows"]:
            got.setdefault((r["experts"], r["n"], r["k"], r["tokens"]), []).append(r)
    return got
a, b = rows("committed"), rows("tmx2")
print("| E | n, k | tokens | family | committed µs | switch twice µs | difference µs | ratio |")
print("| --- | --- | --- | --- | --- | --- | --- | --- |")
diffs = []
for key in sorted(a):
    ca = statistics.median(r["ours_graph_us"] for r in a[key])
    cb = statistics.median(r["ours_graph_us"] for r in b[key])
    diffs.append(cb - ca)
    print(f"| {key[0]} | {key[1]}, {key[2]} | {key[3]} | {a[key][0]['family']} | {ca:.1f} | {cb:.1f} | {cb - ca:+.1f} | {cb / ca:.3f} |")
print(f"median difference {statistics.median(diffs):+.2f} µs over {len(diffs)} rows")
PY
date -u
cd "$OUT" && tar czf ../call4_out.tgz . && rm -f ./* && mv ../call4_out.tgz .
