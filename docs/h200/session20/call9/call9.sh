#!/usr/bin/env bash
# Session 20 call 9 (review): the working tree with torch_ops' quantize check simplified
# (placement checked in one place, _quantize_signature, for the CUDA and CPU paths) and the
# kernel's one describe_batch call (cubins byte for byte unchanged): torch / torch_ops /
# examples / JAX / quantizer GPU tests, require-GPU.
date -u; export PYTHONPATH=$PWD NVFP4_AOT_REQUIRE_GPU=1 NVFP4_AOT_SHAPES=$PWD/tests/data/shapes.json; timeout 400 python3 -m pytest -q -p no:cacheprovider -rf tests/test_torch_ops.py tests/test_torch_gpu.py tests/test_examples_gpu.py tests/test_jax_gpu.py tests/test_quantizer_gpu.py 2>&1 | tail -4; date -u
