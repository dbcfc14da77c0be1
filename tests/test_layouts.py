"""Tests for nvfp4_aot.layouts (numpy only, no GPU)."""

import re

import numpy as np
import pytest

from nvfp4_aot.intmath import ceil_div
from nvfp4_aot.layouts import (
    E4M3_VALUES,
    FP4_VALUES,
    blocked_offset,
    blocked_scale_bytes,
    blocked_to_scales,
    e4m3_to_float,
    float_to_e4m3,
    float_to_fp4_codes,
    fp4_to_float,
    pack_fp4,
    random_problem,
    scales_to_blocked,
    unpack_fp4,
)

# FP4 --------------------------------------------------------------------------------


def test_unpack_low_nibble_first():
    codes = unpack_fp4(np.array([0x21], dtype=np.uint8))
    assert codes.tolist() == [1, 2]
    assert fp4_to_float(codes).tolist() == [0.5, 1.0]


def test_pack_unpack_round_trip():
    rng = np.random.default_rng(0)
    codes = rng.integers(0, 16, size=(3, 5, 64), dtype=np.uint8)
    packed = pack_fp4(codes)
    assert packed.shape == (3, 5, 32)
    assert packed[0, 0, 0] == codes[0, 0, 0] | (codes[0, 0, 1] << 4)
    np.testing.assert_array_equal(unpack_fp4(packed), codes)
    all_bytes = np.arange(256, dtype=np.uint8)
    np.testing.assert_array_equal(pack_fp4(unpack_fp4(all_bytes)), all_bytes)


def test_fp4_table():
    expected = [0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6]
    assert fp4_to_float(np.arange(16, dtype=np.uint8)).tolist() == expected
    assert np.signbit(FP4_VALUES[8])


def test_float_to_fp4_round_trip():
    codes = np.arange(16, dtype=np.uint8)
    np.testing.assert_array_equal(float_to_fp4_codes(fp4_to_float(codes)), codes)
    assert float_to_fp4_codes([[6.0, -1.5]]).tolist() == [[7, 11]]


@pytest.mark.parametrize("bad", [2.5, 7.0, -0.25, float("nan"), float("inf")])
def test_float_to_fp4_rejects(bad):
    with pytest.raises(
        ValueError,
        match=re.escape(f"value {bad!r} at index (1,) is not exactly representable in FP4"),
    ):
        float_to_fp4_codes([1.0, bad, 3.3])


def test_fp4_errors():
    with pytest.raises(ValueError, match="even last dimension"):
        pack_fp4(np.zeros((2, 3), dtype=np.uint8))
    with pytest.raises(ValueError, match="0..15, got max 16"):
        pack_fp4(np.array([16, 0], dtype=np.uint8))
    with pytest.raises(TypeError, match="dtype uint8, got int64"):
        unpack_fp4(np.array([1, 2]))


# E4M3 -------------------------------------------------------------------------------


def test_e4m3_hand_values():
    codes = np.array([0x38, 0x7E, 0x01, 0x08, 0x00, 0x80, 0xB8, 0x3C, 0x07], dtype=np.uint8)
    expected = [1.0, 448.0, 2.0**-9, 2.0**-6, 0.0, -0.0, -1.0, 1.5, 7 * 2.0**-9]
    assert e4m3_to_float(codes).tolist() == expected
    assert np.isnan(e4m3_to_float(np.array([0x7F, 0xFF], dtype=np.uint8))).all()


def test_e4m3_table_is_monotone_and_finite():
    positive = E4M3_VALUES[:0x7F]
    assert np.all(np.diff(positive) > 0)
    assert np.isfinite(E4M3_VALUES[[c for c in range(256) if c & 0x7F != 0x7F]]).all()
    assert E4M3_VALUES[0x7E] == 448.0


def test_float_to_e4m3_round_trip():
    codes = np.array([c for c in range(256) if c & 0x7F != 0x7F], dtype=np.uint8)
    np.testing.assert_array_equal(float_to_e4m3(e4m3_to_float(codes)), codes)
    assert float_to_e4m3([[1.0, -448.0]]).tolist() == [[0x38, 0xFE]]


