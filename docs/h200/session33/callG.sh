#!/usr/bin/env bash
# Session 33 call G: on an H200 first call H's work (main as committed: the quantizer's
# GPU tests, #16's benchmark, compute-sanitizer, the fused MoE layer), then on any card
# call F (the midbar / wide variants; scratch/ baked as callF.sh says). (It ran with
# call H's lines written out here; an H100 came, so only call F ran.)
set -u
OUT=${OUT:-out}; OUT=$(realpath "$OUT"); mkdir -p "$OUT"
OUT=$OUT bash docs/h200/session33/callH.sh
OUT=$OUT/callF bash docs/h200/session33/callF.sh
