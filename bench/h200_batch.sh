#!/usr/bin/env bash
# Everything that needs the GPU, in one device call: GPU tests, CLI from the installed
# wheel, reliability, host path, kernel benchmark against torch, compute-sanitizer, MoE
# (GPU tests, CLI verify, sanitizer), the MoE benchmark, the epilogues (alpha, BF16:
# CLI verify, sanitizer, cost against the original epilogue), JAX, the activation
# quantizer (GPU tests, benchmark, compute-sanitizer), issue #17's decode benchmark
# with Nsight Compute on one decode configuration, and the torch MoE layer end to end
# (quantize op, example, whole-layer graph; the fused layer benchmark).
# Run from the repo root on the GPU machine:  bash bench/h200_batch.sh 2>&1 | tee $OUT/batch.log
# JSON results and the CLI transcript go to $OUT (default ./out). STEPS selects steps
# (default: all). The wheel (python -m pip wheel --no-deps -w .carry/wheel .) is carried.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
STEPS=${STEPS:-env tests families choice cli reliability host bench sanitizer moe moebench epilogue jax quant decode layer}
FAMILIES="sm90_nvfp4_grouped_gemm sm90_nvfp4_grouped_gemm_a16 sm90_nvfp4_grouped_gemm_decode sm90_nvfp4_grouped_gemm_decode32"
KERNELS=$(printf -- "--kernel %s " $FAMILIES)
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NVFP4_AOT_SHAPES=$PWD/tests/data/shapes.json
SHAPES=$PWD/tests/data/shapes.json
want() { [[ " $STEPS " == *" $1 "* ]]; }
step() { echo; echo "=== $* ($(date -u +%H:%M:%S))"; }

if want env; then
  step environment
  date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c 'import sys, numpy, cuda.bindings; print(sys.version.split()[0], "numpy", numpy.__version__, "cuda-bindings", cuda.bindings.__version__)'
fi
if want tests; then
  step "GPU tests (pytest -m gpu; NVFP4_AOT_REQUIRE_GPU=1: no GPU, driver, kernel or file fails)"
  NVFP4_AOT_REQUIRE_GPU=1 timeout 540 python3 -m pytest -q -m gpu tests/ -p no:cacheprovider \
    --ignore=tests/test_jax_gpu.py --ignore=tests/test_quantizer_gpu.py --ignore=tests/test_torch_gpu.py 2>&1 | tail -15  # own steps
  echo "pytest exit code: ${PIPESTATUS[0]}"
fi
if want families; then
  step "both sm_90a kernel families: verify, then bench on the benchmarks and the choice grid"
  for section in tests benchmarks; do
    timeout 150 python3 -m nvfp4_aot verify --shapes "$SHAPES" --section $section $KERNELS 2>&1 | tail -1
  done
  timeout 120 python3 -m nvfp4_aot verify $KERNELS --groups-json '{"m":[1000,300,77],"n":[4096,8192,1024],"k":[128,256,384]}' 2>&1 | tail -1
  timeout 200 python3 -m nvfp4_aot bench --shapes "$SHAPES" $KERNELS --repeats 50 --json > "$OUT/bench_families.json"
  python3 bench/family_table.py "$OUT/bench_families.json"
fi
if want choice; then
  step "both sm_90a kernel families on the grid that sets the runtime's choice"
  timeout 420 python3 -m nvfp4_aot bench --shapes bench/data/family_choice_shapes.json $KERNELS \
    --repeats 20 --warmup 3 --sets 2 --json > "$OUT/bench_family_choice.json"
  python3 bench/family_table.py "$OUT/bench_family_choice.json"
