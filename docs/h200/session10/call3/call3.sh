#!/usr/bin/env bash
# session 10 call 3: split-K in the decode family (artifacts/) vs the narrow-decode
# commit 7511d88 (scratch/prev_artifacts): tests, sanitizers, benches.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NVFP4_AOT_SHAPES=$PWD/tests/data/shapes.json
PREV=$PWD/scratch/prev_artifacts
DEC=sm90_nvfp4_grouped_gemm_decode
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "=== split-K GPU test first"
NVFP4_AOT_REQUIRE_GPU=1 timeout 60 python3 -m pytest -q tests/test_runtime_gpu.py -k "split_k or edge_shapes" -p no:cacheprovider 2>&1 | tail -3
echo "=== sanitizers, decode family (split-K shapes, MoE E=130 T=8 and T=1)"
for tool in memcheck racecheck; do
  timeout 100 compute-sanitizer --tool $tool --error-exitcode 9 python3 -m nvfp4_aot verify --kernel $DEC \
    --shape 16,128,128 --shape 16,128,256 --shape 9,128,384 --shape 16,200,640 --shape 5,128,1664 --out-dtype bfloat16 --alpha 2>&1 | tail -1
  echo "$tool split-K per-group exit code: ${PIPESTATUS[0]}"
  timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 python3 -m nvfp4_aot verify --kernel $DEC \
    --moe 130,128,256 --tokens 1 --tokens 8 --top-k 8 --layout contiguous --layout masked --routings 3 2>&1 | tail -1
  echo "MoE $tool exit code: ${PIPESTATUS[0]}"
done
echo "=== bench_decode: new (all 72), then prev (tokens 1, 8), same run"
timeout 300 python3 bench/bench_decode.py --budget-s 240 --json "$OUT/decode_new.json" 2> "$OUT/decode_new.log" > "$OUT/decode_new.txt"
echo "new exit $?"; tail -2 "$OUT/decode_new.txt"
NVFP4_AOT_ARTIFACTS=$PREV timeout 150 python3 bench/bench_decode.py --tokens 1 --tokens 8 --budget-s 100 \
  --json "$OUT/decode_prev.json" 2> "$OUT/decode_prev.log" > "$OUT/decode_prev.txt"
echo "prev exit $?"; tail -2 "$OUT/decode_prev.txt"
python3 - "$OUT/decode_new.json" "$OUT/decode_prev.json" <<'PY'
import json, sys, statistics
new = {(r["experts"], r["n"], r["k"], r["tokens"]): r for r in json.load(open(sys.argv[1]))["rows"]}
old = {(r["experts"], r["n"], r["k"], r["tokens"]): r for r in json.load(open(sys.argv[2]))["rows"]}
ratios = []
for key in sorted(old):
    if key in new:
        a, b = new[key], old[key]
        q = b["ours_graph_us"] / a["ours_graph_us"]
        ratios.append(q)
        print(key, f"new {a['ours_graph_us']:.1f} prev {b['ours_graph_us']:.1f} prev/new {q:.3f} gmm {a.get('grouped_mm_graph_us', 0):.1f} gmm/new {a.get('grouped_mm_over_ours', 0):.2f} floor {a['mem_floor_us']:.1f} copy {a['copy_same_us']:.1f}")
print("prev/new median", statistics.median(ratios), "min", min(ratios), "max", max(ratios))
PY
echo "=== bench_quantize (same-bytes copy column: one elementwise kernel)"
timeout 120 python3 bench/bench_quantize.py --json "$OUT/bench_quantize.json" > "$OUT/bench_quantize.txt" 2>&1
echo "exit $?"; tail -28 "$OUT/bench_quantize.txt"
echo "=== GPU suite"
NVFP4_AOT_REQUIRE_GPU=1 timeout 240 python3 -m pytest -q -m gpu tests/ -p no:cacheprovider \
  --ignore=tests/test_jax_gpu.py --ignore=tests/test_quantizer_gpu.py --ignore=tests/test_torch_gpu.py 2>&1 | tail -4
echo "pytest exit code: ${PIPESTATUS[0]}"
echo "=== MoE GPU tests"
NVFP4_AOT_REQUIRE_GPU=1 timeout 100 python3 -m pytest -q tests/test_moe_gpu.py -p no:cacheprovider 2>&1 | tail -3
echo "=== torch (torch.cuda.graph global mode), examples, quantizer GPU tests"
NVFP4_AOT_REQUIRE_GPU=1 timeout 150 python3 -m pytest -q tests/test_torch_gpu.py tests/test_examples_gpu.py tests/test_quantizer_gpu.py -p no:cacheprovider 2>&1 | tail -3
date -u
