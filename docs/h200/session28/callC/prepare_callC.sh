#!/usr/bin/env bash
# What call C needs in scratch/ (its script became docs/h200/session29/callA/callA.sh;
# run from the repository root on the CPU machine, its .venv with the DSL; ~2 minutes):
# scratch/base (main's quantizer before session 28, a55c78f), scratch/mm_tree (the mslots
# branch's tracked files but docs/) and scratch/plainaligned (make_plainaligned.py on the
# mslots branch's kernel; 3c4dc9a, merged in session 30).
set -euo pipefail
REPO=$PWD
mkdir -p scratch/base scratch/plainaligned
git show a55c78f:artifacts/manifest.json > scratch/base/manifest.json
git show a55c78f:artifacts/nvfp4_quantize.sm_90a.g1.cubin > scratch/base/nvfp4_quantize.sm_90a.g1.cubin
cp docs/h200/session15/qcompare.py scratch/
patch -s scratch/qcompare.py < docs/h200/session16/qcompare_widths.diff
python3 docs/h200/session27/qcompare_sparse.py
rm -rf scratch/mm_tree && mkdir -p scratch/mm_tree
git archive 3c4dc9a | tar -x -C scratch/mm_tree --exclude=docs
WORK=$(mktemp -d)
git worktree add -q --detach "$WORK" 3c4dc9a
mkdir -p "$WORK/scratch"
cp docs/h200/session19/bake_one.py "$WORK/scratch/"
(cd "$WORK" && python3 "$REPO/docs/h200/session28/make_plainaligned.py")
git show 3c4dc9a:artifacts/manifest.json > scratch/plainaligned/manifest.json
(cd "$WORK" && CUTE_DSL_ARCH=sm_90a "$REPO/.venv/bin/python" scratch/bake_one.py sm_90a "$REPO/scratch/plainaligned")
git worktree remove --force "$WORK"
echo "scratch/ ready for call C (docs/h200/session29/callA/callA.sh)"
