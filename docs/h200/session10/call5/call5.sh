#!/usr/bin/env bash
# session 10 call 5: ncu --set full with per-instruction stall sampling on the final decode
# kernel (E = 128, 8 tokens, (4096, 7168)): where the warps wait, for the next session.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
NCU=$(command -v ncu || ls -d /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | tail -1)
date -u; "$NCU" --version | tail -1
timeout 300 "$NCU" --set full --import-source no --clock-control none --profile-from-start off \
  -k regex:CopyAtom -c 1 -f -o "$OUT/decode_full" \
  python3 bench/bench_decode.py --profile --experts 128 --tokens 8 --shape 4096,7168 --profile-runs 1 \
  > "$OUT/ncu_run.log" 2>&1
echo "ncu exit $?"; grep -v "^==PROF==" "$OUT/ncu_run.log" | tail -3
"$NCU" --import "$OUT/decode_full.ncu-rep" --page details --section WarpStateStats --section SpeedOfLight \
  --section Occupancy --section ComputeWorkloadAnalysis --section InstructionStats --print-units base > "$OUT/details.txt" 2>&1
grep -E "Duration|Throughput|Issue|Warp Cycles|Stall|Occupancy|Executed Ipc|Issued Ipc|Active Warps|Eligible" "$OUT/details.txt" | head -40
"$NCU" --import "$OUT/decode_full.ncu-rep" --page source --csv --print-source sass > "$OUT/source.csv" 2>&1
echo "source page exit $? ($(wc -l < "$OUT/source.csv") lines)"
python3 - "$OUT/source.csv" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
head = next((i for i, r in enumerate(rows) if any("Source" == c for c in r)), None)
if head is None:
    print("\n".join(",".join(r)[:200] for r in rows[:10])); sys.exit()
names = rows[head]
col = next((i for i, n in enumerate(names) if "Stall Sampling (All" in n), None)
src = names.index("Source")
print("columns:", [n for n in names][:12])
if col is None:
    sys.exit()
body = [r for r in rows[head + 1:] if len(r) == len(names)]
def num(x):
    try: return float(x.replace(",", ""))
    except ValueError: return 0.0
total = sum(num(r[col]) for r in body)
print(f"total stall samples {total:.0f}")
for r in sorted(body, key=lambda r: -num(r[col]))[:30]:
    print(f"{num(r[col]) / total * 100:5.1f}%  {r[src][:90]}")
# by opcode
ops = {}
for r in body:
    op = r[src].split()[0] if r[src].split() else "?"
    if op.startswith("@"):
        op = r[src].split()[1]
    ops[op.split(".")[0]] = ops.get(op.split(".")[0], 0) + num(r[col])
print("by opcode:", ", ".join(f"{k} {v / total * 100:.1f}%" for k, v in sorted(ops.items(), key=lambda kv: -kv[1])[:15]))
PY
date -u
