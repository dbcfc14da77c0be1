"""Compile one kernel variant with the CuTe DSL; run in a child process per variant.

The DSL reads its target architecture and dump settings from the environment, so each
variant gets a fresh interpreter with them set before ``cutlass`` is imported. The
caller (:func:`nvfp4_aot.bake.artifacts.compile_variant`) has checked the arch against
the family registry (``nvfp4_aot.kernels.FAMILIES``).

Usage: python -m nvfp4_aot.bake.compile_one MODULE:FUNCTION ARCH NUM_GROUPS OUT_DIR PREFIX
[OUT_DTYPE ALPHA]  (the epilogue of a grouped GEMM: float16|bfloat16, 0|1). Writes OUT_DIR/dump/*.{cubin,ptx}, OUT_DIR/export/PREFIX.{h,o} and OUT_DIR/result.json.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
from pathlib import Path


def main(
    target: str, arch: str, num_groups: int, out_dir: Path, prefix: str, *epilogue: str
) -> None:
    module_name, entry = target.split(":")
    dump = out_dir / "dump"
    export = out_dir / "export"
    dump.mkdir(parents=True, exist_ok=True)
    export.mkdir(parents=True, exist_ok=True)
    os.environ["CUTE_DSL_ARCH"] = arch
    os.environ["CUTE_DSL_KEEP"] = "ptx,cubin"
    os.environ["CUTE_DSL_DUMP_DIR"] = str(dump)
    started = time.perf_counter()
    module = importlib.import_module(module_name)
    imported = time.perf_counter()
    if epilogue:
        out_dtype, alpha = epilogue
        compiled = getattr(module, entry)(num_groups, out_dtype, alpha == "1")
    else:
        compiled = getattr(module, entry)(num_groups)
    compiled_at = time.perf_counter()
    compiled.export_to_c(str(export), prefix, prefix)
    result = {
        "import_seconds": imported - started,
        "compile_seconds": compiled_at - imported,
        "tile_mnk": [module.TILE_M, module.TILE_N, module.TILE_K],
        "threads": module.THREADS,
    }
    (out_dir / "result.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4]), sys.argv[5], *sys.argv[6:])
