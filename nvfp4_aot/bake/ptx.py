"""Read a kernel entry's parameter declarations from PTX text."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import CaptureError

_ENTRY = re.compile(r"\.entry\s+(\w+)\s*\((.*?)\)", re.S)
_PARAM = re.compile(
    r"\.param\s+(?:\.align\s+(\d+)\s+)?\.(b8|b16|b32|b64|u8|u16|u32|u64|s32|s64|f32|f64)\s+(\w+)(?:\[(\d+)\])?"
)
_SCALAR_BYTES = {"8": 1, "16": 2, "32": 4, "64": 8}


@dataclass(frozen=True)
class PtxParam:
    name: str
    size: int
    align: int


def entry_params(ptx: str) -> tuple[str, tuple[PtxParam, ...]]:
    """Return the (single) entry's name and its parameters in declaration order."""
    entries = _ENTRY.findall(ptx)
    if len(entries) != 1:
        raise CaptureError(f"expected one .entry in the PTX, found {len(entries)}")
    name, body = entries[0]
    params = []
    for align, typ, pname, count in _PARAM.findall(body):
        width = _SCALAR_BYTES[typ[1:]]
        size = width * int(count) if count else width
        params.append(PtxParam(pname, size, int(align) if align else width))
    return name, tuple(params)
