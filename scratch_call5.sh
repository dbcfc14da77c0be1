#!/usr/bin/env bash
# session 9 call 5: G=256 variants + capture slots written outside the graph: GPU suite, MoE, torch graphs, quantizer; decode table
set -u
OUT=${OUT:-out}; mkdir -p $OUT/r
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NVFP4_AOT_SHAPES=$PWD/tests/data/shapes.json
STEPS="env tests" OUT=$OUT/r bash bench/h200_batch.sh 2>&1 | tee $OUT/r/batch_tests.log | grep -v "^SKIPPED" | tail -8
echo "=== MoE GPU tests"
NVFP4_AOT_REQUIRE_GPU=1 timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_moe_gpu.py 2>&1 | tail -3
echo "=== torch GPU tests (graphs captured by torch.cuda.graph) + quantizer GPU tests"
NVFP4_AOT_REQUIRE_GPU=1 timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_torch_gpu.py tests/test_quantizer_gpu.py 2>&1 | tail -3
echo "=== bench_decode (plan's choice)"
timeout 150 python3 bench/bench_decode.py --json $OUT/r/bench_decode.json > $OUT/r/bench_decode.txt 2> $OUT/r/bench_decode.log
echo "exit $?"; tail -1 $OUT/r/bench_decode.txt
echo "=== bench_quantize"
timeout 100 python3 bench/bench_quantize.py 2>&1 | tail -14
cd $OUT && tar czf r.tgz r && rm -rf r
