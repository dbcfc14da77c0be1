"""Geometry of the blocked scale layout in plain integers (no numpy).

The runtime needs these sizes on its launch path, which imports no numpy;
:mod:`nvfp4_aot.layouts` converts scales to and from this layout.
"""

from __future__ import annotations

from .intmath import round_up

SF_VEC_SIZE = 16
"""Number of consecutive K elements that share one E4M3 scale."""

BLOCK_ROWS = 128
"""Rows (M or N) covered by one blocked-scale atom."""

BLOCK_COLS = 4
"""Scale columns (K / 16) covered by one blocked-scale atom."""

ATOM_BYTES = BLOCK_ROWS * BLOCK_COLS
"""Bytes in one blocked-scale atom (stored as 32 x 16 bytes)."""


def blocked_scale_bytes(rows: int, k: int) -> int:
    """Size in bytes of the blocked scale buffer for ``rows`` rows of ``k`` elements.

    This is the padded size, ``ceil(rows / 128) * 128 * ceil((k / 16) / 4) * 4``: the
    kernel loads whole 512-byte atoms, so a device buffer must be at least this large
    even when ``rows`` or ``k / 16`` is not a multiple of the atom.
    """
    if rows < 1:
        raise ValueError(f"rows must be >= 1, got {rows}")
    if k < SF_VEC_SIZE or k % SF_VEC_SIZE:
        raise ValueError(f"k must be a positive multiple of {SF_VEC_SIZE}, got {k}")
    return round_up(rows, BLOCK_ROWS) * round_up(k // SF_VEC_SIZE, BLOCK_COLS)
