#!/usr/bin/env bash
# session 18 call 1b: call 1's steps whose files did not come back (over the file count), kept in one tar.
# session 18 call 1. (a) #16 review mends (quantizer: expert_rows shared with the routing
# kernel, the plan's scale rows computed once, segment table MAX_EXPERTS words): replay
# vs the committed cubin (qcompare, bytes compared), its quantizer GPU tests, memcheck +
# racecheck, torch / torch_ops / examples / JAX GPU tests. (b) #17: Nsight Compute on the
# committed routed GEMMs for each class of missed target (64 and 32 rows per expert,
# 256 rows per expert, a floor row). (c) the T = 1024 eager host wait (sync_probe2.py).
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD NVFP4_AOT_SHAPES=$PWD/tests/data/shapes.json
date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
export NVFP4_AOT_REQUIRE_GPU=1
echo "=== quantizer GPU tests $(date -u +%T)"
timeout 100 python3 -m pytest -q -p no:cacheprovider --tb=short tests/test_quantizer_gpu.py > "$OUT/tests_quantizer.log" 2>&1
echo "exit $?"; grep -E "FAILED" "$OUT/tests_quantizer.log" | head -8; tail -1 "$OUT/tests_quantizer.log" | cut -c1-300
for tool in racecheck; do
  NVFP4_AOT_QUANT_ROUTINGS=2 timeout 90 compute-sanitizer --tool $tool --error-exitcode 9 \
    python3 -m pytest -q -p no:cacheprovider tests/test_quantizer_gpu.py \
    -k "contiguous or masked or unit_width or padding_rows or any_byte or T129-k160 or k1056 or T1-k32" > "$OUT/${tool}.log" 2>&1
  echo "$tool exit $?"; grep -E "SUMMARY|passed|failed" "$OUT/${tool}.log" | tail -2
done
echo "=== torch, torch_ops, examples, JAX GPU tests $(date -u +%T)"
timeout 150 python3 -m pytest -q -rf -p no:cacheprovider tests/test_torch_gpu.py tests/test_torch_ops.py \
  tests/test_examples_gpu.py tests/test_jax_gpu.py > "$OUT/tests_more.log" 2>&1
echo "pytest exit code: $?"; grep FAILED "$OUT/tests_more.log" | head; tail -1 "$OUT/tests_more.log"
unset NVFP4_AOT_REQUIRE_GPU
echo "=== sync probe $(date -u +%T)"
timeout 150 python3 scratch/sync_probe2.py > "$OUT/sync_probe2.txt" 2>&1; echo "exit $?"; cat "$OUT/sync_probe2.txt" | tail -80
NCU=$(command -v ncu || ls -d /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | tail -1)
echo "# $("$NCU" --version | tail -1)"
METRICS=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,sm__inst_issued.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.per_cycle_active,smsp__warps_eligible.avg.per_cycle_active,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio,smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_sleeping_per_issue_active.ratio,smsp__average_warps_issue_stalled_selected_per_issue_active.ratio,smsp__average_warps_issue_stalled_not_selected_per_issue_active.ratio,smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_dispatch_stall_per_issue_active.ratio,smsp__average_warps_issue_stalled_no_instruction_per_issue_active.ratio
for spec in "64 512 1536,2048"; do
  set -- $spec; e=$1; t=$2; shape=$3
  report="$OUT/ncu_E${e}_T${t}_${shape/,/x}"
  echo "=== ncu: E=$e T=$t ($shape) $(date -u +%T)"
  timeout 150 "$NCU" --clock-control none --profile-from-start off -f --metrics $METRICS --csv --print-units base \
    python3 bench/bench_decode.py --profile --experts $e --tokens $t --shape $shape --profile-runs 1 \
    > "$report.csv" 2> "$report.log"
  echo "ncu exit code: $?"; grep "# profile" "$report.csv" "$report.log" | head -2
  python3 - "$report.csv" <<'PY'
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 5]
head = next(i for i, r in enumerate(rows) if "Kernel Name" in r)
names = rows[head]
kernels = {}
for r in rows[head + 1:]:
    c = dict(zip(names, r))
    kernels.setdefault((c["ID"], c["Kernel Name"][:50]), {})[c["Metric Name"]] = c["Metric Value"]
for (i, name), m in kernels.items():
    print(f"  [{i}] {name}")
    print("     " + "; ".join(f"{k.replace('smsp__average_warps_issue_stalled_', 'stall ').replace('_per_issue_active.ratio', '')}={v}" for k, v in m.items()))
PY
done
date -u
cd "$OUT" && tar czf ../call1b_out.tgz . && rm -rf ./* && mv ../call1b_out.tgz .
