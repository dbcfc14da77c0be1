#!/usr/bin/env bash
# session 14 call 1: where the eager host cost's two speeds come from (issue #17's host
# target): the machine's CPU / NUMA layout, bench/host_cores.py (run() timed on every
# core, three rounds), then issue #17's whole table twice, the process pinned to the
# GPU's NUMA node (--cpus local) and as started (--cpus none); then the four rows still
# slower than torch._grouped_mm (E = 64, 2048 tokens) with each sm_90a family forced.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,driver_version,pci.bus_id --format=csv,noheader
{
  echo "=== nproc / affinity"; nproc; taskset -p $$
  echo "=== lscpu"; lscpu
  echo "=== numactl -H"; numactl -H 2>&1
  echo "=== nvidia-smi topo -m"; nvidia-smi topo -m 2>&1
  echo "=== sysfs nodes"; for d in /sys/devices/system/node/node*; do echo "$d: $(cat $d/cpulist)"; done
  bus=$(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader | head -1 | tr 'A-F' 'a-f' | sed 's/^0000//')
  echo "GPU $bus: numa_node $(cat /sys/bus/pci/devices/$bus/numa_node 2>&1) local_cpulist $(cat /sys/bus/pci/devices/$bus/local_cpulist 2>&1)"
  echo "=== cpu MHz"; grep MHz /proc/cpuinfo
} > "$OUT/machine.txt" 2>&1
grep -E "^(Model name|Socket|NUMA|Thread|Core)|GPU " "$OUT/machine.txt"
echo "=== host_cores $(date -u +%T)"
timeout 120 python3 bench/host_cores.py --json "$OUT/host_cores.json" > "$OUT/host_cores.md" 2>&1
echo "exit $?"; tail -4 "$OUT/host_cores.md"
for cpus in local none; do
  echo "=== issue #17 table, --cpus $cpus $(date -u +%T)"
  timeout 200 python3 bench/bench_decode.py --cpus $cpus --budget-s 160 --json "$OUT/table_$cpus.json" \
    2> "$OUT/table_$cpus.log" > "$OUT/table_$cpus.txt"
  echo "exit $?"; head -1 "$OUT/table_$cpus.txt"; tail -2 "$OUT/table_$cpus.txt"
done
echo "=== E = 64, 2048 tokens, each family forced $(date -u +%T)"
for fam in sm90_nvfp4_grouped_gemm sm90_nvfp4_grouped_gemm_a16 sm90_nvfp4_grouped_gemm_decode32; do
  timeout 60 python3 bench/bench_decode.py --cpus local --experts 64 --tokens 2048 --kernel $fam \
    --json "$OUT/e64t2048_$fam.json" 2> "$OUT/e64t2048_$fam.log" > "$OUT/e64t2048_$fam.txt"
  echo "$fam exit $?"; grep "^| 64" "$OUT/e64t2048_$fam.txt" | cut -c1-160
done
date -u
cd "$OUT" && tar czf ../call1_out.tgz . && rm -f ./* && mv ../call1_out.tgz .
