#!/usr/bin/env bash
# session 14 call 8: the committed tree (404db52): the GPU tests calls 5 and 7 left out —
# JAX (the GEMMs through the XLA FFI, inside jit) and the quantizer — require-GPU on.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NVFP4_AOT_SHAPES=$PWD/tests/data/shapes.json
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import hashlib,pathlib; print('manifest sha256', hashlib.sha256(pathlib.Path('artifacts/manifest.json').read_bytes()).hexdigest()[:16])"
NVFP4_AOT_REQUIRE_GPU=1 timeout 400 python3 -m pytest -q -rf tests/test_jax_gpu.py tests/test_quantizer_gpu.py \
  -p no:cacheprovider > "$OUT/jax_quantizer.log" 2>&1
echo "pytest exit code: $?"; grep FAILED "$OUT/jax_quantizer.log" | head; tail -1 "$OUT/jax_quantizer.log"
date -u
cd "$OUT" && tar czf ../call8_out.tgz . && rm -f ./* && mv ../call8_out.tgz .
