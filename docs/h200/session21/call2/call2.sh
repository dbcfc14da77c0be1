#!/usr/bin/env bash
# Session 21 call 2: ncu --set full + SASS stall sampling of main's quantizer at 1024 x 4096
# and 16384 x 4096 (where its math waits).
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
NCU=$(command -v ncu || ls -d /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | tail -1)
date -u; "$NCU" --version | tail -1
for shape in 1024x4096 16384x4096; do
  timeout 200 "$NCU" --set full --import-source no --clock-control none -k regex:kernel_cutlass -s 3 -c 1 -f \
    -o "$OUT/q_$shape" python3 scratch/qprofile.py $shape scratch/base_art > "$OUT/ncu_$shape.log" 2>&1
  echo "ncu $shape exit $?"; grep -v "^==PROF==" "$OUT/ncu_$shape.log" | tail -2
  "$NCU" --import "$OUT/q_$shape.ncu-rep" --page details --print-units base > "$OUT/details_$shape.txt" 2>&1
  grep -E "Duration|Elapsed Cycles|SM Active|Issue Slots|Issued Ipc|Executed Ipc|Warp Cycles Per Issued|Eligible Warps|Active Warps Per|No Eligible|Registers|Achieved Occ" "$OUT/details_$shape.txt" | head -30
  "$NCU" --import "$OUT/q_$shape.ncu-rep" --page raw --csv --print-units base > "$OUT/raw_$shape.csv" 2>&1
  grep -o "smsp__average_warps_issue_stalled_[a-z_]*_per_issue_active.ratio\"[^\n]*" "$OUT/raw_$shape.csv" | head -2 >/dev/null
  python3 - "$OUT/raw_$shape.csv" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
names, vals = rows[0], rows[-1]
def show(prefix, suffix=""):
    out = [(n, v) for n, v in zip(names, vals) if n.startswith(prefix) and n.endswith(suffix)]
    for n, v in sorted(out, key=lambda nv: -float(nv[1].replace(",", "") or 0) if nv[1].replace(",", "").replace(".", "").isdigit() else 0)[:25]:
        print(f"  {n} = {v}")
show("smsp__average_warps_issue_stalled_", "per_issue_active.ratio")
show("sm__inst_executed_pipe_", "pct_of_peak_sustained_active")
show("sm__pipe_", "pct_of_peak_sustained_active")
show("smsp__inst_executed_pipe_", ".sum")
PY
  "$NCU" --import "$OUT/q_$shape.ncu-rep" --page source --csv --print-source sass > "$OUT/source_$shape.csv" 2>&1
  python3 scratch/stalls.py "$OUT/source_$shape.csv" | head -70
  gzip -f "$OUT/source_$shape.csv"; rm -f "$OUT/raw_$shape.csv" "$OUT/q_$shape.ncu-rep"
done
date -u
cd "$OUT" && tar czf ../out.tgz . && rm -rf ./* && mv ../out.tgz .
