"""Bake this tree's quantizer for ARCH into the artifacts dir DEST, swapping its variant in
the manifest (session 19's variants; run as scratch/bake_one.py from the repository).

    python scratch/bake_one.py sm_90a scratch/variant_art
"""

import dataclasses
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from nvfp4_aot.bake.artifacts import bake_variant  # noqa: E402
from nvfp4_aot.manifest import MANIFEST_NAME, read_manifest  # noqa: E402

arch, art = sys.argv[1], Path(sys.argv[2])
with tempfile.TemporaryDirectory() as work:
    baked = bake_variant("nvfp4_quantize", arch, 1, None, Path(work))
manifest = read_manifest(art)
variants = tuple(baked.variant if v.name == baked.variant.name else v for v in manifest.variants)
(art / baked.variant.cubin).write_bytes(baked.cubin)
(art / MANIFEST_NAME).write_text(dataclasses.replace(manifest, variants=variants).to_json())
v = baked.variant
print(arch, v.registers, "regs", v.dynamic_smem_bytes, "smem", len(baked.cubin), "bytes")
