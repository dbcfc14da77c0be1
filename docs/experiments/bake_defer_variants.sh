#!/usr/bin/env bash
# Main's activation quantizer (sm_90a) with one wave's CTAs sleeping before their first
# copies (quantizer_defer.patch; plain and masked slot runs), for a replay comparison on
# the GPU. Prepared in session 32, when no machine was lent: not measured yet.
# Run from the repository root (its .venv has the DSL); writes scratch/<variant>/ (the
# manifest and the quantizer cubin; "base" must equal main's cubin byte for byte) and
# scratch/qcompare.py (with the masked decode rows), and prints the device command:
#   bash docs/experiments/bake_defer_variants.sh
# o<N>: the first wave's CTAs (cta < %nsmid) sleep N ns; y200: the second wave's (a
# control: if the issue order is by warp age, o<N> balances an SM's two CTAs and y200
# makes them worse).
set -euo pipefail
REPO=$PWD
VARIANTS="base:0:1 o100:100:1 o200:200:1 o400:400:1 o800:800:1 y200:200:0"
WORK=$(mktemp -d)
git worktree add -q --detach "$WORK" HEAD
trap 'git -C "$REPO" worktree remove --force "$WORK"' EXIT
git -C "$WORK" apply "$REPO/docs/experiments/quantizer_defer.patch"
mkdir -p "$WORK/scratch" scratch
cp docs/h200/session19/bake_one.py "$WORK/scratch/"  # bakes the tree it sits in
cp docs/h200/session15/qcompare.py scratch/
patch -s scratch/qcompare.py < docs/h200/session16/qcompare_widths.diff
python3 docs/h200/session27/qcompare_sparse.py
names=()
for spec in $VARIANTS; do
  IFS=: read -r name ns wave <<< "$spec"
  mkdir -p "scratch/$name"
  git show HEAD:artifacts/manifest.json > "scratch/$name/manifest.json"
  (cd "$WORK" && NVFP4_DEFER_NS=$ns NVFP4_DEFER_FIRST_WAVE=$wave CUTE_DSL_ARCH=sm_90a \
    "$REPO/.venv/bin/python" scratch/bake_one.py sm_90a "$REPO/scratch/$name")
  names+=("$name=scratch/$name")
done
git show HEAD:artifacts/nvfp4_quantize.sm_90a.g1.cubin | cmp - scratch/base/nvfp4_quantize.sm_90a.g1.cubin
echo "base equals main's cubin. On the GPU:"
echo "  python3 scratch/qcompare.py --passes 3 ${names[*]} base2=scratch/base o2002=scratch/o200 o4002=scratch/o400"
