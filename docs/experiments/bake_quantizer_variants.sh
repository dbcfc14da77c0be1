#!/usr/bin/env bash
# Main's activation quantizer (sm_90a) with a patch applied, baked once a variant with the
# patch's bake-time environment, for a replay comparison on the GPU.
# Run from the repository root (its .venv has the DSL):
#   bash docs/experiments/bake_quantizer_variants.sh PATCH NAME:VAR=VALUE[,VAR=VALUE] ...
# writes scratch/NAME/ (the manifest and the quantizer cubin; the first variant must be
# main's cubin byte for byte) and scratch/qcompare.py (with the masked decode rows), and
# prints the device command.
set -euo pipefail
REPO=$PWD
PATCH=$1; shift
WORK=$(mktemp -d)
git worktree add -q --detach "$WORK" HEAD
trap 'git -C "$REPO" worktree remove --force "$WORK"' EXIT
git -C "$WORK" apply "$REPO/$PATCH"
mkdir -p "$WORK/scratch" scratch
cp docs/h200/session19/bake_one.py "$WORK/scratch/"  # bakes the tree it sits in
cp docs/h200/session15/qcompare.py scratch/
patch -s scratch/qcompare.py < docs/h200/session16/qcompare_widths.diff
python3 docs/h200/session27/qcompare_sparse.py
names=()
for spec in "$@"; do
  name=${spec%%:*}
  IFS=, read -ra settings <<< "${spec#*:}"
  mkdir -p "scratch/$name"
  git show HEAD:artifacts/manifest.json > "scratch/$name/manifest.json"
  (cd "$WORK" && env "${settings[@]}" CUTE_DSL_ARCH=sm_90a \
    "$REPO/.venv/bin/python" scratch/bake_one.py sm_90a "$REPO/scratch/$name")
  names+=("$name=scratch/$name")
done
first=${names[0]#*=}
git show HEAD:artifacts/nvfp4_quantize.sm_90a.g1.cubin | cmp - "$first/nvfp4_quantize.sm_90a.g1.cubin"
echo "${names[0]%%=*} equals main's cubin. On the GPU:"
echo "  python3 scratch/qcompare.py --passes 3 ${names[*]}"
