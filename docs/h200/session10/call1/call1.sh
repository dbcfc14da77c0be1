#!/usr/bin/env bash
# session 10 call 1: narrow-tile activation decode spread over all warps (new artifacts/)
# vs the committed decode family (scratch/old_artifacts), same run; same-bytes copy columns.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NVFP4_AOT_SHAPES=$PWD/tests/data/shapes.json
OLD=$PWD/scratch/old_artifacts
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "=== bench_decode: new (all 72), then old (tokens <= 128), same run"
timeout 300 python3 bench/bench_decode.py --budget-s 240 --json "$OUT/decode_new.json" 2> "$OUT/decode_new.log" > "$OUT/decode_new.txt"
echo "new exit $?"; tail -2 "$OUT/decode_new.txt"
NVFP4_AOT_ARTIFACTS=$OLD timeout 240 python3 bench/bench_decode.py --tokens 1 --tokens 8 --tokens 32 --tokens 128 --budget-s 180 \
  --json "$OUT/decode_old.json" 2> "$OUT/decode_old.log" > "$OUT/decode_old.txt"
echo "old exit $?"; tail -2 "$OUT/decode_old.txt"
python3 - "$OUT/decode_new.json" "$OUT/decode_old.json" <<'PY'
import json, sys, statistics
new = {(r["experts"], r["n"], r["k"], r["tokens"]): r for r in json.load(open(sys.argv[1]))["rows"]}
old = {(r["experts"], r["n"], r["k"], r["tokens"]): r for r in json.load(open(sys.argv[2]))["rows"]}
ratios = []
for key in sorted(old):
    if key in new:
        a, b = new[key], old[key]
        q = b["ours_graph_us"] / a["ours_graph_us"]
        ratios.append(q)
        print(key, a["family"], f"new {a['ours_graph_us']:.1f} old {b['ours_graph_us']:.1f} old/new {q:.3f} floor {a['mem_floor_us']:.1f} copy {a['copy_same_us']:.1f} new/floor {a['ours_over_floor']:.2f} new/copy {a['ours_over_copy']:.2f}")
print("old/new median", statistics.median(ratios), "min", min(ratios), "max", max(ratios))
PY
echo "=== bench_quantize (same-bytes copy column)"
timeout 240 python3 bench/bench_quantize.py --json "$OUT/bench_quantize.json" > "$OUT/bench_quantize.txt" 2>&1
echo "exit $?"; cat "$OUT/bench_quantize.txt" | tail -30
echo "=== GPU suite (h200_batch tests step), new artifacts"
NVFP4_AOT_REQUIRE_GPU=1 timeout 300 python3 -m pytest -q -m gpu tests/ -p no:cacheprovider \
  --ignore=tests/test_jax_gpu.py --ignore=tests/test_quantizer_gpu.py --ignore=tests/test_torch_gpu.py 2>&1 | tail -4
echo "pytest exit code: ${PIPESTATUS[0]}"
echo "=== MoE GPU tests"
NVFP4_AOT_REQUIRE_GPU=1 timeout 200 python3 -m pytest -q tests/test_moe_gpu.py -p no:cacheprovider 2>&1 | tail -3
date -u
