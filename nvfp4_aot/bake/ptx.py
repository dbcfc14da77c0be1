"""Read a kernel entry's parameter declarations from PTX text."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import CaptureError

_ENTRY = re.compile(r"\.entry\s+(\w+)\s*\((.*?)\)", re.S)
# .param [.align N] .type [.ptr [.space] [.align M]] name[[count]]; a pointer's .align
# is its pointee's, not the parameter's
_PARAM = re.compile(
    r"\.param\s+(?:\.align\s+(\d+)\s+)?\.(b8|b16|b32|b64|u8|u16|u32|u64|s32|s64|f32|f64)\s+"
    r"(?:\.ptr\s+(?:\.(?:global|shared|const|local)\s+)?(?:\.align\s+\d+\s+)?)?"
    r"(\w+)(?:\[(\d+)\])?"
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
    declared = body.count(".param")
    if len(params) != declared:
        raise CaptureError(
            f"{name}: read {len(params)} of {declared} .param declarations in the PTX"
        )
    return name, tuple(params)
