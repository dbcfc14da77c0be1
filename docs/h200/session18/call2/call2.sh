#!/usr/bin/env bash
# session 18 call 2: torch_ops.global_scale as one reduction + three element-wise kernels
# (was eight kernels), and bench_moe.sync_check queueing at most LAUNCH_QUEUE GPU
# activities: torch / torch_ops / examples GPU tests (require-GPU), the kernels a layer
# step launches (torch.profiler), bench_moe_layer.py --quick.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD NVFP4_AOT_SHAPES=$PWD/tests/data/shapes.json
date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
echo "=== torch, torch_ops, examples GPU tests $(date -u +%T)"
NVFP4_AOT_REQUIRE_GPU=1 timeout 150 python3 -m pytest -q -rf -p no:cacheprovider tests/test_torch_gpu.py tests/test_torch_ops.py \
  tests/test_examples_gpu.py > "$OUT/tests_torch.log" 2>&1
echo "pytest exit code: $?"; grep -E "FAILED|global_scale" "$OUT/tests_torch.log" | head; tail -1 "$OUT/tests_torch.log"
echo "=== GPU activities a layer step $(date -u +%T)"
timeout 60 python3 - <<'PY' 2>&1 | grep -v Warn | tee "$OUT/activities.txt"
import sys; sys.path.insert(0, "bench")
import torch
from bench_moe import gpu_activities
from bench_moe_layer import Weights, ours_step, torch_step
from nvfp4_aot import torch_ops
dev = torch.device("cuda", 0)
g = torch.Generator(device=dev).manual_seed(0)
w = Weights(128, 2048, 768, dev, g)
for t in (1, 64, 1024):
    x = torch.randn(t, 2048, device=dev, generator=g).to(torch.bfloat16)
    ours_step(x, w, 8); torch_step(x, w, 8)
    print(f"T={t}: ours {gpu_activities(lambda _i: ours_step(x, w, 8))}, torch "
          f"{gpu_activities(lambda _i: torch_step(x, w, 8))}, global_scale "
          f"{gpu_activities(lambda _i: torch_ops.global_scale(x))} GPU activities")
PY
echo "=== bench_moe_layer --quick $(date -u +%T)"
timeout 300 python3 bench/bench_moe_layer.py --quick --json "$OUT/bench_moe_layer.json" > "$OUT/bench_moe_layer.txt" 2>&1
echo "exit $?"; cut -c1-220 "$OUT/bench_moe_layer.txt"
python3 -c "
import json; d = json.load(open('$OUT/bench_moe_layer.json'))
for r in d['rows']: print(r.get('tokens'), r['syncs'])
" 2>&1 | tail -5
date -u
cd "$OUT" && tar czf ../call2_out.tgz . && rm -rf ./* && mv ../call2_out.tgz .
