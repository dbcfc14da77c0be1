"""Experiment: a copy of the package with edited quantizer constants, its sm_90a
quantizer baked, and an artifacts dir = the committed one with that variant swapped in.

    python scratch/make_variant.py NAME 'STAGES = 3' 'THREADS = 128' 'blocks_per_sm=3'
Each edit 'KEY = VALUE' replaces the line starting with 'KEY = ' in the kernel module;
'blocks_per_sm=N' edits the quantizer's registry entry."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

root = Path(__file__).resolve().parents[1]
name, edits = sys.argv[1], sys.argv[2:]
dest = root / "scratch" / name
if dest.exists():
    shutil.rmtree(dest)
dest.mkdir(parents=True)
for sub in ("nvfp4_aot", "bench", "tests"):
    shutil.copytree(root / sub, dest / sub, ignore=shutil.ignore_patterns("__pycache__"))
kernel = dest / "nvfp4_aot/kernels/nvfp4_quantize.py"
text = kernel.read_text()
registry = dest / "nvfp4_aot/kernels/__init__.py"
reg = registry.read_text()
for edit in edits:
    if edit.startswith("blocks_per_sm="):
        reg, n = re.subn(r"blocks_per_sm=\d+,  # each CTA", edit + ",  # each CTA", reg)
        assert n == 1, edit
        continue
    key = edit.split("=")[0].strip()
    if key == "SEGMENT_BLOCKS":
        layout = dest / "nvfp4_aot/quantize_layout.py"
        lt, n = re.subn(r"^SEGMENT_BLOCKS = \d+", edit, layout.read_text(), count=1, flags=re.M)
        assert n == 1, edit
        layout.write_text(lt)
        continue
    text, n = re.subn(rf"^{key} = .*$", edit, text, count=1, flags=re.M)
    assert n == 1, edit
kernel.write_text(text)
registry.write_text(reg)
code = f"""
import sys; sys.path.insert(0, {str(dest)!r})
import dataclasses, shutil
from pathlib import Path
from nvfp4_aot.bake.artifacts import bake_variant
from nvfp4_aot.manifest import read_manifest, MANIFEST_NAME
art = Path({str(dest / "artifacts")!r})
shutil.copytree({str(root / "artifacts")!r}, art)
b = bake_variant("nvfp4_quantize", "sm_90a", 1, None, Path({str(dest / "work")!r}))
m = read_manifest(art)
vs = tuple(b.variant if v.name == b.variant.name else v for v in m.variants)
(art / b.variant.cubin).write_bytes(b.cubin)
(art / MANIFEST_NAME).write_text(dataclasses.replace(m, variants=vs).to_json())
print({name!r}, b.variant.registers, "regs", b.variant.dynamic_smem_bytes, "smem", b.variant.blocks_per_sm, "per SM")
"""
subprocess.run([str(root / ".venv/bin/python"), "-c", code], check=True, cwd=dest)
shutil.rmtree(dest / "work")
