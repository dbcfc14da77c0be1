#!/usr/bin/env bash
# Session 28: what callA/callA.sh needs in scratch/ (ran at main a55c78f, before mnopad was
# merged: make_mnopad.py edits main's kernel as it was; run from the repository root on the
# CPU machine; its .venv has the DSL; ~3 minutes):
#   session 27's bakes (bake_moe_variants.sh: base, the timing-only MoE variants, the
#   candidates, the timeline probe, libempty.so); mnopad (make_mnopad.py on main) and
#   mnopadmslots (session 27's mslots, then make_mnopad.py); scratch/mnopad_tree, the
#   mnopad branch's tracked files but docs/ (its rebaked artifacts and its tests).
set -euo pipefail
REPO=$PWD
bash docs/h200/session27/bake_moe_variants.sh
for spec in mnopad: mnopadmslots:mslots; do
  name=${spec%%:*} first=${spec#*:}
  WORK=$(mktemp -d)
  git worktree add -q --detach "$WORK" HEAD
  mkdir -p "$WORK/scratch" "scratch/$name"
  cp docs/h200/session19/bake_one.py "$WORK/scratch/"
  [ -n "$first" ] && (cd "$WORK" && python3 "$REPO/docs/h200/session27/make_moe_variants.py" $first)
  (cd "$WORK" && python3 "$REPO/docs/h200/session28/make_mnopad.py")
  git show HEAD:artifacts/manifest.json > "scratch/$name/manifest.json"
  (cd "$WORK" && CUTE_DSL_ARCH=sm_90a "$REPO/.venv/bin/python" scratch/bake_one.py sm_90a "$REPO/scratch/$name")
  git worktree remove --force "$WORK"
done
rm -rf scratch/mnopad_tree && mkdir -p scratch/mnopad_tree
git archive 3f2fef5 | tar -x -C scratch/mnopad_tree --exclude=docs  # the mnopad branch (merged)
# the branch's sm_90a quantizer is make_mnopad.py's edit of main's: the same cubin
cmp scratch/mnopad/nvfp4_quantize.sm_90a.g1.cubin scratch/mnopad_tree/artifacts/nvfp4_quantize.sm_90a.g1.cubin
echo "scratch/ ready for callA"
