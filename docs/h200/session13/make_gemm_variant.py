"""Experiment: bake the sm_90a kernels of the working tree into DEST, then make DEST an
artifacts dir = the committed one with the sm_90a GEMM cubins of the tree swapped in
(and any sm_90a variant the committed manifest lacks added: a new family, and the a16
family's 256-group build, which the bake's --groups 256 makes too).

    .venv/bin/python docs/h200/session13/make_gemm_variant.py scratch/NAME
"""

import dataclasses
import shutil
import subprocess
import sys
from pathlib import Path

root = Path(__file__).resolve().parents[3]
dest = Path(sys.argv[1]).resolve()
fresh = dest.with_name(dest.name + "_sm90")
for d in (dest, fresh):
    if d.exists():
        shutil.rmtree(d)
subprocess.run(
    [
        str(root / ".venv/bin/python"),
        "build_kernels.py",
        "--quiet",
        "--arch",
        "sm_90a",
        "--groups",
        "8",
        "--groups",
        "120",
        "--groups",
        "256",
        "--out",
        str(fresh),
    ],
    check=True,
    cwd=root,
)
sys.path.insert(0, str(root))
from nvfp4_aot.manifest import MANIFEST_NAME, read_manifest  # noqa: E402

shutil.copytree(root / "artifacts", dest)
new = {v.name: v for v in read_manifest(fresh).variants if v.family.startswith("sm90_")}
m = read_manifest(dest)
changed = []
variants = []
for v in m.variants:
    if v.name in new:
        n = new[v.name]
        if (fresh / n.cubin).read_bytes() != (dest / v.cubin).read_bytes():
            changed.append(v.name)
        (dest / n.cubin).write_bytes((fresh / n.cubin).read_bytes())
        variants.append(n)
    else:
        variants.append(v)
added = [n for name, n in new.items() if name not in {v.name for v in m.variants}]
for n in added:
    (dest / n.cubin).write_bytes((fresh / n.cubin).read_bytes())
variants += added
print(len(added), "new variants:", *[n.name for n in added], sep="\n  ")
(dest / MANIFEST_NAME).write_text(dataclasses.replace(m, variants=tuple(variants)).to_json())
shutil.rmtree(fresh)
print(len(changed), "sm_90a GEMM cubins differ from the committed ones:", *changed, sep="\n  ")
