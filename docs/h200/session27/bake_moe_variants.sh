#!/usr/bin/env bash
# Session 27: bake main's quantizer (sm_90a), make_moe_variants.py's variants and
# make_timeline_probe.py's probe into scratch/<name>/ (manifest + cubin; "base" must
# equal main's cubin).
# Run from the repository root (its .venv has the DSL).
set -euo pipefail
REPO=$PWD
mkdir -p scratch
cp docs/h200/session15/qcompare.py scratch/
patch -s scratch/qcompare.py < docs/h200/session16/qcompare_widths.diff
python3 docs/h200/session27/qcompare_sparse.py
for spec in base: slots:slots nopad:nopad slotsnopad:"slots nopad" search8:search8 idxpre:idxpre mslots:mslots padafter:padafter; do
  name=${spec%%:*} edits=${spec#*:}
  WORK=$(mktemp -d)
  git worktree add -q --detach "$WORK" HEAD
  mkdir -p "$WORK/scratch" "scratch/$name"
  cp docs/h200/session19/bake_one.py "$WORK/scratch/"
  [ -n "$edits" ] && (cd "$WORK" && python3 "$REPO/docs/h200/session27/make_moe_variants.py" $edits)
  git show HEAD:artifacts/manifest.json > "scratch/$name/manifest.json"
  (cd "$WORK" && CUTE_DSL_ARCH=sm_90a "$REPO/.venv/bin/python" scratch/bake_one.py sm_90a "$REPO/scratch/$name")
  git worktree remove --force "$WORK"
done
# the per-warp timeline probe of main's kernel (make_timeline_probe.py; timeline_moe.py)
WORK=$(mktemp -d)
git worktree add -q --detach "$WORK" HEAD
mkdir -p "$WORK/scratch" scratch/probe
cp docs/h200/session19/bake_one.py "$WORK/scratch/"
(cd "$WORK" && python3 "$REPO/docs/h200/session27/make_timeline_probe.py")
git show HEAD:artifacts/manifest.json > scratch/probe/manifest.json
(cd "$WORK" && CUTE_DSL_ARCH=sm_90a "$REPO/.venv/bin/python" scratch/bake_one.py sm_90a "$REPO/scratch/probe")
git worktree remove --force "$WORK"
# the empty XLA FFI handler in C of docs/experiments/jax_c_handler (call 6)
cc -O2 -shared -fPIC -o scratch/libempty.so docs/experiments/jax_c_handler/empty_handler.c
git show HEAD:artifacts/nvfp4_quantize.sm_90a.g1.cubin | cmp - scratch/base/nvfp4_quantize.sm_90a.g1.cubin
echo "base equals main's cubin"
