#!/usr/bin/env bash
# session 18 call 5: the torch ops' host path trimmed (moe_gemm checks its operands once,
# quantize checks a call signature's shapes once, the current stream by torch's raw
# accessor, global_scale's numerator a CPU scalar: four kernels): torch / torch_ops /
# examples GPU tests; host_probe2.py as call 4; bench_moe_layer.py --quick; then the
# whole GPU suite (require-GPU) on the tree.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD NVFP4_AOT_SHAPES=$PWD/tests/data/shapes.json
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
NVFP4_AOT_REQUIRE_GPU=1 timeout 150 python3 -m pytest -q -rf -p no:cacheprovider tests/test_torch_gpu.py tests/test_torch_ops.py \
  tests/test_examples_gpu.py > "$OUT/tests_torch.log" 2>&1
echo "torch tests exit code: $?"; grep -E "FAILED" "$OUT/tests_torch.log" | head; tail -1 "$OUT/tests_torch.log"
timeout 100 python3 scratch/host_probe2.py > "$OUT/host_probe2.txt" 2>&1; echo "host probe exit $?"
grep -v Warn "$OUT/host_probe2.txt" | head -12
timeout 120 python3 bench/bench_moe_layer.py --quick --json "$OUT/bench_moe_layer.json" > "$OUT/bench_moe_layer.txt" 2>&1
echo "bench_moe_layer exit $?"; grep "^|" "$OUT/bench_moe_layer.txt" | cut -c1-200
echo "=== GPU suite $(date -u +%T)"
NVFP4_AOT_REQUIRE_GPU=1 timeout 330 python3 -m pytest -q -rf -p no:cacheprovider -m gpu tests/ > "$OUT/suite.log" 2>&1
echo "suite exit code: $?"; grep -E "FAILED|ERROR" "$OUT/suite.log" | head; tail -1 "$OUT/suite.log"
date -u
cd "$OUT" && tar czf ../call5_out.tgz . && rm -rf ./* && mv ../call5_out.tgz .
