#!/usr/bin/env bash
# session 13 call 2: the sm_90a FP4 decode with fewer ALU-pipe instructions, measured
# against the committed kernels in the same run (bench_decode rows, alternating passes):
#   committed  9 ALU (SHF, 4 LOP3, 4 PRMT) + 2 IMAD.SHL + 4 HMUL2 a word
#   v1         the shift as mul.hi.u32 (IMAD.HI): 8 ALU + 3 FMA-pipe IMAD + 4 HMUL2
#   v2         3 masks + IMAD arithmetic: 7 ALU + 5 IMAD + 4 HMUL2
# scratch/art_v1, scratch/art_v2: the committed artifacts with every sm_90a GEMM cubin
# rebaked (scratch/make_gemm_variant.py).
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
ROWS="--experts 128 --tokens 8 --tokens 32 --tokens 128 --tokens 2048"
ROWS64="--experts 64 --tokens 2048"
run() {  # name artifacts pass
  echo "=== $1 pass $3 $(date -u +%T)"
  NVFP4_AOT_ARTIFACTS=$2 timeout 100 python3 bench/bench_decode.py $ROWS --budget-s 80 --json "$OUT/bd_$1_$3.json" \
    > "$OUT/bd_$1_$3.txt" 2> "$OUT/bd_$1_$3.log"; echo "exit $?"
  NVFP4_AOT_ARTIFACTS=$2 timeout 60 python3 bench/bench_decode.py $ROWS64 --budget-s 45 --json "$OUT/bd64_$1_$3.json" \
    > "$OUT/bd64_$1_$3.txt" 2> "$OUT/bd64_$1_$3.log"; echo "exit $?"
}
run committed artifacts 1
run v1 scratch/art_v1 1
run v2 scratch/art_v2 1
run committed artifacts 2
run v2 scratch/art_v2 2
run v1 scratch/art_v1 2
date -u
# only ~8 files come back from a call: one archive, nothing else
cd "$OUT" && tar czf ../call2_out.tgz . && rm -f ./* && mv ../call2_out.tgz .
