"""Tests for nvfp4_aot.checkpoints against hand-computed values (numpy only, no GPU)."""

import re

import numpy as np
import pytest

from nvfp4_aot.checkpoints import (
    ExpertStack,
    ExpertWeights,
    from_compressed_tensors,
    from_compressed_tensors_experts,
    from_modelopt,
    from_modelopt_experts,
    fuse_gate_up,
    round_to_e4m3,
)
from nvfp4_aot.errors import InvalidProblemError
from nvfp4_aot.layouts import (
    E4M3_VALUES,
    blocked_scale_bytes,
    blocked_to_scales,
    e4m3_to_float,
    float_to_e4m3,
    pack_fp4,
    scales_to_blocked,
)
from nvfp4_aot.reference import dequantize

# One row of k = 16 written byte by byte: codes 2, 9, 7 then zeros, i.e. 1.0, -0.5, 6.0.
# Byte 0 holds codes 2 (low nibble, k = 0) and 9 (high nibble, k = 1).
HAND_WEIGHT = np.array([[0x92, 0x07, 0, 0, 0, 0, 0, 0]], dtype=np.uint8)
HAND_SCALE = np.array([[0x3C]], dtype=np.uint8)  # E4M3 0x3C = 1.5
# The activation: codes 2, 2, 2 (1.0 each), block scale 0x38 = 1.0.
HAND_A = np.array([[0x22, 0x02, 0, 0, 0, 0, 0, 0]], dtype=np.uint8)
HAND_SFA = np.array([[0x38]], dtype=np.uint8)


