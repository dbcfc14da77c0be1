#!/usr/bin/env bash
# session 13 call 6: Nsight Compute (--set full) on the rows under 2x torch._grouped_mm
# with 32-64 rows per expert, to see what the kernel waits for there: E = 64, 512 tokens
# (64 rows per expert, the 128-row family) and E = 128, 512 tokens (32, the 32-row family),
# n = 1536, k = 2048; the committed kernels (bench_decode.py --profile: one run of ours,
# routing + GEMM, between cudaProfilerStart/Stop).
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
NCU=$(command -v ncu || ls -d /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | tail -1)
echo "# $("$NCU" --version | tail -1)"
SECTIONS="--section SpeedOfLight --section ComputeWorkloadAnalysis --section Occupancy --section SchedulerStats --section WarpStateStats"
for spec in "64 512 sm90_nvfp4_grouped_gemm" "128 512 sm90_nvfp4_grouped_gemm_decode32"; do
  set -- $spec; e=$1; t=$2; fam=$3
  report="$OUT/E${e}_T${t}_$fam"
  echo "=== ncu --set full: E=$e T=$t (1536, 2048) $fam $(date -u +%T)"
  timeout 200 "$NCU" --set full --clock-control none --profile-from-start off -f -o "$report" \
    python3 bench/bench_decode.py --profile --experts $e --tokens $t --shape 1536,2048 --profile-runs 1 --kernel $fam \
    > "$report.log" 2>&1
  echo "ncu exit code: $?"
  "$NCU" --import "$report.ncu-rep" --page details $SECTIONS --print-units base > "$report.txt" 2>&1
  grep -E "^  [a-z_]+.*\(|Duration|Issue Slots Busy|Issued Ipc Active|Executed Ipc Active|No Eligible|Active Warps Per Scheduler|Eligible Warps Per Scheduler|Compute \(SM\) Throughput|Memory Throughput|Warp Cycles Per Issued|Theoretical Occupancy|Achieved Occupancy" "$report.txt" | head -60
  "$NCU" --import "$report.ncu-rep" --page raw --csv --print-units base --metrics \
    gpu__time_duration.sum,sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_shared_cycles_active.avg.pct_of_peak_sustained_active,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio,smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_membar_per_issue_active.ratio,smsp__average_warps_issue_stalled_sleeping_per_issue_active.ratio,smsp__average_warps_issue_stalled_selected_per_issue_active.ratio,smsp__average_warps_issue_stalled_not_selected_per_issue_active.ratio,smsp__average_warps_issue_stalled_dispatch_stall_per_issue_active.ratio,smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio \
    > "$report.csv" 2>&1
  python3 - "$report.csv" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
head = next((i for i, r in enumerate(rows) if "Kernel Name" in r), None)
if head is None:
    print("\n".join(",".join(r) for r in rows[:10])); sys.exit()
names = rows[head]
for r in rows[head + 1:]:
    cells = dict(zip(names, r))
    if len(r) != len(names) or not cells.get("ID", "").strip():
        continue
    print(cells["Kernel Name"][:60])
    for m in names:
        if "__" in m:
            print(f"   {m.replace('smsp__average_warps_issue_stalled_', 'stall ').replace('_per_issue_active.ratio', '')}: {cells[m]}")
PY
done
date -u
cd "$OUT" && tar czf ../call6_out.tgz . && rm -rf ./* && mv ../call6_out.tgz .
