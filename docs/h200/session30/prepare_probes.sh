#!/usr/bin/env bash
# Call E's inputs in scratch/ (CPU machine, its .venv with the DSL; ~1 minute):
# make_probes.py's nocount, densesf and both baked for sm_90a on main's kernel, and
# scratch/qcompare.py as session 28's prepare step makes it.
set -euo pipefail
REPO=$PWD
mkdir -p scratch
cp docs/h200/session15/qcompare.py scratch/
patch -s scratch/qcompare.py < docs/h200/session16/qcompare_widths.diff
python3 docs/h200/session27/qcompare_sparse.py
for probe in nocount densesf probes; do
  edits=$probe; [ "$probe" = probes ] && edits="nocount densesf"
  WORK=$(mktemp -d)
  git worktree add -q --detach "$WORK" HEAD
  mkdir -p "$WORK/scratch" "scratch/$probe"
  cp docs/h200/session19/bake_one.py "$WORK/scratch/"
  (cd "$WORK" && python3 "$REPO/docs/h200/session30/make_probes.py" $edits)
  cp artifacts/manifest.json "scratch/$probe/"
  (cd "$WORK" && CUTE_DSL_ARCH=sm_90a "$REPO/.venv/bin/python" scratch/bake_one.py sm_90a "$REPO/scratch/$probe")
  git worktree remove --force "$WORK"
done
echo "scratch/ ready for docs/h200/session30/callE/callE.sh"
