#!/usr/bin/env bash
# Session 30's inputs in scratch/ (run from the repository root on the CPU machine, its
# .venv with the DSL; ~1 minute): scratch/qcompare.py as session 28 made it;
# scratch/plainaligned (session 28's); scratch/tree (33657d4's tracked files but docs/)
# and scratch/mslots (its quantizer: call B's base); make_variants.py's edits baked for
# sm_90a into scratch/NAME: call B's padguard, mslots2 and both on 33657d4, call E's
# nocount, densesf and probes on 1f05dce. Call F's hoist is 8b40772's own cubin.
set -euo pipefail
REPO=$PWD
[ -d scratch/plainaligned ] || bash docs/h200/session28/callC/prepare_callC.sh
rm -rf scratch/tree scratch/mslots && mkdir -p scratch/tree scratch/mslots
git archive 33657d4 | tar -x -C scratch/tree --exclude=docs
for file in manifest.json nvfp4_quantize.sm_90a.g1.cubin; do
  git show "33657d4:artifacts/$file" > "scratch/mslots/$file"
done
bake() {  # bake REV NAME EDIT...: make_variants.py's EDITs on REV's kernel -> scratch/NAME
  local rev=$1 name=$2 work
  shift 2
  work=$(mktemp -d)
  git worktree add -q --detach "$work" "$rev"
  mkdir -p "$work/scratch" "scratch/$name"
  cp docs/h200/session19/bake_one.py "$work/scratch/"
  (cd "$work" && python3 "$REPO/docs/h200/session30/make_variants.py" "$@")
  git show "$rev:artifacts/manifest.json" > "scratch/$name/manifest.json"
  (cd "$work" && CUTE_DSL_ARCH=sm_90a "$REPO/.venv/bin/python" scratch/bake_one.py sm_90a "$REPO/scratch/$name")
  git worktree remove --force "$work"
}
bake 33657d4 padguard padguard
bake 33657d4 mslots2 mslots2
bake 33657d4 both padguard mslots2
bake 1f05dce nocount nocount
bake 1f05dce densesf densesf
bake 1f05dce probes nocount densesf
echo "scratch/ ready for docs/h200/session30/callB, callD, callE"
