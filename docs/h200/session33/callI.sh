#!/usr/bin/env bash
# Session 33 call I (the command as it ran; asked for with no kind after call H's H200
# had gone idle: an H100 came): the whole GPU suite, main at a72639e.
mkdir -p $OUT && date -u && nvidia-smi --query-gpu=name --format=csv,noheader && NVFP4_AOT_REQUIRE_GPU=1 NVFP4_AOT_SHAPES=$PWD/tests/data/shapes.json PYTHONPATH=$PWD timeout 380 python3 -m pytest -q -m gpu tests/ -p no:cacheprovider > $OUT/gpu_suite.log 2>&1; echo "pytest exit $?"; tail -n 5 $OUT/gpu_suite.log; date -u