@pytest.mark.parametrize("bad", [1.0625, 449.0, 2.0**-10, float("nan"), -float("inf")])
def test_float_to_e4m3_rejects(bad):
    with pytest.raises(
        ValueError,
        match=re.escape(f"value {bad!r} at index (1,) is not exactly representable in FP8 E4M3"),
    ):
        float_to_e4m3([2.0, bad])


# blocked ----------------------------------------------------------------------------


def gpu_mode_to_blocked(scales):
    """GPU MODE's ``to_blocked`` (reference-kernels problems/nvidia/nvfp4_group_gemm),
    rewritten with numpy: view(rb, 128, cb, 4) -> permute(0, 2, 1, 3) ->
    reshape(-1, 4, 32, 4) -> transpose(1, 2) -> reshape(-1, 32, 16) -> flatten, after
    zero-padding to multiples of 128 x 4."""
    rows, cols = scales.shape
    rb, cb = ceil_div(rows, 128), ceil_div(cols, 4)
    padded = np.zeros((rb * 128, cb * 4), dtype=scales.dtype)
    padded[:rows, :cols] = scales
    blocks = padded.reshape(rb, 128, cb, 4).transpose(0, 2, 1, 3)
    rearranged = blocks.reshape(-1, 4, 32, 4).transpose(0, 2, 1, 3).reshape(-1, 32, 16)
    return rearranged.reshape(-1)