def kernel_result(a, sfa, w):
    """What the kernel computes, in float64: alpha * (Aq @ Bq.T) from our outputs."""
    assert np.array_equal(blocked_to_scales(w.sfb_blocked, w.n, w.k // 16), w.sfb)
    return np.float64(w.alpha) * (dequantize(a, sfa) @ dequantize(w.b, w.sfb).T)


# ModelOpt ---------------------------------------------------------------------------


def test_modelopt_hand_computed():
    w = from_modelopt(HAND_WEIGHT, HAND_SCALE, np.float32(0.25), np.float32(0.5))
    assert isinstance(w, ExpertWeights)
    assert (w.n, w.k) == (1, 16)
    assert w.alpha.dtype == np.float32 and w.alpha == 0.125  # 0.5 * 0.25
    assert w.input_scale == 0.5 and w.weight_scale_2 == 0.25
    np.testing.assert_array_equal(w.b, HAND_WEIGHT)  # the bytes pass through
    np.testing.assert_array_equal(w.sfb, HAND_SCALE)
    assert w.sfb_blocked.shape == (blocked_scale_bytes(1, 16),) == (512,)
    assert w.sfb_blocked[0] == 0x3C and not w.sfb_blocked[1:].any()
    # Checkpoint weight by hand: q * 1.5 * 0.25 = 0.375, -0.1875, 2.25, 0, ...
    checkpoint_w = dequantize(HAND_WEIGHT, HAND_SCALE) * 0.25
    assert checkpoint_w[0, :3].tolist() == [0.375, -0.1875, 2.25]
    assert not checkpoint_w[0, 3:].any()
    # Activations 1.0 * 1.0 * input_scale 0.5; A @ W.T = 0.5 * 2.4375 = 1.21875
    checkpoint_a = dequantize(HAND_A, HAND_SFA) * 0.5
    assert (checkpoint_a @ checkpoint_w.T).tolist() == [[1.21875]]
    # The kernel: Aq @ Bq.T = 1.5 - 0.75 + 9 = 9.75, times alpha 0.125
    assert (dequantize(HAND_A, HAND_SFA) @ dequantize(w.b, w.sfb).T).tolist() == [[9.75]]
    assert kernel_result(HAND_A, HAND_SFA, w).tolist() == [[1.21875]]


def test_nibble_order_low_first():
    """Swapping the nibbles of byte 0 swaps k = 0 and k = 1: low nibble is the even k."""
    swapped = HAND_WEIGHT.copy()
    swapped[0, 0] = 0x29
    w = from_modelopt(swapped, HAND_SCALE, 1.0, 1.0)
    assert dequantize(w.b, w.sfb)[0, :3].tolist() == [-0.75, 1.5, 9.0]
    # and our packer agrees with the checkpoints' pack_fp4_to_uint8 (indices[0] | [1] << 4)
    codes = np.zeros((1, 16), dtype=np.uint8)
    codes[0, :3] = [2, 9, 7]
    np.testing.assert_array_equal(pack_fp4(codes), HAND_WEIGHT)


@pytest.mark.parametrize("shape", [(), (1,)])
def test_scalar_shapes_accepted(shape):
    w = from_modelopt(
        HAND_WEIGHT, HAND_SCALE, np.full(shape, 0.25, np.float32), np.full(shape, 0.5)
    )
    assert w.alpha == np.float32(0.125)


def test_alpha_is_float32_of_the_exact_product():
    ws2, ins = np.float32(1.1e-3), np.float32(3.3e-2)
    w = from_modelopt(HAND_WEIGHT, HAND_SCALE, ws2, ins)
    assert w.alpha == np.float32(np.float64(ws2) * np.float64(ins))


def random_checkpoint(rng, experts, n, k):
    codes = rng.integers(0, 16, size=(experts, n, k), dtype=np.uint8)
    normal = np.arange(0x08, 0x7F, dtype=np.uint8)  # positive normal E4M3 codes
    scales = rng.choice(normal, size=(experts, n, k // 16)).astype(np.uint8)
    ws2 = (rng.uniform(1e-4, 1e-2, experts)).astype(np.float32)
    ins = (rng.uniform(1e-3, 1e-1, experts)).astype(np.float32)
    return pack_fp4(codes), scales, ws2, ins


def random_activation(rng, m, k):
    codes = rng.integers(0, 16, size=(m, k), dtype=np.uint8)
    sfa = rng.choice(np.arange(0x20, 0x50, dtype=np.uint8), size=(m, k // 16))
    return pack_fp4(codes), sfa.astype(np.uint8)


def test_modelopt_stack_matches_float64_checkpoint_product():
    rng = np.random.default_rng(1)
    e_count, n, k, m = 3, 130, 64, 5
    weight, scales, ws2, ins = random_checkpoint(rng, e_count, n, k)
    stack = from_modelopt_experts(weight, scales, ws2, ins)
    assert isinstance(stack, ExpertStack)
    assert stack.b.shape == (3, n, k // 2) and stack.sfb.shape == (3, n, k // 16)
    assert stack.sfb_blocked.shape == (3, blocked_scale_bytes(n, k))
    assert stack.alpha.dtype == np.float32 and stack.alpha.shape == (3,)
    for e in range(e_count):
        assert np.array_equal(stack.sfb_blocked[e], scales_to_blocked(scales[e]))
        a, sfa = random_activation(rng, m, k)
        checkpoint = (dequantize(a, sfa) * np.float64(ins[e])) @ (
            dequantize(weight[e], scales[e]) * np.float64(ws2[e])
        ).T
        got = kernel_result(a, sfa, stack.expert(e))
        np.testing.assert_allclose(got, checkpoint, rtol=2**-23, atol=0)


def test_stack_one_input_scale_for_all_experts():
    rng = np.random.default_rng(2)
    weight, scales, ws2, _ = random_checkpoint(rng, 4, 16, 32)
    stack = from_modelopt_experts(weight, scales, ws2, np.float32(0.5))
    np.testing.assert_array_equal(stack.input_scale, [0.5] * 4)
    np.testing.assert_array_equal(stack.alpha, (ws2.astype(np.float64) * 0.5).astype(np.float32))
    stack2 = from_modelopt_experts(weight, scales, ws2[:, None], np.full((4, 1), 0.5))
    np.testing.assert_array_equal(stack2.alpha, stack.alpha)


def test_float8_scales_as_ml_dtypes():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    scales = HAND_SCALE.view(ml_dtypes.float8_e4m3fn)
    assert float(scales[0, 0]) == 1.5
    w = from_modelopt(HAND_WEIGHT, scales, 0.25, 0.5)
    np.testing.assert_array_equal(w.sfb, HAND_SCALE)


# compressed-tensors -----------------------------------------------------------------


def test_compressed_tensors_hand_computed():
    """Global scales are divisors: W = q * sf / 4 and A = qa * sfa / 2, alpha = 1 / 8."""
    w = from_compressed_tensors(
        HAND_WEIGHT, HAND_SCALE, np.array([4.0], np.float32), np.array([2.0], np.float32)
    )
    assert w.weight_scale_2 == 0.25 and w.input_scale == 0.5
    assert w.alpha == 0.125
    checkpoint_w = dequantize(HAND_WEIGHT, HAND_SCALE) / 4.0
    checkpoint_a = dequantize(HAND_A, HAND_SFA) / 2.0
    assert (checkpoint_a @ checkpoint_w.T).tolist() == [[1.21875]]
    assert kernel_result(HAND_A, HAND_SFA, w).tolist() == [[1.21875]]


def test_compressed_tensors_equals_modelopt_with_reciprocal_scales():
    rng = np.random.default_rng(3)
    weight, scales, ws2, ins = random_checkpoint(rng, 2, 32, 64)
    g_w = (1.0 / ws2.astype(np.float64)).astype(np.float32)
    g_a = (1.0 / ins.astype(np.float64)).astype(np.float32)
    ct = from_compressed_tensors_experts(weight, scales, g_w, g_a)
    np.testing.assert_array_equal(ct.b, weight)
    np.testing.assert_array_equal(ct.sfb_blocked[1], scales_to_blocked(scales[1]))
    exact = 1.0 / (g_w.astype(np.float64) * g_a.astype(np.float64))
    np.testing.assert_array_equal(ct.alpha, exact.astype(np.float32))
    for e in range(2):
        a, sfa = random_activation(rng, 4, 64)
        checkpoint = (dequantize(a, sfa) / np.float64(g_a[e])) @ (
            dequantize(weight[e], scales[e]) / np.float64(g_w[e])
        ).T
        np.testing.assert_allclose(kernel_result(a, sfa, ct.expert(e)), checkpoint, rtol=2**-23)


def test_compressed_tensors_reciprocal_not_product():
    """A reciprocal mix-up (alpha = g_a * g_w) would give 8 here, not 1/8."""
    w = from_compressed_tensors(HAND_WEIGHT, HAND_SCALE, 4.0, 2.0)
    assert w.alpha == 0.125


# gate/up fusion ---------------------------------------------------------------------


def checkpoint_weight(w):
    return dequantize(w.b, w.sfb) * w.weight_scale_2


def test_fuse_equal_scales_is_concatenation():
    rng = np.random.default_rng(4)
    weight, scales, _, _ = random_checkpoint(rng, 2, 24, 32)
    gate = from_modelopt(weight[0], scales[0], 0.01, 0.5)
    up = from_modelopt(weight[1], scales[1], 0.01, 0.5)
    fused = fuse_gate_up(gate, up)
    assert (fused.n, fused.k) == (48, 32)
    np.testing.assert_array_equal(fused.b, np.concatenate([weight[0], weight[1]]))
    np.testing.assert_array_equal(fused.sfb, np.concatenate([scales[0], scales[1]]))
    np.testing.assert_array_equal(fused.sfb_blocked, scales_to_blocked(fused.sfb))
    assert fused.alpha == gate.alpha


def test_fuse_hand_computed_power_of_two():
    """gate scale_2 0.5, up 0.25: up's block scale 1.5 (0x3C) becomes 0.75 (0x34)."""
    gate = from_modelopt(HAND_WEIGHT, np.array([[0x38]], np.uint8), 0.5, 0.5)
    up = from_modelopt(HAND_WEIGHT, HAND_SCALE, 0.25, 0.25)
    fused = fuse_gate_up(gate, up)
    assert fused.sfb.tolist() == [[0x38], [0x34]]
    assert E4M3_VALUES[0x34] == 0.75
    assert fused.weight_scale_2 == 0.5 and fused.input_scale == 0.5
    assert fused.alpha == 0.25  # max(0.5, 0.25) * max(0.5, 0.25)
    # up row by hand: q * 1.5 * 0.25 == q * 0.75 * 0.5: 0.375, -0.1875, 2.25
    expected = np.concatenate([checkpoint_weight(gate), checkpoint_weight(up)])
    assert expected[1, :3].tolist() == [0.375, -0.1875, 2.25]
    np.testing.assert_array_equal(checkpoint_weight(fused), expected)
    # with A quantized at input_scale 0.5: gate 0.5 * 0.5 * (1 - 0.5 + 6) = 1.625
    assert kernel_result(HAND_A, HAND_SFA, fused).tolist() == [[1.625, 1.21875]]


def test_fuse_power_of_two_stack_exact():
    rng = np.random.default_rng(5)
    weight, scales, _, _ = random_checkpoint(rng, 4, 40, 64)
    scales = np.maximum(scales, 0x20)  # >= 2**-3: a 1/8 factor stays normal
    gate = from_modelopt_experts(weight[:2], scales[:2], [0.004, 0.001], [0.5, 0.25])
    up = from_modelopt_experts(weight[2:], scales[2:], [0.0005, 0.002], [0.5, 0.5])
    fused = fuse_gate_up(gate, up)
    np.testing.assert_array_equal(fused.weight_scale_2, [0.004, 0.002])
    np.testing.assert_array_equal(fused.input_scale, [0.5, 0.5])
    np.testing.assert_array_equal(fused.alpha, np.float32([0.002, 0.001]))
    for e in range(2):
        expected = np.concatenate(
            [checkpoint_weight(gate.expert(e)), checkpoint_weight(up.expert(e))]
        )
        np.testing.assert_array_equal(checkpoint_weight(fused.expert(e)), expected)
        a, sfa = random_activation(rng, 3, 64)
        ref = (dequantize(a, sfa) * fused.input_scale[e]) @ expected.T
        np.testing.assert_allclose(kernel_result(a, sfa, fused.expert(e)), ref, rtol=2**-23)


def test_fuse_exact_non_power_of_two_when_values_allow():
    """ratio 2/3 with block scale 1.5: 1.5 * 2/3 = 1.0 is an E4M3 value, so exact."""
    gate = from_modelopt(HAND_WEIGHT, HAND_SCALE, 0.375, 1.0)
    up = from_modelopt(HAND_WEIGHT, HAND_SCALE, 0.25, 1.0)
    fused = fuse_gate_up(gate, up)
    assert fused.sfb.tolist() == [[0x3C], [0x38]]
    np.testing.assert_array_equal(
        checkpoint_weight(fused),
        np.concatenate([checkpoint_weight(gate), checkpoint_weight(up)]),
    )


def test_fuse_refuses_inexact_and_names_expert():
    gate = from_modelopt_experts(
        np.stack([HAND_WEIGHT] * 2), np.full((2, 1, 1), 0x38, np.uint8), [0.3, 0.3], 1.0
    )
    up = from_modelopt_experts(
        np.stack([HAND_WEIGHT] * 2), np.full((2, 1, 1), 0x38, np.uint8), [0.3, 0.2], 1.0
    )
    with pytest.raises(InvalidProblemError, match=r"expert 1: .*up block scales.*two GEMMs"):
        fuse_gate_up(gate, up)


@pytest.mark.parametrize(
    ("code", "s_up", "rounded"),
    [
        (0x01, 0.25, 0x00),  # 2**-9 / 4 = 2**-11 < 2**-10: rounds to 0
        (0x09, 0.5, 0x04),  # 1.125 * 2**-6 / 2 = 4.5 * 2**-9: off the grid, tie to even 4
    ],
)
def test_fuse_refuses_power_of_two_off_the_subnormal_grid(code, s_up, rounded):
    gate = from_modelopt(HAND_WEIGHT, np.array([[0x38]], np.uint8), 1.0, 1.0)
    up = from_modelopt(HAND_WEIGHT, np.array([[code]], np.uint8), s_up, 1.0)
    with pytest.raises(InvalidProblemError, match="expert 0"):
        fuse_gate_up(gate, up)
    fused = fuse_gate_up(gate, up, allow_rounding=True)
    assert fused.sfb.tolist() == [[0x38], [rounded]]


def test_fuse_rounding_error_bound():
    rng = np.random.default_rng(6)
    weight, _, _, _ = random_checkpoint(rng, 2, 64, 256)
    scales = rng.integers(0, 0x7F, size=(2, 64, 16), dtype=np.uint8)  # every finite code
    s_gate, s_up = 0.0037, 0.0021  # ratio not a power of two
    gate = from_modelopt(weight[0], scales[0], s_gate, 1.0)
    up = from_modelopt(weight[1], scales[1], s_up, 1.0)
    fused = fuse_gate_up(gate, up, allow_rounding=True)
    np.testing.assert_array_equal(fused.sfb[:64], scales[0])  # the larger scale is kept
    target = e4m3_to_float(scales[1]) * (s_up / s_gate)
    got = e4m3_to_float(fused.sfb[64:])
    bound = np.where(target >= 2**-6, 2**-4 * target, 2**-10)
    assert (np.abs(got - target) <= bound * (1 + 1e-12)).all()
    assert (np.abs(got - target) > 0).any()  # the rounding did change something
    # elementwise weight error: |q| * |sf' - sf * rho| * S
    diff = np.abs(checkpoint_weight(fused)[64:] - checkpoint_weight(up))
    allowed = np.abs(dequantize(up.b, np.full_like(scales[1], 0x38))) * np.repeat(bound, 16, axis=1)
    assert (diff <= allowed * s_gate * (1 + 1e-12)).all()


def test_gate_scale_shortcut_would_be_wrong():
    """Taking the gate's scale_2 for both halves (the engines' [:, 0]) scales up by s_g/s_u."""
    gate = from_modelopt(HAND_WEIGHT, np.array([[0x38]], np.uint8), 0.5, 1.0)
    up = from_modelopt(HAND_WEIGHT, HAND_SCALE, 0.25, 1.0)
    fused = fuse_gate_up(gate, up)
    shortcut_up = dequantize(up.b, up.sfb) * gate.weight_scale_2
    assert np.abs(shortcut_up - checkpoint_weight(up)).max() > 0
    np.testing.assert_array_equal(checkpoint_weight(fused)[1:], checkpoint_weight(up))


def test_fuse_type_and_shape_errors():
    w = from_modelopt(HAND_WEIGHT, HAND_SCALE, 0.5, 1.0)
    stack = from_modelopt_experts(HAND_WEIGHT[None], HAND_SCALE[None], 0.5, 1.0)
    with pytest.raises(TypeError, match="both be ExpertWeights or both be ExpertStack"):
        fuse_gate_up(w, stack)
    wide = from_modelopt(np.zeros((1, 16), np.uint8), np.full((1, 2), 0x38, np.uint8), 0.5, 1.0)
    with pytest.raises(InvalidProblemError, match="same experts and k"):
        fuse_gate_up(w, wide)


# round_to_e4m3 ----------------------------------------------------------------------


def test_round_to_e4m3():
    finite = E4M3_VALUES[np.r_[0:0x7F, 0x80:0xFF]]
    np.testing.assert_array_equal(round_to_e4m3(finite), float_to_e4m3(finite))
    assert round_to_e4m3([1.0625, 1.1875, 1.2]).tolist() == [0x38, 0x3A, 0x3A]  # ties to even
    assert round_to_e4m3([2**-10, 3 * 2**-10, 2**-11]).tolist() == [0x00, 0x02, 0x00]
    assert round_to_e4m3([1000.0, -1000.0, -0.75]).tolist() == [0x7E, 0xFE, 0xB4]
    with pytest.raises(ValueError, match="NaN"):
        round_to_e4m3([np.nan])


# bad inputs -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "pattern"),
    [
        ({"weight": HAND_WEIGHT.astype(np.int8)}, TypeError, "weight must be packed FP4 bytes"),
        ({"weight": HAND_WEIGHT[0]}, InvalidProblemError, r"weight must be a non-empty \(n, k/2\)"),
        ({"weight": np.zeros((1, 4), np.uint8)}, InvalidProblemError, "k = 2 x 4 = 8"),
        ({"weight_scale": HAND_SCALE.astype(np.float32)}, TypeError, "weight_scale must be E4M3"),
        ({"weight_scale": np.zeros((1, 2), np.uint8)}, InvalidProblemError, r"weight_scale .* must have shape \(1, 1\)"),
        ({"weight_scale": np.array([[0x7F]], np.uint8)}, InvalidProblemError, r"expert 0: weight_scale\[0, 0\] is the E4M3 NaN code 0x7F"),
        ({"weight_scale_2": 0.0}, InvalidProblemError, "weight_scale_2 must be finite and > 0, got 0.0"),
        ({"weight_scale_2": -1.0}, InvalidProblemError, "weight_scale_2 must be finite and > 0"),
        ({"input_scale": np.inf}, InvalidProblemError, "input_scale must be finite and > 0, got inf"),
        ({"input_scale": np.nan}, InvalidProblemError, "input_scale must be finite and > 0"),
        ({"input_scale": np.array([0.5, 0.5])}, InvalidProblemError, r"input_scale must have shape \(\), \(1,\)"),
        ({"input_scale": np.uint8(1)}, TypeError, "input_scale must be a float scale"),
        ({"input_scale": 1e30, "weight_scale_2": 1e30}, InvalidProblemError, "expert 0: alpha .* not a finite nonzero float32"),
    ],
)  # fmt: skip
def test_modelopt_bad_inputs(kwargs, error, pattern):
    args = {
        "weight": HAND_WEIGHT,
        "weight_scale": HAND_SCALE,
        "weight_scale_2": 0.25,
        "input_scale": 0.5,
        **kwargs,
    }
    with pytest.raises(error, match=pattern):
        from_modelopt(**args)


def test_stack_bad_inputs_name_the_expert():
    weight = np.zeros((3, 4, 8), np.uint8)
    scales = np.full((3, 4, 1), 0x38, np.uint8)
    with pytest.raises(InvalidProblemError, match=re.escape("weight_scale_2[2] must be finite")):
        from_modelopt_experts(weight, scales, [0.1, 0.1, 0.0], 1.0)
    with pytest.raises(InvalidProblemError, match=re.escape("(), (1,), (3,) or (3, 1)")):
        from_modelopt_experts(weight, scales, [0.1, 0.1], 1.0)
    bad = scales.copy()
    bad[1, 2, 0] = 0xFF
    with pytest.raises(InvalidProblemError, match=re.escape("expert 1: weight_scale[2, 0]")):
        from_modelopt_experts(weight, bad, 0.1, 1.0)
    with pytest.raises(InvalidProblemError, match=re.escape("(3, 4, 1)")):
        from_modelopt_experts(weight, scales[:, :, :0], 0.1, 1.0)
    with pytest.raises(IndexError, match="expert 3 out of range"):
        from_modelopt_experts(weight, scales, 0.1, 1.0).expert(3)


def test_compressed_tensors_bad_inputs_use_its_names():
    with pytest.raises(TypeError, match="weight_packed must be packed FP4 bytes"):
        from_compressed_tensors(HAND_WEIGHT.astype(np.int8), HAND_SCALE, 4.0, 2.0)
    with pytest.raises(InvalidProblemError, match="input_global_scale must be finite and > 0"):
        from_compressed_tensors(HAND_WEIGHT, HAND_SCALE, 4.0, 0.0)
    with pytest.raises(InvalidProblemError, match=re.escape("weight_global_scale[1]")):
        from_compressed_tensors_experts(
            np.stack([HAND_WEIGHT] * 2), np.stack([HAND_SCALE] * 2), [4.0, -4.0], 2.0
        )
