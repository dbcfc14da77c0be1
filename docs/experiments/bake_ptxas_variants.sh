#!/usr/bin/env bash
# Main's activation quantizer (sm_90a) baked with other ptxas options, for a replay
# comparison on the H200 (measured in session 26, none kept: docs/quantizer_notes.md,
# "Tried and not kept", and docs/h200/session26/).
# Run from the repository root (its .venv has the DSL); writes scratch/<variant>/ (the
# manifest and the quantizer cubin; "base" must equal main's cubin byte for byte) and
# scratch/qcompare.py, and prints the command for the H200:
#   bash docs/experiments/bake_ptxas_variants.sh
set -euo pipefail
REPO=$PWD
VARIANTS="base: O2:-O2 rul0:--register-usage-level=0 rul10:--register-usage-level=10"
WORK=$(mktemp -d)
git worktree add -q --detach "$WORK" HEAD
trap 'git -C "$REPO" worktree remove --force "$WORK"' EXIT
git -C "$WORK" apply "$REPO/docs/experiments/quantizer_ptxas_options.patch"
mkdir -p "$WORK/scratch" scratch
cp docs/h200/session19/bake_one.py "$WORK/scratch/"  # bakes the tree it sits in
cp docs/h200/session15/qcompare.py scratch/
patch -s scratch/qcompare.py < docs/h200/session16/qcompare_widths.diff
names=()
for spec in $VARIANTS; do
  name=${spec%%:*} options=${spec#*:}
  mkdir -p "scratch/$name"
  git show HEAD:artifacts/manifest.json > "scratch/$name/manifest.json"
  (cd "$WORK" && NVFP4_PTXAS_OPTIONS="$options" CUTE_DSL_ARCH=sm_90a \
    "$REPO/.venv/bin/python" scratch/bake_one.py sm_90a "$REPO/scratch/$name")
  names+=("$name=scratch/$name")
done
git show HEAD:artifacts/nvfp4_quantize.sm_90a.g1.cubin | cmp - scratch/base/nvfp4_quantize.sm_90a.g1.cubin
echo "base equals main's cubin. On the H200:"
echo "  QCOMPARE_PLAIN_ONLY=1 python3 scratch/qcompare.py --passes 5 ${names[*]}"