def cute_sf_offset(row, col, rows, cols):
    """Offset from CUTLASS's ``tile_atom_to_shape_SF(shape, 16)``, evaluated by hand.

    The atom is ((32, 4), (16, 4)) : ((16, 4), (0, 1)) over (row, k element); tiled
    to the shape with order (2, 1, 3), the K rest mode gets stride 512 and the row
    rest mode 512 * ceil(cols / 4). For (200, 160, 1) the DSL prints
    (((32,4),2),((16,4),3),(1,1)):(((16,4),1536),((0,1),512),(0,0)).
    """
    k = col * 16
    rest_k = ceil_div(cols, 4)
    r0, r1, r2 = row % 32, (row // 32) % 4, row // 128
    k0, k1, k2 = k % 16, (k // 16) % 4, k // 64
    return r0 * 16 + r1 * 4 + r2 * 512 * rest_k + k0 * 0 + k1 * 1 + k2 * 512


def test_blocked_hand_checked_position():
    scales = np.zeros((256, 8), dtype=np.uint8)
    scales[33, 5] = 7
    buf = scales_to_blocked(scales)
    assert buf.shape == (256 * 8,)
    assert np.flatnonzero(buf).tolist() == [(0 * 2 + 1) * 512 + 1 * 16 + 1 * 4 + 1]
    assert blocked_offset(33, 5, 8) == 533


def test_blocked_offsets_match_nvmath_docs():
    # nvmath-python docs, get_block_scale_offset: NVFP4 A of shape (128, 128),
    # scale (5, 2) -> 82 and (5, 5) -> 593.
    assert blocked_offset(5, 2, 8) == 82
    assert blocked_offset(5, 5, 8) == 593


def test_blocked_offsets_match_cutlass_dsl_printout():
    # Values printed by nvidia-cutlass-dsl's tile_atom_to_shape_SF((200, 160, 1), 16)
    # for (row, k element): the layout has cosize 3072.
    printed = {
        (0, 0): 0, (1, 0): 16, (31, 0): 496, (32, 0): 4, (33, 80): 533,
        (127, 63): 511, (128, 0): 1536, (0, 64): 512, (0, 16): 1, (199, 159): 2681,
    }  # fmt: skip
    for (row, k), offset in printed.items():
        assert blocked_offset(row, k // 16, 10) == offset
    assert blocked_scale_bytes(200, 160) == 3072


@pytest.mark.parametrize("rows, cols", [(128, 4), (256, 8), (200, 10), (1, 1), (300, 3), (129, 7)])
def test_blocked_matches_independent_formulations(rows, cols):
    rng = np.random.default_rng(rows * 100 + cols)
    scales = rng.integers(1, 256, size=(rows, cols), dtype=np.uint8)
    buf = scales_to_blocked(scales)
    np.testing.assert_array_equal(buf, gpu_mode_to_blocked(scales))
    assert buf.size == blocked_scale_bytes(rows, cols * 16)
    r, c = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    np.testing.assert_array_equal(buf[blocked_offset(r, c, cols)], scales)
    np.testing.assert_array_equal(cute_sf_offset(r, c, rows, cols), blocked_offset(r, c, cols))
    # everything not covered by a real scale is zero padding
    covered = np.zeros(buf.size, dtype=bool)
    covered[blocked_offset(r, c, cols)] = True
    assert covered.sum() == rows * cols
    assert not buf[~covered].any()
    np.testing.assert_array_equal(blocked_to_scales(buf, rows, cols), scales)


def test_blocked_scale_bytes():
    assert blocked_scale_bytes(128, 64) == 512
    assert blocked_scale_bytes(1, 16) == 512
    assert blocked_scale_bytes(129, 80) == 256 * 8
    with pytest.raises(ValueError, match="multiple of 16, got 40"):
        blocked_scale_bytes(128, 40)
    with pytest.raises(ValueError, match="rows must be >= 1, got 0"):
        blocked_scale_bytes(0, 64)


def test_blocked_errors():
    with pytest.raises(ValueError, match=r"must have shape \(1024,\), got \(512,\)"):
        blocked_to_scales(np.zeros(512, dtype=np.uint8), 200, 4)
    with pytest.raises(ValueError, match="non-empty 2-D"):
        scales_to_blocked(np.zeros(16, dtype=np.uint8))
    with pytest.raises(TypeError, match="scales must have dtype uint8, got float32"):
        scales_to_blocked(np.zeros((4, 4), dtype=np.float32))


# problems ---------------------------------------------------------------------------


def test_random_problem_shapes_and_ranges():
    problem = random_problem(200, 72, 320, np.random.default_rng(1))
    assert (problem.m, problem.n, problem.k) == (200, 72, 320)
    assert problem.a.shape == (200, 160) and problem.b.shape == (72, 160)
    assert problem.sfa.shape == (200, 20) and problem.sfb.shape == (72, 20)
    for array in (problem.a, problem.b, problem.sfa, problem.sfb):
        assert array.dtype == np.uint8 and not array.flags.writeable
    np.testing.assert_array_equal(problem.sfa_blocked, scales_to_blocked(problem.sfa))
    np.testing.assert_array_equal(problem.sfb_blocked, scales_to_blocked(problem.sfb))
    assert problem.sfa_blocked.size == blocked_scale_bytes(200, 320)
    scales = e4m3_to_float(np.concatenate([problem.sfa.ravel(), problem.sfb.ravel()]))
    assert scales.min() >= 0.25 and scales.max() <= 4.0
    assert len(np.unique(scales)) > 10
    codes = unpack_fp4(problem.a)
    assert set(np.unique(codes).tolist()) == set(range(16))


def test_random_problem_is_deterministic_and_nonzero():
    first = random_problem(1, 1, 16, np.random.default_rng(7), scale_range=(1.0, 1.0))
    second = random_problem(1, 1, 16, np.random.default_rng(7), scale_range=(1.0, 1.0))
    np.testing.assert_array_equal(first.a, second.a)
    assert (unpack_fp4(first.a) & 7).any() and (unpack_fp4(first.b) & 7).any()
    assert (e4m3_to_float(first.sfa) == 1.0).all()


def test_random_problem_errors():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="multiple of 16, got 24"):
        random_problem(4, 4, 24, rng)
    with pytest.raises(ValueError, match="m and n must be >= 1, got m=0"):
        random_problem(0, 4, 16, rng)
    with pytest.raises(ValueError, match="contains no E4M3 value"):
        random_problem(4, 4, 16, rng, scale_range=(1.01, 1.1))
    with pytest.raises(ValueError, match="0 < low <= high <= 448"):
        random_problem(4, 4, 16, rng, scale_range=(0.0, 1.0))
