#!/usr/bin/env bash
# session 16 call 1 (#16): the plain-row slowdown of session 15's MoE-unit change.
# Variants (quantizer sm_90a cubin swapped into the committed artifacts):
#   tp2  = f62b81e's kernel (before the MoE-unit change), base = committed (89e14d9),
#   smem = base without the first-output-row table (79.1 KB a CTA, as tp2),
#   lean = smem + no dead work (masked: no scale-segment scan; no s_seg[E] write).
# Graph replay of all four (bytes compared), ncu of masked E=256 max_m=64 k=7168 on tp2
# and base (why is it 21 % slower?), then lean's quantizer GPU tests and sanitizers.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD NVFP4_AOT_SHAPES=$PWD/tests/data/shapes.json
date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
echo "=== compare $(date -u +%T)"
timeout 200 python3 scratch/qcompare.py --passes 3 --json "$OUT/compare.json" tp2=scratch/tp2/artifacts \
  base=artifacts smem=scratch/smem/artifacts lean=scratch/lean/artifacts 2>&1 | tee "$OUT/compare.txt"
for v in tp2 base lean; do
  art=artifacts; [ $v != base ] && art=scratch/$v/artifacts
  echo "=== ncu masked $v $(date -u +%T)"
  timeout 90 ncu --cache-control none --clock-control none -k regex:kernel_cutlass --launch-skip 3 --launch-count 1 \
    --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis \
    --metrics regex:^smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio$,smsp__inst_executed.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum \
    python3 scratch/qprofile.py masked $art > "$OUT/ncu_masked_$v.txt" 2>&1
  echo "exit $?"; grep -E "Duration|DRAM Throughput|Elapsed Cyc|inst_executed.sum|dram__bytes|lts__t_bytes" "$OUT/ncu_masked_$v.txt" | head -8
done
export NVFP4_AOT_ARTIFACTS=$PWD/scratch/lean/artifacts NVFP4_AOT_REQUIRE_GPU=1
cd scratch/lean
echo "=== lean: quantizer GPU tests $(date -u +%T)"
timeout 100 python3 -m pytest -q -p no:cacheprovider --tb=short tests/test_quantizer_gpu.py > "$OUT/tests_quantizer.log" 2>&1
echo "exit $?"; grep -E "FAILED" "$OUT/tests_quantizer.log" | head -8; tail -1 "$OUT/tests_quantizer.log" | cut -c1-300
for tool in memcheck racecheck; do
  NVFP4_AOT_QUANT_ROUTINGS=2 timeout 100 compute-sanitizer --tool $tool --error-exitcode 9 \
    python3 -m pytest -q -p no:cacheprovider tests/test_quantizer_gpu.py \
    -k "contiguous or masked or padding_rows or T129-k160 or k1056" > "$OUT/${tool}.log" 2>&1
  echo "$tool exit $?"; grep -E "SUMMARY|passed|failed" "$OUT/${tool}.log" | tail -2
done
date -u
cd "$OUT" && tar czf ../call1_out.tgz . && rm -rf ./* && mv ../call1_out.tgz .
