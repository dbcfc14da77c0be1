#!/usr/bin/env bash
# Session 30 call B's inputs in scratch/ (run from the repository root on the CPU machine,
# its .venv with the DSL; ~1 minute): scratch/tree (main's tracked files but docs/),
# scratch/mslots (main's quantizer, the comparison's base), and main's kernel with
# make_variants.py's edits baked for sm_90a: scratch/padguard, scratch/mslots2,
# scratch/both (the two together); scratch/plainaligned and scratch/qcompare.py from
# session 28's prepare step.
set -euo pipefail
REPO=$PWD
[ -d scratch/plainaligned ] || bash docs/h200/session28/callC/prepare_callC.sh
rm -rf scratch/tree scratch/mslots && mkdir -p scratch/tree scratch/mslots
git archive HEAD | tar -x -C scratch/tree --exclude=docs
cp artifacts/manifest.json artifacts/nvfp4_quantize.sm_90a.g1.cubin scratch/mslots/
for variant in padguard mslots2 both; do
  edits=$variant; [ "$variant" = both ] && edits="padguard mslots2"
  WORK=$(mktemp -d)
  git worktree add -q --detach "$WORK" HEAD
  mkdir -p "$WORK/scratch" "scratch/$variant"
  cp docs/h200/session19/bake_one.py "$WORK/scratch/"
  (cd "$WORK" && python3 "$REPO/docs/h200/session30/make_variants.py" $edits)
  cp artifacts/manifest.json "scratch/$variant/"
  (cd "$WORK" && CUTE_DSL_ARCH=sm_90a "$REPO/.venv/bin/python" scratch/bake_one.py sm_90a "$REPO/scratch/$variant")
  git worktree remove --force "$WORK"
done
echo "scratch/ ready for docs/h200/session30/callB/callB.sh"
