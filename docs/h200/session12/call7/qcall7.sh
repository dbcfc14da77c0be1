#!/usr/bin/env bash
# session 12 call 7: magnitudes through max.xorsign.abs and |x| operand modifiers (xs: ~186
# instructions a block, was ~192) against the shipped kernel (bat): quantizer GPU tests,
# sanitizers, the torch quantize tests, benches.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT/r"
export PYTHONUNBUFFERED=1
ROOT=$PWD
date -u
cd "$ROOT/scratch/xs"; export PYTHONPATH=$PWD NVFP4_AOT_ARTIFACTS=$PWD/artifacts
python3 -c "import nvfp4_aot, sys; print('package', nvfp4_aot.__file__)"
echo "=== xs: quantizer GPU tests (the copy's own package: scratch/xs/pyproject.toml)"
NVFP4_AOT_REQUIRE_GPU=1 timeout 120 python3 -m pytest -q -p no:cacheprovider --tb=line tests/test_quantizer_gpu.py > "$OUT/r/quant_tests.log" 2>&1
echo "exit $?"; tail -2 "$OUT/r/quant_tests.log" | cut -c1-500
NVFP4_AOT_REQUIRE_GPU=1 timeout 90 python3 -m pytest -q -p no:cacheprovider --tb=line tests/test_torch_gpu.py -k "quantiz" > "$OUT/r/torch_tests.log" 2>&1
echo "torch quantize tests exit $?"; tail -1 "$OUT/r/torch_tests.log" | cut -c1-300
for tool in memcheck racecheck; do
  NVFP4_AOT_QUANT_ROUTINGS=2 NVFP4_AOT_REQUIRE_GPU=1 timeout 100 compute-sanitizer --tool $tool --error-exitcode 9 \
    python3 -m pytest -q -x -p no:cacheprovider tests/test_quantizer_gpu.py \
    -k "T129-k160 or T3-k48 or E8-T300 or E8-maxm100 or padding_rows or E256-T512" > "$OUT/r/$tool.log" 2>&1
  echo "$tool exit $?"; grep -E "SUMMARY|passed|failed" "$OUT/r/$tool.log" | tail -2
done
for v in xs bat; do
  cd "$ROOT/scratch/$v"; export PYTHONPATH=$PWD NVFP4_AOT_ARTIFACTS=$PWD/artifacts
  timeout 60 python3 bench/bench_quantize.py --json "$OUT/r/bench_$v.json" > "$OUT/r/bench_$v.txt" 2>&1
  echo "=== bench $v exit $?"; head -19 "$OUT/r/bench_$v.txt" | cut -c1-75
done
cd "$ROOT"; tar -czf "$OUT/call7.tgz" -C "$OUT" r; rm -rf "$OUT/r"; date -u