fi
if want cli; then
  step "CLI from the installed wheel"
  rm -rf /tmp/site && python3 -m pip install -q --no-index --no-deps --target /tmp/site .carry/wheel/*.whl
  ( cd /tmp && export PYTHONPATH=/tmp/site && {
      echo "# $(date -u) $(nvidia-smi --query-gpu=name --format=csv,noheader)"
      echo "\$ nvfp4-aot info"; /tmp/site/bin/nvfp4-aot info
      echo "\$ nvfp4-aot verify --shapes shapes.json"; /tmp/site/bin/nvfp4-aot verify --shapes "$SHAPES"
      echo "\$ nvfp4-aot verify --shapes shapes.json --section benchmarks"; /tmp/site/bin/nvfp4-aot verify --shapes "$SHAPES" --section benchmarks
      echo "\$ nvfp4-aot bench --shapes shapes.json"; /tmp/site/bin/nvfp4-aot bench --shapes "$SHAPES"
      python3 -c 'import nvfp4_aot; print("nvfp4_aot imported from", nvfp4_aot.__file__)'
    } 2>&1 ) > "$OUT/cli_transcript.txt"
  tail -8 "$OUT/cli_transcript.txt"
fi
if want reliability; then
  step reliability
  timeout 120 python3 bench/reliability.py --json "$OUT/reliability.json" 2>&1 | tail -8
  timeout 120 python3 bench/reliability.py --quick --kernel sm90_nvfp4_grouped_gemm_a16 \
    --json "$OUT/reliability_a16.json" 2>&1 | tail -8
fi
if want host; then
  step "host path"
  timeout 120 python3 bench/host_path.py --shapes "$SHAPES" --processes 3 --json "$OUT/host_path.json" 2>&1 | tail -90
fi
if want bench; then
  step "kernel benchmark against torch baselines"
  timeout 150 python3 bench/bench_grouped_gemm.py --shapes "$SHAPES" --repeats 60 --sets 2 --json "$OUT/bench.json" 2>&1 | tail -12
fi
if want sanitizer; then
  step "compute-sanitizer (memcheck, racecheck) on a 3-group problem"
  for tool in memcheck racecheck; do for family in $FAMILIES; do
    timeout 90 compute-sanitizer --tool $tool --error-exitcode 9 python3 -m nvfp4_aot verify --kernel $family \
      --shape 200,256,512 --shape 72,384,256 --shape 128,128,128 2>&1 | grep -v "^shape\|^-----\|^ *case" | tail -30
    echo "$tool $family exit code: ${PIPESTATUS[0]}"
  done; done
fi
if want moe; then
  step "MoE: GPU tests (one graph, every routing), CLI verify of both layouts with both sm_90a families, compute-sanitizer"
  NVFP4_AOT_REQUIRE_GPU=1 timeout 400 python3 -m pytest -q tests/test_moe_gpu.py -p no:cacheprovider 2>&1 | tail -8
  echo "pytest exit code: ${PIPESTATUS[0]}"
  # E = 8 (one launch), 128 (two: 120 + 8) and 256 (three), top-8 routings of every kind,
  # each eager and by replaying one CUDA graph; every expert and the poison checked
  timeout 300 python3 -m nvfp4_aot verify $KERNELS --layout contiguous --layout masked \
    --moe 8,1536,2048 --moe 128,256,512 --moe 256,128,256 --tokens 64 --top-k 8 --json > "$OUT/verify_moe.json"
  echo "verify --moe exit code: $?"
  python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); print(sum(len(c["routings"]) for c in d["cases"]), "routings in", len(d["cases"]), "cases, failed:", d["failed_routings"])' "$OUT/verify_moe.json"
  timeout 120 python3 -m nvfp4_aot verify --kernel sm90_nvfp4_grouped_gemm --moe 32,256,512 --tokens 16 --top-k 8 \
    --layout contiguous --layout masked --routings 6 2>&1 | tail -14
  for tool in memcheck racecheck; do for family in $FAMILIES; do
    timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 python3 -m nvfp4_aot verify --kernel $family \
      --moe 130,128,256 --tokens 8 --top-k 8 --layout contiguous --layout masked --routings 3 2>&1 \
      | grep -v "^ *E130\|^-----\|^ *case" | tail -20
    echo "MoE $tool $family exit code: ${PIPESTATUS[0]}"
  done; done
fi
if want moebench; then
  step "MoE benchmark: a new routing every step, ours (graph, eager) against torch._grouped_mm"
  timeout 300 python3 bench/bench_moe.py --json "$OUT/bench_moe.json" 2>&1 | tail -22
  echo "bench_moe exit code: ${PIPESTATUS[0]}"
  timeout 200 python3 -m nvfp4_aot bench $KERNELS --moe 128,1536,2048 --moe 32,4096,7168 --tokens 16 \
    --tokens 1024 --top-k 8 --routing uniform --routing skewed --repeats 50 2>&1 | tail -12
fi
if want epilogue; then
  step "epilogues: CLI verify with BF16 output and a random alpha per group/expert, sanitizer, cost"
  for dtype in float16 bfloat16; do
    for section in tests benchmarks; do
      timeout 150 python3 -m nvfp4_aot verify --shapes "$SHAPES" --section $section $KERNELS \
        --out-dtype $dtype --alpha 2>&1 | tail -1
    done
    timeout 200 python3 -m nvfp4_aot verify $KERNELS --layout contiguous --layout masked \
      --moe 8,1536,2048 --moe 128,256,512 --tokens 64 --top-k 8 --out-dtype $dtype --alpha 2>&1 | tail -1
  done
  for tool in memcheck racecheck; do for family in $FAMILIES; do
    timeout 120 compute-sanitizer --tool $tool --error-exitcode 9 python3 -m nvfp4_aot verify --kernel $family \
      --shape 200,256,512 --shape 72,384,256 --out-dtype bfloat16 --alpha 2>&1 | tail -2
    echo "$tool $family bf16+alpha exit code: ${PIPESTATUS[0]}"
    timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 python3 -m nvfp4_aot verify --kernel $family \
      --moe 130,128,256 --tokens 8 --top-k 8 --layout contiguous --layout masked --routings 3 \
      --out-dtype bfloat16 --alpha 2>&1 | tail -2
    echo "MoE $tool $family bf16+alpha exit code: ${PIPESTATUS[0]}"
  done; done
  timeout 400 python3 bench/bench_epilogue.py --json "$OUT/bench_epilogue.json" 2>&1 | tail -40
fi
if want jax; then
  step "JAX: FFI handler inside jax.jit (smoke with command buffers on/off/trait, GPU tests, example, benchmark on and off)"
  export XLA_PYTHON_CLIENT_PREALLOCATE=false
  python3 -c 'import jax, jaxlib; print("jax", jax.__version__, "jaxlib", jaxlib.__version__, jax.devices())'
  timeout 150 python3 bench/jax_smoke.py 2>&1 | tail -80
  echo "jax_smoke exit code: ${PIPESTATUS[0]}"
  NVFP4_AOT_REQUIRE_GPU=1 timeout 400 python3 -m pytest -q tests/test_jax_gpu.py tests/test_jax.py -p no:cacheprovider 2>&1 | tail -12
  echo "pytest jax exit code: ${PIPESTATUS[0]}"
  timeout 300 python3 bench/bench_jax.py --json "$OUT/bench_jax.json" 2>&1 | tail -20
  echo "bench_jax (command buffers on) exit code: ${PIPESTATUS[0]}"
  XLA_FLAGS=--xla_gpu_enable_command_buffer= timeout 300 python3 bench/bench_jax.py \
    --json "$OUT/bench_jax_no_cmdbuf.json" 2>&1 | tail -20
  echo "bench_jax (command buffers off) exit code: ${PIPESTATUS[0]}"
fi
if want quant; then
  step "quantizer: GPU tests (bytes = numpy reference, poison untouched), benchmark, compute-sanitizer"
  NVFP4_AOT_REQUIRE_GPU=1 timeout 500 python3 -m pytest -q -rf tests/test_quantizer_gpu.py \
    -p no:cacheprovider > "$OUT/quant_tests.log" 2>&1
  echo "pytest exit code: $?"
  sed -n '/= FAILURES =/,/short test summary/p' "$OUT/quant_tests.log" | cut -c1-2000 | head -40
  tail -3 "$OUT/quant_tests.log"
  timeout 400 python3 bench/bench_quantize.py --json "$OUT/bench_quantize.json" 2>&1 | tail -30
  echo "bench_quantize exit code: ${PIPESTATUS[0]}"
  QUANT_SUBSET="T129-k160 or T3-k48 or E8-T300 or E8-maxm100 or padding_rows"
  for tool in memcheck racecheck; do
    NVFP4_AOT_QUANT_ROUTINGS=2 NVFP4_AOT_REQUIRE_GPU=1 timeout 300 compute-sanitizer --tool $tool \
      --error-exitcode 9 python3 -m pytest -q -x -p no:cacheprovider tests/test_quantizer_gpu.py \
      -k "$QUANT_SUBSET" 2>&1 | tail -12
    echo "quant $tool exit code: ${PIPESTATUS[0]}"
  done
fi
if want decode; then
  step "decode (#17): 72 configurations (E x tokens x n,k), ours vs grouped_mm vs memory floor; ncu on E=128, 8 tokens"
  # progress lines and any traceback: $OUT/bench_decode.log; rows are written after each
  # configuration, so a timeout still leaves $OUT/bench_decode.json
  timeout 540 python3 bench/bench_decode.py --budget-s 420 --json "$OUT/bench_decode.json" \
    2> "$OUT/bench_decode.log"
  echo "bench_decode exit code: $? (0 ok, 1 a spot check failed, 2 stopped by --budget-s)"
  tail -4 "$OUT/bench_decode.log"
  OUT="$OUT" timeout 900 bash bench/profile_decode.sh 2>&1 | tail -250
  echo "profile_decode exit code: ${PIPESTATUS[0]}"
fi
if want layer; then
  # about 5 minutes in all: the tests (test_torch_gpu.py runs the example in process, with
  # --graph --compile and decode-sized), the example's output for the log, the benchmark
  step "torch MoE layer end to end: quantize op + example + whole-layer graph (GPU tests), layer benchmark against torch._grouped_mm"
  python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.get_device_name(0))'
  NVFP4_AOT_REQUIRE_GPU=1 timeout 300 python3 -m pytest -q -rf tests/test_torch_gpu.py tests/test_torch_ops.py \
    tests/test_bench_moe_layer.py -p no:cacheprovider > "$OUT/layer_tests.log" 2>&1
  echo "pytest exit code: $?"
  sed -n '/= FAILURES =/,/short test summary/p' "$OUT/layer_tests.log" | cut -c1-2000 | head -60
  tail -3 "$OUT/layer_tests.log"
  timeout 90 python3 examples/torch_moe.py --device 0 --graph 2>&1 | tail -12
  echo "torch_moe example exit code: ${PIPESTATUS[0]}"
  timeout 200 python3 bench/bench_moe_layer.py --json "$OUT/bench_moe_layer.json" 2>&1 | tail -30
  echo "bench_moe_layer exit code: ${PIPESTATUS[0]}"
fi
step done
