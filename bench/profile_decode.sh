#!/usr/bin/env bash
# Issue #17: Nsight Compute on one decode configuration (E = 128 experts, 8 tokens x top-8,
# n = 1536, k = 2048), once per sm_90a GEMM kernel family: `ncu --set full` over our run
# (routing setup kernel + GEMM launches) and one torch._grouped_mm, profiled from
# cudaProfilerStart to cudaProfilerStop only (bench/bench_decode.py --profile). Prints a
# per-kernel summary (time, DRAM and SM throughput, occupancy, grid) and the limiters of
# the sections SpeedOfLight, MemoryWorkloadAnalysis, Occupancy and WarpStateStats; the
# reports (.ncu-rep, open with ncu-ui) and their text go to $OUT (default ./out).
# Run from the repo root on the GPU machine:  OUT=$OUT bash bench/profile_decode.sh
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
FAMILIES=${FAMILIES:-"sm90_nvfp4_grouped_gemm_decode sm90_nvfp4_grouped_gemm_decode32 sm90_nvfp4_grouped_gemm sm90_nvfp4_grouped_gemm_a16"}
CONFIG="--experts 128 --tokens 8 --shape 1536,2048 --profile-runs 1"
NCU=$(command -v ncu || ls -d /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | tail -1)
if [ -z "$NCU" ]; then
  echo "ncu (Nsight Compute) not found on PATH, /opt/nvidia/nsight-compute or /usr/local/cuda/bin: no profile"
  exit 0
fi
echo "# $("$NCU" --version | tail -1) ($NCU)"
SECTIONS="--section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats"
METRICS=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active,launch__grid_size,launch__registers_per_thread
status=0
for family in $FAMILIES; do
  report="$OUT/profile_decode_$family"
  echo; echo "=== ncu --set full: $family ($CONFIG)"
  rm -f "$report.ncu-rep"  # a report left by an earlier run must not pass for this one
  # --clock-control none: leave the GPU's clocks as they are (the device notes ask for it)
  timeout 400 "$NCU" --set full --clock-control none --profile-from-start off -f -o "$report" \
    python3 bench/bench_decode.py --profile $CONFIG --kernel "$family" > "$report.log" 2>&1
  rc=$?
  grep -v "^==PROF==" "$report.log" | tail -5
  grep "^==ERROR==\|^==WARNING==" "$report.log" | head -5
  echo "ncu $family exit code: $rc"
  if [ ! -f "$report.ncu-rep" ]; then
    echo "no report for $family: see $report.log (hardware counters not readable on this machine?)"
    status=1; continue
  fi
  echo "--- per kernel (time ns, DRAM % of peak, DRAM bytes read, SM % of peak, warps active %, grid, registers)"
  "$NCU" --import "$report.ncu-rep" --page raw --csv --print-units base --metrics "$METRICS" \
    > "$report.csv" 2>&1
  python3 - "$report.csv" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
head = next((i for i, r in enumerate(rows) if "Kernel Name" in r), None)
if head is None:  # not a table: show what ncu said
    print("\n".join(",".join(r) for r in rows[:20]))
    sys.exit()
names = rows[head]
metrics = [m for m in names if "__" in m]
for r in rows[head + 1 :]:
    cells = dict(zip(names, r))
    if len(r) != len(names) or not cells.get("ID", "").strip():
        continue  # the units row
    values = "  ".join(f"{m.split('.')[0]}={cells[m]}" for m in metrics)
    print(f"{cells['Kernel Name'][:56]:56}  {values}")
PY
  echo "--- limiters (sections; full text in $report.txt)"
  "$NCU" --import "$report.ncu-rep" --page details $SECTIONS --print-units base > "$report.txt" 2>&1
  # kernel headers, section names, the headline metrics, and every rule (OPT/WRN) in full
  awk '
    /^  [^ ].*\(.*\)x\(/ { print; next }
    /Section:/ { print; next }
    /^ +(Duration|Memory Throughput|DRAM Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Theoretical Occupancy|Block Limit [A-Za-z ]+|Registers Per Thread|Warp Cycles Per Issued Instruction|Issue Slots Busy|L2 Hit Rate|Mem Busy|Max Bandwidth) / { print; next }
    /^ +(OPT|WRN) / { rule = 1; print; next }
    rule && /^        +[^ ]/ { print; next }
    { rule = 0 }
  ' "$report.txt" | cut -c1-220 | head -300
done
exit $status
