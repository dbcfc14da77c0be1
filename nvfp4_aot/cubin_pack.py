"""The wheel's form of the cubins: one xz-compressed tar per kernel family.

A family's variants (group counts, epilogues) share most of their bytes, so one xz
stream per family keeps about a fifth of what one xz file per cubin keeps (81 variants:
160 KB against 764 KB), and a family's pack decompresses in 2-4 ms. ``setup.py`` writes
the packs (it loads this module by path: standard library only, no package import); the
loader reads a cubin from its family's pack where the plain file is absent (a source
checkout or a fresh bake holds the plain files).
"""

from __future__ import annotations

import io
import lzma
import tarfile
from collections import defaultdict
from pathlib import Path

PACK_SUFFIX = ".tar.xz"


def pack_name(cubin: str) -> str:
    """The pack holding cubin file ``cubin``: its family's (the name up to the first dot)."""
    return cubin.split(".", 1)[0] + PACK_SUFFIX


def write_packs(source: Path, target: Path) -> list[Path]:
    """Pack every ``*.cubin`` of ``source`` into its family's pack in ``target``; the
    members are the cubin file names, with no timestamps or owners (reproducible)."""
    families: dict[str, list[Path]] = defaultdict(list)
    for path in sorted(Path(source).glob("*.cubin")):
        families[pack_name(path.name)].append(path)
    written = []
    for name, paths in sorted(families.items()):
        pack = Path(target) / name
        with tarfile.open(pack, "w:xz", preset=9 | lzma.PRESET_EXTREME) as tar:
            for path in paths:
                data = path.read_bytes()
                info = tarfile.TarInfo(path.name)
                info.size, info.mode = len(data), 0o644
                tar.addfile(info, io.BytesIO(data))
        written.append(pack)
    return written


def read_pack(pack: Path) -> dict[str, bytes]:
    """The cubins of a pack by file name (lzma.LZMAError, tarfile.TarError or EOFError
    where it is corrupt)."""
    with tarfile.open(pack, "r:xz") as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
