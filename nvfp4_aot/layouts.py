"""NVFP4 data layouts in plain numpy: FP4 E2M1 packing, FP8 E4M3 codes, blocked scales.

Everything here is host-side and exact. The runtime uses it to prepare inputs and the
tests use it to build problems whose results can be checked against a float64 reference;
nothing imports torch or cutlass.

Conventions (the design notes, "The computation"):

- A is (m, k) and B is (n, k), both K-major. Two FP4 codes share a byte, the element
  with the even K index in the low nibble.
- One E4M3 scale covers 16 consecutive K elements: SFA is (m, k // 16), SFB is
  (n, k // 16), row-major, one byte per scale.
- The kernel reads the scales in the *blocked* layout that cuBLAS documents as the
  "1D block scaling factors layout" (see :func:`scales_to_blocked`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .blocked import (  # noqa: F401  (part of this module's interface)
    ATOM_BYTES,
    BLOCK_COLS,
    BLOCK_ROWS,
    SF_VEC_SIZE,
    blocked_scale_bytes,
)
from .intmath import ceil_div, round_up

# E2M1 magnitudes for codes 0..7; bit 3 of a code is the sign.
_FP4_MAGNITUDES = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
FP4_VALUES = np.concatenate([_FP4_MAGNITUDES, -_FP4_MAGNITUDES])
"""float64 value of each FP4 E2M1 code 0..15 (code 8 is -0.0)."""


def _e4m3_table() -> np.ndarray:
    codes = np.arange(256)
    sign = np.where(codes & 0x80, -1.0, 1.0)
    exponent = (codes >> 3) & 0xF
    mantissa = (codes & 0x7).astype(np.float64)
    normal = np.ldexp(1.0 + mantissa / 8.0, exponent - 7)
    subnormal = np.ldexp(mantissa / 8.0, -6)
    values = sign * np.where(exponent == 0, subnormal, normal)
    values[(codes & 0x7F) == 0x7F] = np.nan  # E4M3FN: no infinities, S.1111.111 is NaN
    return values


E4M3_VALUES = _e4m3_table()
"""float64 value of each FP8 E4M3 (FN) byte 0..255; 0x7F and 0xFF are NaN."""

E4M3_FLOAT32 = E4M3_VALUES.astype(np.float32)
"""The same values as float32 (every E4M3 value is exact in float32)."""

E4M3_MAX = 448.0
"""Largest finite E4M3 (FN) value."""


def _as_uint8(array, name: str) -> np.ndarray:
    array = np.asarray(array)
    if array.dtype != np.uint8:
        raise TypeError(f"{name} must have dtype uint8, got {array.dtype}")
    return array


# FP4 E2M1 ---------------------------------------------------------------------------


def pack_fp4(codes) -> np.ndarray:
    """Pack FP4 codes two per byte along the last axis.

    Parameters
    ----------
    codes : array_like of uint8, shape (..., k)
        E2M1 codes 0..15; ``k`` must be even.

    Returns
    -------
    numpy.ndarray of uint8, shape (..., k // 2)
        ``packed[..., j] = codes[..., 2 j] | codes[..., 2 j + 1] << 4``: the first
        element sits in the low nibble, which is how ``torch.float4_e2m1fn_x2`` and the
        tensor cores read K-major FP4 data.
    """
    codes = _as_uint8(codes, "codes")
    if codes.ndim == 0 or codes.shape[-1] % 2:
        raise ValueError(f"codes must have an even last dimension, got shape {codes.shape}")
    if codes.size and int(codes.max()) > 15:
        raise ValueError(f"FP4 codes must be 0..15, got max {int(codes.max())}")
    return codes[..., 0::2] | (codes[..., 1::2] << 4)


def unpack_fp4(packed) -> np.ndarray:
    """Unpack bytes into FP4 codes, the low nibble first.

    Parameters
    ----------
    packed : array_like of uint8, shape (..., k // 2)

    Returns
    -------
    numpy.ndarray of uint8, shape (..., k)
        Codes 0..15; the inverse of :func:`pack_fp4`.
    """
    packed = _as_uint8(packed, "packed")
    if packed.ndim == 0:
        raise ValueError("packed must have at least one dimension")
    codes = np.empty(packed.shape[:-1] + (packed.shape[-1] * 2,), dtype=np.uint8)
    codes[..., 0::2] = packed & 0x0F
    codes[..., 1::2] = packed >> 4
    return codes


def fp4_to_float(codes) -> np.ndarray:
    """Decode E2M1 codes (0..15) to float64; bit 3 is the sign, so code 8 is -0.0."""
    codes = _as_uint8(codes, "codes")
    if codes.size and int(codes.max()) > 15:
        raise ValueError(f"FP4 codes must be 0..15, got max {int(codes.max())}")
    return FP4_VALUES[codes]


def float_to_fp4_codes(values) -> np.ndarray:
    """Encode values that E2M1 represents exactly (no rounding).

    Parameters
    ----------
    values : array_like of float
        Each value must be one of 0, ±0.5, ±1, ±1.5, ±2, ±3, ±4, ±6; -0.0 maps to
        code 8.

    Returns
    -------
    numpy.ndarray of uint8
        Codes with the shape of ``values``.

    Raises
    ------
    ValueError
        Naming the first value (in C order) that is not representable. Rounding is
        deliberately not offered: every caller in this project builds exact data.
    """
    values = np.asarray(values, dtype=np.float64)
    magnitude = np.abs(values)
    index = np.searchsorted(_FP4_MAGNITUDES, magnitude)
    index_clipped = np.minimum(index, len(_FP4_MAGNITUDES) - 1)
    exact = _FP4_MAGNITUDES[index_clipped] == magnitude
    if not exact.all():
        where = np.unravel_index(np.flatnonzero(~exact.reshape(-1))[0], values.shape)
        raise ValueError(
            f"value {float(values[where])!r} at index {tuple(int(i) for i in where)} "
            "is not exactly representable in FP4 E2M1"
        )
    return (index_clipped | (np.signbit(values) << 3)).astype(np.uint8)


# FP8 E4M3 ---------------------------------------------------------------------------


def e4m3_to_float(codes) -> np.ndarray:
    """Decode FP8 E4M3 (FN variant) bytes to float64, exactly.

    Bias 7, three mantissa bits, subnormals below 2**-6 (smallest 2**-9), largest
    finite value 448, no infinities; 0x7F and 0xFF decode to NaN.
    """
    return E4M3_VALUES[_as_uint8(codes, "codes")]


_E4M3_FINITE_CODES = np.array([c for c in range(128) if c != 0x7F])
_E4M3_POSITIVE = E4M3_VALUES[_E4M3_FINITE_CODES]  # increasing with the code


def float_to_e4m3(values) -> np.ndarray:
    """Encode values that E4M3 (FN) represents exactly (no rounding).

    Parameters
    ----------
    values : array_like of float
        Finite values exactly representable in E4M3; -0.0 maps to 0x80.

    Returns
    -------
    numpy.ndarray of uint8
        Bytes with the shape of ``values``.

    Raises
    ------
    ValueError
        Naming the first value that is NaN, infinite, out of range or between two
        representable values.
    """
    values = np.asarray(values, dtype=np.float64)
    magnitude = np.abs(values)
    index = np.searchsorted(_E4M3_POSITIVE, magnitude)
    index_clipped = np.minimum(index, len(_E4M3_POSITIVE) - 1)
    exact = _E4M3_POSITIVE[index_clipped] == magnitude  # False for NaN and inf
    if not exact.all():
        where = np.unravel_index(np.flatnonzero(~exact.reshape(-1))[0], values.shape)
        raise ValueError(
            f"value {float(values[where])!r} at index {tuple(int(i) for i in where)} "
            "is not exactly representable in FP8 E4M3"
        )
    codes = _E4M3_FINITE_CODES[index_clipped] | (np.signbit(values) << 7)
    return codes.astype(np.uint8)


# the GEMM's output dtypes --------------------------------------------------------------

# numpy storage of C per output dtype: bfloat16 as its 16 bits (numpy has no bfloat16)
OUTPUT_STORAGE = {"float16": np.float16, "bfloat16": np.uint16}


def float_to_bf16_bits(values) -> np.ndarray:
    """bfloat16 bits of ``values`` rounded from float32 to nearest even, as the kernels'
    ``cvt.rn.bf16.f32`` rounds (overflow to +-inf; NaN stays a quiet NaN)."""
    bits = np.asarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(np.asarray(values, dtype=np.float32))
    return np.where(nan, (bits >> 16).astype(np.uint16) | 0x0040, rounded).astype(np.uint16)


def bf16_bits_to_float(bits) -> np.ndarray:
    """float32 values of bfloat16 bits (exact)."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def encode_output(values, out_dtype: str) -> np.ndarray:
    """float32 values as the kernels store them in ``out_dtype`` (round to nearest even)."""
    if out_dtype == "bfloat16":
        return float_to_bf16_bits(values)
    with np.errstate(over="ignore"):  # past float16's range is inf, as cvt.rn.f16.f32 gives
        return np.asarray(values, dtype=np.float32).astype(np.float16)


def decode_output(stored, out_dtype: str) -> np.ndarray:
    """float64 values of a C buffer stored as :data:`OUTPUT_STORAGE` says."""
    stored = np.asarray(stored)
    if out_dtype == "bfloat16":
        return bf16_bits_to_float(stored.view(np.uint16)).astype(np.float64)
    return stored.view(np.float16).astype(np.float64)


# blocked scales ---------------------------------------------------------------------


def blocked_offset(row, col, cols: int):
    """Byte offset of scale ``(row, col)`` in the blocked buffer of ``cols`` columns.

    ``(row // 128) * (padded_cols // 4) + col // 4`` selects the 512-byte atom; inside
    it, ``(row % 32) * 16 + ((row % 128) // 32) * 4 + col % 4``. Works elementwise on
    integer arrays.
    """
    padded_cols = round_up(cols, BLOCK_COLS)
    atom = (row // BLOCK_ROWS) * (padded_cols // BLOCK_COLS) + col // BLOCK_COLS
    inner = (row % 32) * 16 + ((row % BLOCK_ROWS) // 32) * 4 + col % BLOCK_COLS
    return atom * ATOM_BYTES + inner


def scales_to_blocked(scales) -> np.ndarray:
    """Convert a row-major scale matrix to the blocked layout the kernel reads.

    The layout is cuBLAS's "1D block scaling factors layout" (GPU MODE's ``to_blocked``;
    CUTLASS's ``blockscaled_utils.tile_atom_to_shape_SF``, whose K-major atom is
    ``((32, 4), (16, 4)) : ((16, 4), (0, 1))`` tiled K-first). Rows are padded to a
    multiple of 128 and columns to a multiple of 4 with zero bytes; each 128 x 4 tile
    becomes one 512-byte atom stored as 32 x 16 bytes, row ``r`` of the tile at byte
    ``(r % 32) * 16 + (r // 32) * 4``. Atoms follow column-tile first, then row-tile.
    See :func:`blocked_offset` for the byte of one element. tests/test_layouts.py
    checks this against GPU MODE's ``to_blocked``, the hand-evaluated CuTe layout,
    offsets printed by the CUTLASS DSL and the examples in nvmath-python's
    ``get_block_scale_offset`` documentation.

    Padding is zero (E4M3 +0.0), never NaN: padded K columns meet A/B elements that
    the kernel zero-fills, and 0 x NaN would poison the sum.

    Parameters
    ----------
    scales : array_like of uint8, shape (rows, cols)
        E4M3 bytes, row-major, ``cols = k // 16``.

    Returns
    -------
    numpy.ndarray of uint8, shape (padded_rows * padded_cols,)
    """
    scales = _as_uint8(scales, "scales")
    if scales.ndim != 2 or 0 in scales.shape:
        raise ValueError(f"scales must be a non-empty 2-D array, got shape {scales.shape}")
    rows, cols = scales.shape
    row_tiles = ceil_div(rows, BLOCK_ROWS)
    col_tiles = ceil_div(cols, BLOCK_COLS)
    padded = np.zeros((row_tiles * BLOCK_ROWS, col_tiles * BLOCK_COLS), dtype=np.uint8)
    padded[:rows, :cols] = scales
    # row = tile * 128 + quarter * 32 + lane; col = col_tile * 4 + slot
    tiles = padded.reshape(row_tiles, 4, 32, col_tiles, BLOCK_COLS)
    # -> (row_tile, col_tile, lane, quarter, slot): byte lane * 16 + quarter * 4 + slot
    return np.ascontiguousarray(tiles.transpose(0, 3, 2, 1, 4)).reshape(-1)


def blocked_to_scales(buf, rows: int, cols: int) -> np.ndarray:
    """Invert :func:`scales_to_blocked`, dropping the padding.

    Parameters
    ----------
    buf : array_like of uint8, shape (padded_rows * padded_cols,)
        A blocked buffer of exactly the padded size.
    rows, cols : int
        Shape of the row-major scale matrix (``cols = k // 16``).

    Returns
    -------
    numpy.ndarray of uint8, shape (rows, cols)
    """
    buf = _as_uint8(buf, "buf")
    if rows < 1 or cols < 1:
        raise ValueError(f"rows and cols must be >= 1, got ({rows}, {cols})")
    row_tiles = ceil_div(rows, BLOCK_ROWS)
    col_tiles = ceil_div(cols, BLOCK_COLS)
    expected = row_tiles * col_tiles * ATOM_BYTES
    if buf.shape != (expected,):
        raise ValueError(
            f"blocked buffer for ({rows}, {cols}) scales must have shape "
            f"({expected},), got {buf.shape}"
        )
    tiles = buf.reshape(row_tiles, col_tiles, 32, 4, BLOCK_COLS).transpose(0, 3, 2, 1, 4)
    padded = tiles.reshape(row_tiles * BLOCK_ROWS, col_tiles * BLOCK_COLS)
    return np.ascontiguousarray(padded[:rows, :cols])


# problems ---------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Problem:
    """One NVFP4 GEMM problem, C (m, n) = A (m, k) @ B (n, k).T, as host arrays.

    All arrays are uint8 and read-only. ``sfa``/``sfb`` are row-major E4M3 bytes;
    ``sfa_blocked``/``sfb_blocked`` are the same scales in the kernel's blocked layout.
    """

    m: int
    n: int
    k: int
    a: np.ndarray  # (m, k // 2) packed FP4
    b: np.ndarray  # (n, k // 2) packed FP4
    sfa: np.ndarray  # (m, k // 16) E4M3
    sfb: np.ndarray  # (n, k // 16) E4M3
    sfa_blocked: np.ndarray  # (blocked_scale_bytes(m, k),)
    sfb_blocked: np.ndarray  # (blocked_scale_bytes(n, k),)


def _frozen(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array


def random_problem(
    m: int,
    n: int,
    k: int,
    rng: np.random.Generator,
    *,
    scale_range: tuple[float, float] = (0.25, 4.0),
) -> Problem:
    """Draw a random NVFP4 problem, in the spirit of GPU MODE's ``nvfp4_group_gemm``.

    FP4 codes are uniform over all 16 codes (both signs, every magnitude), which
    exercises more of the data path than GPU MODE's generator (bytes 0/1, scales 1/2).
    Scales are uniform over the E4M3 codes whose values lie in ``scale_range``: finite,
    positive and normal, so that with random signs a K of several thousand stays well
    inside FP16 range.

    Parameters
    ----------
    m, n : int
        Rows of A and of B, >= 1.
    k : int
        Reduction length, a positive multiple of 16.
    rng : numpy.random.Generator
        Source of randomness; the result depends only on its state.
    scale_range : (float, float)
        Inclusive bounds on the scale values; must contain at least one E4M3 value.

    Returns
    -------
    Problem
    """
    if m < 1 or n < 1:
        raise ValueError(f"m and n must be >= 1, got m={m}, n={n}")
    if k < SF_VEC_SIZE or k % SF_VEC_SIZE:
        raise ValueError(f"k must be a positive multiple of {SF_VEC_SIZE}, got {k}")
    low, high = scale_range
    if not 0 < low <= high <= E4M3_MAX:
        raise ValueError(f"scale_range must satisfy 0 < low <= high <= 448, got {scale_range}")
    in_range = (_E4M3_POSITIVE >= low) & (_E4M3_POSITIVE <= high)
    scale_codes = _E4M3_FINITE_CODES[in_range].astype(np.uint8)
    if scale_codes.size == 0:
        raise ValueError(f"scale_range {scale_range} contains no E4M3 value")

    def operand(rows: int) -> tuple[np.ndarray, np.ndarray]:
        codes = rng.integers(0, 16, size=(rows, k), dtype=np.uint8)
        if not (codes & 0x7).any():  # all ±0: force one nonzero so the GEMM means something
            codes[0, 0] = 2  # 1.0
        scales = rng.choice(scale_codes, size=(rows, k // SF_VEC_SIZE))
        return pack_fp4(codes), scales

    a, sfa = operand(m)
    b, sfb = operand(n)
    return Problem(
        m=m,
        n=n,
        k=k,
        a=_frozen(a),
        b=_frozen(b),
        sfa=_frozen(sfa),
        sfb=_frozen(sfb),
        sfa_blocked=_frozen(scales_to_blocked(sfa)),
        sfb_blocked=_frozen(scales_to_blocked(sfb)),
    )
