#!/usr/bin/env bash
# session 18 call 3: global_scale with a full_like numerator (call 2's number / tensor was
# reciprocal-times-number in torch: 4 tests failed); torch / torch_ops / examples GPU
# tests; host_probe.py (the eager layer step's host time by op, cProfile).
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD NVFP4_AOT_SHAPES=$PWD/tests/data/shapes.json
date -u
NVFP4_AOT_REQUIRE_GPU=1 timeout 150 python3 -m pytest -q -rf -p no:cacheprovider tests/test_torch_gpu.py tests/test_torch_ops.py \
  tests/test_examples_gpu.py > "$OUT/tests_torch.log" 2>&1
echo "pytest exit code: $?"; grep -E "FAILED" "$OUT/tests_torch.log" | head; tail -1 "$OUT/tests_torch.log"
timeout 120 python3 scratch/host_probe.py > "$OUT/host_probe.txt" 2>&1; echo "exit $?"
grep -v Warn "$OUT/host_probe.txt" | head -120
date -u
cd "$OUT" && tar czf ../call3_out.tgz . && rm -rf ./* && mv ../call3_out.tgz .
