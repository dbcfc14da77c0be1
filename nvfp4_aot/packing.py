"""Kernel parameters and launch geometry from the manifest: pure functions, no GPU.

The manifest holds each parameter's constant bytes and the input slots the DSL host code
writes; packing copies the constant template and writes the inputs, which by
construction (see :mod:`nvfp4_aot.bake.capture`) are the bytes the DSL would pass.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from .errors import InvalidProblemError
from .manifest import Variant

_FORMATS = {"pointer": "<Q", "int32": "<i"}
_LIMITS = {"pointer": (0, (1 << 64) - 1), "int32": (-(1 << 31), (1 << 31) - 1)}


@dataclass(frozen=True)
class LaunchGeometry:
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    dynamic_smem_bytes: int


class ParamPacker:
    """Packs a variant's parameter buffer from the kernel inputs.

    Build once per variant; ``pack_into`` writes only the input slots, so a reused
    buffer (e.g. pinned or pre-registered) keeps its constant bytes.
    """

    def __init__(self, variant: Variant):
        self.variant = variant
        template = bytearray(variant.param_bytes)
        for param in variant.params:
            template[param.offset : param.offset + param.size] = bytes.fromhex(param.constant_hex)
        self.template = bytes(template)
        self.offsets = tuple(p.offset for p in variant.params)
        self._kinds = variant.input_kinds
        self._writes = tuple(
            (name, struct.Struct(_FORMATS[kind]).pack_into, offset)
            for name, kind in self._kinds.items()
            for offset, _size in variant.slots_for(name)
        )

    def pack(self, inputs: dict[str, int]) -> bytearray:
        """A new parameter buffer for ``inputs`` (every input name must be present)."""
        buffer = bytearray(self.template)
        self.pack_into(buffer, inputs)
        return buffer

    def pack_into(self, buffer, inputs: dict[str, int]) -> None:
        """Write the input slots of ``buffer`` (a writable buffer of param_bytes bytes)."""
        check_inputs(inputs, self._kinds)
        for name, write, offset in self._writes:
            write(buffer, offset, inputs[name])


def check_inputs(inputs: dict[str, int], kinds: dict[str, str]) -> None:
    """Every kernel input of ``kinds`` present, an int, and within its C type's range."""
    for name, kind in kinds.items():
        if name not in inputs:
            raise InvalidProblemError(f"kernel input {name!r} is missing")
        value = inputs[name]
        low, high = _LIMITS[kind]
        if not isinstance(value, int) or not low <= value <= high:
            raise InvalidProblemError(
                f"kernel input {name!r} must be a {kind} in [{low}, {high}], got {value!r}"
            )


def launch_grid(variant: Variant, inputs: dict[str, int]) -> tuple[int, int, int]:
    """The grid the DSL launches for ``inputs``; only the inputs a grid dimension reads
    (``persistent_blocks`` for the baked kernels) need to be present."""
    grid = tuple(d.constant if d.input is None else inputs[d.input] for d in variant.grid)
    if any(g < 1 for g in grid):
        raise InvalidProblemError(f"grid {grid} has a dimension below 1")
    return grid


def launch_geometry(variant: Variant, inputs: dict[str, int]) -> LaunchGeometry:
    """Grid, block and dynamic shared memory for ``inputs``, as the DSL would launch."""
    return LaunchGeometry(launch_grid(variant, inputs), variant.block, variant.dynamic_smem_bytes)
