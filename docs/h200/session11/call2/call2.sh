#!/usr/bin/env bash
# session 11 call 2: ncu (full set, source sampling, pipe metrics, stall reasons) on the
# new decode kernel: E = 128, 32 tokens, (1536, 2048) and 8 tokens, (4096, 7168).
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
NCU=$(command -v ncu || ls -d /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | tail -1)
date -u
for cfg in "32 1536,2048" "8 4096,7168"; do
  set -- $cfg; tok=$1; shape=$2; tag=t${tok}_${shape/,/x}
  echo "=== $tag"
  timeout 200 "$NCU" --set full --import-source no --clock-control none --profile-from-start off \
    -k regex:CopyAtom -c 1 -f -o "$OUT/$tag" \
    python3 bench/bench_decode.py --profile --experts 128 --tokens $tok --shape $shape --profile-runs 1 \
    > "$OUT/$tag.run.log" 2>&1
  echo "ncu exit $?"
  "$NCU" --import "$OUT/$tag.ncu-rep" --page raw --csv --print-units base > "$OUT/$tag.raw.csv" 2>&1
  "$NCU" --import "$OUT/$tag.ncu-rep" --page details --print-units base > "$OUT/$tag.details.txt" 2>&1
  "$NCU" --import "$OUT/$tag.ncu-rep" --page source --csv --print-source sass > "$OUT/$tag.source.csv" 2>&1
  gzip -f "$OUT/$tag.source.csv" "$OUT/$tag.raw.csv"
  rm -f "$OUT/$tag.ncu-rep"
  grep -E "Duration|DRAM Throughput|Issue Slots Busy|Warp Cycles Per Issued|Achieved Active Warps" "$OUT/$tag.details.txt" | head -8
done
date -u
