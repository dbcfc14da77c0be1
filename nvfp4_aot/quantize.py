"""NVFP4 quantization in numpy: the bit-exact host reference of the activation quantizer
(issue #16), also used offline to quantize weights (:mod:`nvfp4_aot.weights`,
``nvfp4-aot quantize``).

Formulas (two-level scales, ModelOpt convention; the design notes, "Two-level NVFP4
scales"). ``x`` is a float32 array of shape (rows, k), ``k % 16 == 0``; every step below
is one IEEE float32 operation rounded to nearest even, in this order, so that a GPU
kernel doing the same operations (``mul.rn.f32``, ``div.rn.f32``: no fast-math
reciprocal, no approximate division) produces the same bytes::

    g      = global scale, float32 (default: float32(448 * 6) / amax(|x|), 1 if amax == 0)
    a_b    = max(|x_i|) over the 16 elements of block b            (NaN if any is NaN)
    s_b    = (g * a_b) / 6                                          two float32 roundings
    sf_b   = E4M3_rn_sat(s_b)                                       the scale byte
    m_b    = g / e4m3(sf_b)   if e4m3(sf_b) > 0   else 0            float32, once per block
    q_i    = E2M1_rne_sat(x_i * m_b)                                the FP4 code
    x_i   ~= fp4(q_i) * e4m3(sf_b) / g ;  scale_2 = float32(1 / g) goes into the GEMM's
    alpha  = scale_2(A) * scale_2(B)

The element is multiplied by the per-block multiplier ``m_b = g / sf`` (one division per
16 elements), not divided: ``x * (g / sf)`` and ``x * g / sf`` differ in the last bit
and so, at ties of the FP4 grid, in the code.

Rounding:

* ``E4M3_rn_sat``: round to nearest, ties to the even code, onto the E4M3 (FN) grid
  (subnormals step 2**-9; ``s <= 2**-10`` gives +0, ``2**-10`` itself being a tie to 0);
  anything above 448, ``+inf`` included, saturates to 448 (0x7E), as
  ``cvt.rn.satfinite.e4m3x2.f32`` does; NaN gives the E4M3 NaN 0x7F.
* ``E2M1_rne_sat``: on magnitudes {0, 0.5, 1, 1.5, 2, 3, 4, 6}, to nearest with ties to
  the even code (values: 0.25 -> 0, 0.75 -> 1, 1.25 -> 1, 1.75 -> 2, 2.5 -> 2, 3.5 -> 4,
  5 -> 4); above 6 (inf included) saturates to 6. The sign bit (code bit 3) is the sign
  bit of ``x_i``, so -0.0 and small negatives give code 8 (-0). Equivalently the
  magnitude code is ``(a > .25) + (a >= .75) + (a > 1.25) + (a >= 1.75) + (a > 2.5)
  + (a >= 3.5) + (a > 5)`` for ``a = |x_i * m_b|``, which is 0 for NaN.

Zeros, NaN and inf:

* An all-zero block (or one whose ``s_b`` rounds to E4M3 0) has scale byte 0 and
  ``m_b = 0``: every code is ±0 (0 or 8, the sign of ``x_i``).
* ``inf`` in a block saturates: ``s_b = inf`` -> scale 448, the inf element -> ±6 and
  the others ``x_i * g / 448`` rounded as usual.
* ``NaN`` in a block propagates: the block's scale byte is the E4M3 NaN (0x7F), so every
  GEMM output that reads the block is NaN, as in a BF16 GEMM; its codes are ±0 (the sign
  bits of the inputs, a NaN's included), so they are defined bytes.
* The default global scale needs a finite tensor: inf/NaN anywhere raises ValueError
  (pass ``global_scale`` explicitly to quantize such a tensor as a kernel would).

Inputs are converted to float32 first: float16 and bfloat16 exactly, float64 by
rounding to nearest (``quantize(x) == quantize(x.astype(np.float32))``). bfloat16 comes
as its uint16 bit patterns or as an array whose dtype is named ``bfloat16`` (ml_dtypes),
which needs no dependency here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .blocked import SF_VEC_SIZE
from .layouts import E4M3_FLOAT32, E4M3_MAX, E4M3_VALUES, pack_fp4, scales_to_blocked
from .reference import dequantize as _dequantize_codes

FP4_MAX = 6.0
"""Largest E2M1 magnitude."""

DEFAULT_GLOBAL_NUMERATOR = np.float32(E4M3_MAX * FP4_MAX)
"""``g = 2688 / amax`` by default, so that the largest block scale is exactly 448."""

# Thresholds of the E2M1 magnitude code: code = number of thresholds passed, where a
# threshold at a tie counts with ">=" if the upper neighbour's code is even, else ">".
_FP4_TIE_UP = ((0.25, False), (0.75, True), (1.25, False), (1.75, True), (2.5, False))
_FP4_TIE_UP += ((3.5, True), (5.0, False))

# E4M3 (FN) codes 0x00..0x7E and their values, increasing; 0x7F is NaN.
_E4M3_CODES = np.arange(0x7F, dtype=np.uint8)
_E4M3_GRID = E4M3_VALUES[:0x7F]
_E4M3_NAN = np.uint8(0x7F)


# scalar codecs with rounding ----------------------------------------------------------


def float_to_e4m3_rn_sat(values) -> np.ndarray:
    """Round non-negative float32 values to E4M3 (FN) bytes: RNE, saturating to 448.

    ``values`` are converted to float32 first. NaN gives 0x7F; values above 448 and
    +inf give 0x7E (448). Block scales are never negative, so negative inputs are
    refused.
    """
    s = np.asarray(values, dtype=np.float32).astype(np.float64)  # exact
    if (s < 0).any():
        raise ValueError("E4M3 block scales are non-negative; got a negative value")
    nan = np.isnan(s)
    s = np.where(nan, 0.0, np.minimum(s, E4M3_MAX))
    upper = np.minimum(np.searchsorted(_E4M3_GRID, s, side="left"), len(_E4M3_GRID) - 1)
    lower = np.where(_E4M3_GRID[upper] > s, upper - 1, upper)  # grid[lower] <= s
    lower = np.maximum(lower, 0)
    below, above = s - _E4M3_GRID[lower], _E4M3_GRID[upper] - s
    take_upper = (above < below) | ((above == below) & (upper % 2 == 0) & (upper != lower))
    codes = np.where(take_upper, _E4M3_CODES[upper], _E4M3_CODES[lower])
    return np.where(nan, _E4M3_NAN, codes).astype(np.uint8)


def float_to_fp4_rne_sat(values, sign_from=None) -> np.ndarray:
    """Round float32 values to E2M1 codes: RNE on the magnitude, saturating to ±6.

    The sign bit is the sign bit of ``sign_from`` (default ``values``), so -0.0 gives
    code 8; NaN has magnitude code 0.
    """
    v = np.asarray(values, dtype=np.float32)
    a = np.abs(v)
    magnitude = np.zeros(v.shape, dtype=np.uint8)
    for threshold, inclusive in _FP4_TIE_UP:
        passed = a >= np.float32(threshold) if inclusive else a > np.float32(threshold)
        magnitude += passed.astype(np.uint8)
    sign = np.signbit(v if sign_from is None else np.asarray(sign_from))
    return magnitude | (sign.astype(np.uint8) << 3)


# inputs --------------------------------------------------------------------------------


def as_float32(x) -> np.ndarray:
    """``x`` as float32: float16/bfloat16 exactly, float64 rounded to nearest.

    uint16 arrays are read as bfloat16 bit patterns, as are arrays whose dtype is named
    ``bfloat16`` (ml_dtypes). Other dtypes raise TypeError.
    """
    x = np.asarray(x)
    if x.dtype.name == "bfloat16":
        x = x.view(np.uint16)
    if x.dtype == np.uint16:
        return (x.astype(np.uint32) << 16).view(np.float32)
    if x.dtype in (np.float16, np.float32, np.float64):
        return x.astype(np.float32)
    raise TypeError(
        f"expected float16, bfloat16 (as uint16 bits), float32 or float64 values, got {x.dtype}"
    )


def default_global_scale(x32: np.ndarray) -> np.float32:
    """``float32(2688) / amax(|x|)`` in float32; 1 for an all-zero tensor.

    Raises ValueError for a tensor holding inf or NaN, or one so small that the global
    scale overflows float32.
    """
    amax = np.max(np.abs(x32)) if x32.size else np.float32(0)
    if not np.isfinite(amax):
        raise ValueError(
            "the tensor holds inf or NaN, so its amax gives no global scale; "
            "pass global_scale explicitly"
        )
    if amax == 0:
        return np.float32(1.0)
    with np.errstate(over="ignore"):
        g = DEFAULT_GLOBAL_NUMERATOR / np.float32(amax)
    if not np.isfinite(g):
        raise ValueError(f"amax {float(amax)!r} is too small for a float32 global scale")
    return np.float32(g)


def _check_global_scale(global_scale) -> np.float32:
    g = np.asarray(global_scale, dtype=np.float32)
    if g.ndim != 0 or not np.isfinite(g) or not g > 0:
        raise ValueError(f"global_scale must be a finite positive scalar, got {global_scale!r}")
    return np.float32(g)


# the quantizer -------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class QuantizedTensor:
    """One tensor in NVFP4: what the GEMM reads for A or B, and the FP32 scale."""

    packed: np.ndarray
    """uint8 (rows, k // 2): two E2M1 codes a byte, the even K index in the low nibble."""
    scales: np.ndarray
    """uint8 (rows, k // 16): E4M3 block scales, row-major."""
    scales_blocked: np.ndarray
    """uint8 (blocked_scale_bytes(rows, k),): the same scales in the kernel's layout."""
    global_scale: np.float32
    """``g``: the quantizer multiplied by it (``sf = E4M3(g * amax / 6)``)."""

    @property
    def scale_2(self) -> np.float32:
        """``float32(1 / g)``: this tensor's factor of the GEMM's alpha (ModelOpt's
        ``weight_scale_2`` / ``input_scale``)."""
        return np.float32(np.float32(1.0) / self.global_scale)

    @property
    def shape(self) -> tuple[int, int]:
        """(rows, k) of the quantized tensor."""
        return self.packed.shape[0], self.packed.shape[1] * 2

    def dequantize(self) -> np.ndarray:
        """float64 (rows, k): ``fp4(q) * e4m3(sf) / g`` (NaN where the scale is NaN)."""
        return _dequantize_codes(self.packed, self.scales) / np.float64(self.global_scale)


def _frozen(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array


def quantize(x, global_scale=None) -> QuantizedTensor:
    """Quantize a (rows, k) float array to NVFP4 (the module docstring's formulas).

    Parameters
    ----------
    x : array_like, shape (rows, k)
        float16, float32, float64, or bfloat16 (uint16 bits or an ml_dtypes array);
        ``rows >= 1``, ``k`` a positive multiple of 16.
    global_scale : float, optional
        ``g``, converted to float32; must be finite and positive. Default
        ``2688 / amax(|x|)`` (1 for an all-zero tensor; ValueError if ``x`` is not
        finite).

    Returns
    -------
    QuantizedTensor
        Read-only arrays; ``scale_2 = 1 / g`` is the factor for alpha.
    """
    x32 = as_float32(x)
    if x32.ndim != 2:
        raise ValueError(f"x must be 2-D (rows, k), got shape {x32.shape}")
    rows, k = x32.shape
    if rows < 1:
        raise ValueError(f"x must have at least one row, got shape {x32.shape}")
    if k < SF_VEC_SIZE or k % SF_VEC_SIZE:
        raise ValueError(f"k (the last axis) must be a positive multiple of 16, got {k}")
    g = default_global_scale(x32) if global_scale is None else _check_global_scale(global_scale)

    blocks = x32.reshape(rows, k // SF_VEC_SIZE, SF_VEC_SIZE)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        amax = np.max(np.abs(blocks), axis=-1)  # NaN-propagating
        s = (g * amax) / np.float32(FP4_MAX)  # float32 * float32 -> float32, then / 6
        scales = float_to_e4m3_rn_sat(s)
        sf = E4M3_FLOAT32[scales]
        positive = sf > 0  # False for 0 and NaN
        multiplier = np.where(positive, g / np.where(positive, sf, np.float32(1)), np.float32(0))
        v = blocks * multiplier.astype(np.float32)[..., None]
    codes = float_to_fp4_rne_sat(v, sign_from=blocks).reshape(rows, k)
    return QuantizedTensor(
        packed=_frozen(pack_fp4(codes)),
        scales=_frozen(scales),
        scales_blocked=_frozen(scales_to_blocked(scales)),
        global_scale=g,
    )
