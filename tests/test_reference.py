"""Tests for nvfp4_aot.reference (numpy only, no GPU)."""

import math

import numpy as np
import pytest

from nvfp4_aot.layouts import (
    float_to_e4m3,
    float_to_fp4_codes,
    pack_fp4,
    random_problem,
)
from nvfp4_aot.reference import (
    dequantize,
    grouped_reference,
    reference_gemm,
    relative_error,
)

FP4 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def decode_fp4_nibble(nibble):
    magnitude = FP4[nibble & 7]
    return -magnitude if nibble & 8 else magnitude


def decode_e4m3_byte(byte):
    sign = -1.0 if byte & 0x80 else 1.0
    exponent, mantissa = (byte >> 3) & 0xF, byte & 7
    if exponent == 0:
        return sign * mantissa / 8 * 2.0**-6
    return sign * (1 + mantissa / 8) * 2.0 ** (exponent - 7)


def loop_gemm(problem):
    """Per-16-block sums from the raw bytes, in Python scalars (no numpy decode)."""
    out = np.zeros((problem.m, problem.n))
    for i in range(problem.m):
        for j in range(problem.n):
            total = 0.0
            for block in range(problem.k // 16):
                partial = 0.0
                for byte in range(block * 8, block * 8 + 8):
                    a, b = int(problem.a[i, byte]), int(problem.b[j, byte])
                    partial += decode_fp4_nibble(a & 15) * decode_fp4_nibble(b & 15)
                    partial += decode_fp4_nibble(a >> 4) * decode_fp4_nibble(b >> 4)
                scale_a = decode_e4m3_byte(int(problem.sfa[i, block]))
                scale_b = decode_e4m3_byte(int(problem.sfb[j, block]))
                total += partial * scale_a * scale_b
            out[i, j] = total
    return out


def test_dequantize_hand_values():
    values = np.array([[0.5, 1.0] + [0.0] * 14 + [-6.0] + [3.0] * 15])
    packed = pack_fp4(float_to_fp4_codes(values))
    assert packed[0, 0] == 0x21
    scales = float_to_e4m3([[2.0, 0.125]])
    out = dequantize(packed, scales)
    assert out.dtype == np.float64 and out.shape == (1, 32)
    np.testing.assert_array_equal(out[0, :16], values[0, :16] * 2.0)
    np.testing.assert_array_equal(out[0, 16:], values[0, 16:] * 0.125)


@pytest.mark.parametrize("m, n, k", [(3, 5, 64), (1, 2, 16), (4, 3, 48)])
def test_reference_gemm_matches_block_loop(m, n, k):
    problem = random_problem(m, n, k, np.random.default_rng(m * n * k))
    ref = reference_gemm(problem)
    assert ref.shape == (m, n) and ref.dtype == np.float64
    np.testing.assert_allclose(ref, loop_gemm(problem), rtol=1e-12, atol=1e-12)


def test_grouped_reference_keeps_order():
    rng = np.random.default_rng(3)
    problems = [random_problem(m, 4, 32, rng) for m in (1, 2, 3)]
    outputs = grouped_reference(problems)
    assert [out.shape for out in outputs] == [(1, 4), (2, 4), (3, 4)]
    for problem, out in zip(problems, outputs, strict=True):
        np.testing.assert_array_equal(out, reference_gemm(problem))


def test_fp16_rounding_is_within_tolerance():
    problem = random_problem(64, 48, 1024, np.random.default_rng(11))
    ref = reference_gemm(problem)
    assert np.abs(ref).max() < 65504
    assert relative_error(ref.astype(np.float16), ref) < 1e-3


def test_relative_error():
    ref = np.array([[3.0, 4.0]])
    assert relative_error(ref, ref) == 0.0
    assert relative_error(np.array([[3.0, 4.5]], dtype=np.float16), ref) == pytest.approx(0.1)
    assert relative_error(np.array([[np.nan, 4.0]]), ref) == math.inf
    assert relative_error(np.array([[np.inf, 4.0]], dtype=np.float16), ref) == math.inf
    assert relative_error(np.zeros((1, 2)), np.zeros((1, 2))) == 0.0
    assert relative_error(np.ones((1, 2)), np.zeros((1, 2))) == math.inf
    with pytest.raises(ValueError, match=r"out has shape \(2,\), reference has shape \(1, 2\)"):
        relative_error(np.zeros(2), ref)


def test_dequantize_errors():
    packed = np.zeros((2, 16), dtype=np.uint8)
    with pytest.raises(ValueError, match=r"must have shape \(2, 2\) .*got \(2, 3\)"):
        dequantize(packed, np.zeros((2, 3), dtype=np.uint8))
    with pytest.raises(ValueError, match="must be 2-D"):
        dequantize(packed.ravel(), np.zeros((2, 2), dtype=np.uint8))
    with pytest.raises(ValueError, match="k a multiple of 16"):
        dequantize(np.zeros((2, 4), dtype=np.uint8), np.zeros((2, 0), dtype=np.uint8))
