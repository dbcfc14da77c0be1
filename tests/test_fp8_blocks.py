"""nvfp4_aot.fp8_blocks: DeepSeek-style FP8 block-scaled weights dequantized to BF16
bits against a scalar reference written here (each element's E4M3 value from its bits,
the float32 product, the BF16 rounding to nearest even by hand), blocks cut at the
weight's edge, NaN codes, and the errors."""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest

from nvfp4_aot.fp8_blocks import BLOCK, Experts, blocks, dequantize


def e4m3_value(code: int) -> float:
    sign = -1.0 if code & 0x80 else 1.0
    exponent, mantissa = (code >> 3) & 0xF, code & 0x7
    if exponent == 0xF and mantissa == 0x7:
        return math.nan
    if exponent == 0:
        return sign * mantissa / 8 * 2.0**-6
    return sign * (1 + mantissa / 8) * 2.0 ** (exponent - 7)


def bf16_bits(value: float) -> int:
    """The float32 ``value`` rounded to BF16, nearest even (NaN: a quiet NaN's bits)."""
    bits = struct.unpack("<I", struct.pack("<f", value))[0]
    if math.isnan(value):
        return (bits >> 16) | 0x0040
    upper, lower = bits >> 16, bits & 0xFFFF
    if lower > 0x8000 or (lower == 0x8000 and upper & 1):
        upper += 1
    return upper


def reference(codes: np.ndarray, scale: np.ndarray) -> np.ndarray:
    out = np.empty(codes.shape, np.uint16)
    for (r, c), code in np.ndenumerate(codes):
        s = float(scale[r // BLOCK, c // BLOCK])
        product = np.float32(np.float64(e4m3_value(int(code))) * s)  # exact, then float32
        out[r, c] = bf16_bits(float(product))
    return out


def test_dequantize_matches_the_scalar_reference_with_edge_blocks():
    rng = np.random.default_rng(0)
    rows, cols = 130, 200  # the last block row has 2 rows, the last block column 72
    codes = rng.integers(0, 256, (rows, cols), dtype=np.uint8)
    codes[0, :4] = [0x7F, 0xFF, 0x00, 0x80]  # NaN, -NaN, +0, -0
    scale = rng.random(blocks(rows, cols)) * 2.0 ** rng.integers(-20, 8, blocks(rows, cols))
    scale = scale.astype(np.float32)
    assert scale.shape == (2, 2)
    got = dequantize(codes, scale)
    assert got.dtype == np.uint16 and got.shape == (rows, cols)
    assert np.array_equal(got, reference(codes, scale))


def test_dequantize_refuses_what_does_not_fit():
    codes = np.zeros((256, 129), np.uint8)
    with pytest.raises(ValueError, match=r"must be float32 \(2, 2\) \(one a 128 x 128 block\)"):
        dequantize(codes, np.ones((2, 1), np.float32))
    with pytest.raises(ValueError, match=r"got float64 \(2, 2\)"):
        dequantize(codes, np.ones((2, 2)))
    with pytest.raises(ValueError, match="FP8 codes must be uint8"):
        dequantize(codes.astype(np.int8), np.ones((2, 2), np.float32))


def test_experts_dequantize_one_at_a_time():
    rng = np.random.default_rng(1)
    codes = [rng.integers(0, 0x7E, (40, 64), dtype=np.uint8) for _ in range(3)]
    scales = [np.full((1, 1), 2.0**e, np.float32) for e in range(3)]
    experts = Experts(codes, scales)
    assert len(experts) == 3 and experts.shape == (3, 40, 64)
    for e in range(3):
        assert np.array_equal(experts[e], dequantize(codes[e], scales[e]))
    with pytest.raises(ValueError, match=r"expert 1: the block scales .* got float32 \(2, 1\)"):
        Experts(codes, [scales[0], np.ones((2, 1), np.float32), scales[2]])[1]
    with pytest.raises(ValueError, match="3 experts' FP8 weights but 2 block scales"):
        Experts(codes, scales[:2])
