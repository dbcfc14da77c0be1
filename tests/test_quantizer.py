"""The activation quantizer on the CPU: plan words and checks (nvfp4_aot.quantize_layout,
nvfp4_aot.quantizer), the row map (nvfp4_aot.quantize_routing), the baked variants' ABI,
the kernel's PTX, and whole runs against a fake driver that executes the kernel's
algorithm in numpy: the words it reads, its unit loop, expert search, clamps and
addresses, written line by line after nvfp4_aot/kernels/nvfp4_quantize.py, with the
reference for the block math. The kernel's bytes themselves are checked on the GPU
(tests/test_quantizer_gpu.py)."""

from __future__ import annotations

import ctypes
import os
import struct
from fractions import Fraction

import numpy as np
import pytest

from fake_driver import FakeDriver, installed
from nvfp4_aot import loader
from nvfp4_aot.blocked import blocked_scale_bytes
from nvfp4_aot.errors import InvalidProblemError
from nvfp4_aot.intmath import round_up
from nvfp4_aot.kernels import family_named
from nvfp4_aot.manifest import QUANTIZE_INPUT_KINDS, ROLE_QUANTIZE
from nvfp4_aot.moe_layout import contiguous_scale_rows, scale_offsets
from nvfp4_aot.quantize import quantize
from nvfp4_aot.quantize_layout import (
    FORM_CONTIGUOUS,
    FORM_MASKED,
    Q_SEGMENT_BLOCKS,
    Q_WORDS,
    R_GLOBAL_SCALE,
    R_INDEX,
    R_OUT,
    R_ROUTING,
    R_SCALES,
    R_WORDS,
    R_X,
    RUN_FIELDS,
    SEGMENT_BLOCKS,
    QuantizeLayout,
    unit_blocks,
)
from nvfp4_aot.quantize_routing import expected_outputs, row_map
from nvfp4_aot.quantizer import QuantizePlan, make_problem
from ptx_interpreter import PtxBlock
from support import FakeArray, kernel_params_of

MANIFEST = loader.load_manifest()  # the committed artifacts
SF_ROWS = 128


def _variant(arch="sm_90a"):
    (variant,) = [v for v in MANIFEST.variants if v.role == ROLE_QUANTIZE and v.arch == arch]
    return variant


# the baked variants ----------------------------------------------------------------------


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a", "sm_103a"])
def test_every_arch_has_one_quantizer_with_a_tiny_abi(arch):
    v = _variant(arch)
    assert v.family == "nvfp4_quantize" and v.num_groups == 1
    assert v.input_kinds == QUANTIZE_INPUT_KINDS
    assert [(p.offset, p.size) for p in v.params] == [(0, 8), (8, 8)]
    assert v.slots_for("plan") == [(0, 8)] and v.slots_for("run") == [(8, 8)]
    assert v.grid[0].input == "num_ctas" and v.block == (256, 1, 1)  # 8 warps a CTA
    assert v.cluster == (1, 1, 1)
    assert v.blocks_per_sm == family_named("nvfp4_quantize").blocks_per_sm == 2


def _kernel_module():
    """The quantizer's kernel module (its PTX strings); it imports the CuTe DSL."""
    pytest.importorskip("cutlass", reason="the build extra (nvidia-cutlass-dsl) is not installed")
    from nvfp4_aot.kernels import nvfp4_quantize

    return nvfp4_quantize


def test_the_block_ptx_follows_the_reference_rules():
    kernel = _kernel_module()  # PTX text only: no DSL run

    for fp16 in (False, True):
        scale, codes = kernel._SCALE_PTX[fp16], kernel._CODES_PTX[fp16]
        tables = (kernel._MULTIPLIER_PTX, kernel._RECIPROCAL_PTX, kernel._FAST_MULTIPLIER_PTX)
        for ptx in (scale, codes, *tables):
            assert "div.full" not in ptx and "approx" not in ptx and ".ftz" not in ptx
        assert "div" not in scale and "div" not in codes  # no slow-path branch in a block
        assert kernel._MULTIPLIER_PTX.count("div.rn.f32") == 1
        assert "rcp.rn.f32" in kernel._RECIPROCAL_PTX and "div" not in kernel._FAST_MULTIPLIER_PTX
        assert codes.count("mul.rn.f32 q,") == 16 and codes.count("fma.rn.sat.f32") == 16 * 2
        assert scale.count("max.NaN.") == 8
        # a NaN in the block reaches the conversion (its NaN is 0x7F): no compare and select
        assert "cvt.rn.satfinite.e4m3x2.f32" in scale and "fma.rn.f32 s6, y," in scale
        assert "setp" not in scale and "selp" not in scale
        assert ("cvt.f32.f16 x" in codes) == fp16


def _f32(pattern: str) -> np.float32:
    return np.frombuffer(int(pattern[2:], 16).to_bytes(4, "little"), np.float32)[0]


def e2m1_code_of_the_kernel(q: np.ndarray) -> np.ndarray:
    """The kernel's magnitude code of float32 q >= 0 (or NaN): its code PTX (three
    saturated pieces rounded onto 2^23), interpreted."""
    kernel = _kernel_module()

    q = np.asarray(q, np.float32)
    result = PtxBlock(kernel._CODE_PTX).run({"$1": q.view(np.uint32)})
    return result["$0"].astype(np.uint8)


def test_the_kernels_e2m1_steps_are_the_reference_rounding():
    """Every float32 within 2^16 ulps of a threshold or grid point, 2^22 random ones in
    [0, 8], and the specials (NVFP4_AOT_EXHAUSTIVE=1: every non-negative float32 and NaN
    bit pattern, 2^31 values)."""
    from nvfp4_aot.quantize import float_to_fp4_rne_sat

    rng = np.random.default_rng(0)
    points = np.float32([0.25, 0.5, 0.75, 1, 1.25, 1.5, 1.75, 2, 2.5, 3, 3.5, 4, 5, 6, 8])
    near = (points.view(np.int32)[:, None] + np.arange(-(2**16), 2**16)[None, :]).ravel()
    chunks = [near.astype(np.int32).view(np.float32)]
    chunks.append(rng.uniform(0, 8, 2**22).astype(np.float32))
    chunks.append(np.float32([0, 1e-45, 1e-38, 8.5, 100, 3e38, np.inf, np.nan]))
    if os.environ.get("NVFP4_AOT_EXHAUSTIVE") == "1":
        chunks = [np.arange(s, s + 2**24, dtype=np.uint32).view(np.float32)
                  for s in range(0, 2**31, 2**24)] + chunks  # fmt: skip
    for q in chunks:
        expected = float_to_fp4_rne_sat(q) & 7
        assert np.array_equal(e2m1_code_of_the_kernel(q), expected)


def multiplier_table(kernel, g: np.float32) -> np.ndarray:
    """The CTA's multiplier table (float32 bits) as the kernel builds it: the scale bytes'
    reciprocals, then Markstein's correction for g in the fast range, the division
    elsewhere."""
    decoded = PtxBlock(kernel._RECIPROCAL_PTX).run({"$2": np.arange(256)})
    g_bits = np.full(256, np.float32(g).view(np.uint32))
    low, high = kernel.FAST_G_EXPONENTS
    if low <= (int(g_bits[0]) >> 23) & 255 <= high:
        inputs = {"$1": g_bits, "$2": decoded["$0"], "$3": decoded["$1"]}
        return PtxBlock(kernel._FAST_MULTIPLIER_PTX).run(inputs)["$0"]
    return PtxBlock(kernel._MULTIPLIER_PTX).run({"$1": g_bits, "$2": decoded["$0"]})["$0"]


def test_the_fast_multiplier_is_the_division():
    """g / e4m3(sf) from the reciprocal taken before g is known: for every E4M3 mantissa
    of v and 2^20 random float32 mantissas of g with the ends of the binade
    (NVFP4_AOT_EXHAUSTIVE=1: all 2^23), which decides it for every g of the fast range
    (powers of two scale every step exactly while q, r and m stay normal); then every
    scale byte (zeros, negatives and NaNs give 0) with random g across the range and its
    ends."""
    from nvfp4_aot.layouts import E4M3_FLOAT32

    kernel = _kernel_module()
    decoded = PtxBlock(kernel._RECIPROCAL_PTX).run({"$2": np.arange(256)})
    v = decoded["$0"].astype(np.uint32).view(np.float32)
    assert np.array_equal(v, E4M3_FLOAT32, equal_nan=True)
    with np.errstate(all="ignore"):
        assert np.array_equal(decoded["$1"].astype(np.uint32).view(np.float32), 1 / v,
                              equal_nan=True)  # fmt: skip
    fast = PtxBlock(kernel._FAST_MULTIPLIER_PTX)

    def check(g: np.ndarray, byte: np.ndarray) -> None:
        inputs = {"$1": g.view(np.uint32), "$2": decoded["$0"][byte], "$3": decoded["$1"][byte]}
        got = fast.run(inputs)["$0"].astype(np.uint32).view(np.float32)
        with np.errstate(all="ignore"):
            expected = np.where(v[byte] > 0, g / v[byte], np.float32(0)).astype(np.float32)
        bad = np.nonzero(got.view(np.uint32) != expected.view(np.uint32))[0]
        assert len(bad) == 0, (
            f"g={g[bad[0]]!r} sf={byte[bad[0]]:#x}: {got[bad[0]]!r}, g / v {expected[bad[0]]!r}"
        )

    rng = np.random.default_rng(5)
    mantissas = rng.integers(0, 2**23, 2**20, dtype=np.uint32)
    if os.environ.get("NVFP4_AOT_EXHAUSTIVE") == "1":
        mantissas = np.arange(2**23, dtype=np.uint32)
    mantissas = np.concatenate([mantissas, np.uint32([0, 1, 2**22, 2**23 - 1])])
    g = (mantissas | np.uint32(127 << 23)).view(np.float32)  # [1, 2)
    for byte in range(0x38, 0x40):  # e4m3 1.0 ... 1.875: every mantissa of v
        check(g, np.full(len(g), byte))
    low, high = kernel.FAST_G_EXPONENTS
    exponents = rng.integers(low, high + 1, 2**20, dtype=np.uint32)
    signs = rng.integers(0, 2, 2**20, dtype=np.uint32) << np.uint32(31)
    random_g = signs | exponents << np.uint32(23) | rng.integers(0, 2**23, 2**20, dtype=np.uint32)
    ends = np.uint32([low << 23, (high << 23) | (2**23 - 1)])
    ends = np.concatenate([ends, ends | np.uint32(1 << 31)])
    g = np.concatenate([random_g, np.repeat(ends, 256)]).view(np.float32)
    check(g, np.concatenate([rng.integers(0, 256, 2**20), np.tile(np.arange(256), 4)]))


def test_the_scale_bytes_one_sixth_is_a_float32_pair():
    """y / 6 is taken as y h + RN(y l): h = RD(1/6), l = RN(1/6 - h) > 0 (so that +inf
    stays +inf), h + l within 2^-50 of 1/6 (the sweep below is the proof for every y)."""
    kernel = _kernel_module()
    h, low = _f32(kernel._SIXTH_HI), _f32(kernel._SIXTH_LO)
    sixth = Fraction(1, 6)
    assert Fraction(float(h)) < sixth < Fraction(float(np.nextafter(h, np.float32(1))))
    assert low > 0 and low == np.float32(float(sixth - Fraction(float(h))))
    assert abs(Fraction(float(h)) + Fraction(float(low)) - sixth) < Fraction(1, 2**50)


def test_the_kernels_scale_byte_is_the_reference_rounding_of_y_over_6():
    """The scale byte's PTX (g * amax = y -> E4M3(RN(y / 6)) without a division) for
    every float32 y >= 0 within 2^16 ulps of an E4M3 tie or grid point times 6, 2^22
    random ones, the ends of the ranges and the specials (NVFP4_AOT_EXHAUSTIVE=1: every
    non-negative float32 and NaN bit pattern)."""
    from nvfp4_aot.layouts import E4M3_FLOAT32
    from nvfp4_aot.quantize import float_to_e4m3_rn_sat

    kernel = _kernel_module()
    grid = E4M3_FLOAT32[np.isfinite(E4M3_FLOAT32) & (E4M3_FLOAT32 >= 0)].astype(np.float64)
    points = np.concatenate([grid, (grid[1:] + grid[:-1]) / 2, [464.0, 480.0, 2.0**-10]])
    y_points = (points * 6).astype(np.float32)
    near = (y_points.view(np.int32)[:, None] + np.arange(-(2**16), 2**16)[None, :]).ravel()
    rng = np.random.default_rng(3)
    chunks = [near[near >= 0].astype(np.int32).view(np.float32)]
    chunks.append(rng.integers(0, 0x7F800001, 2**22, dtype=np.uint32).view(np.float32))
    chunks.append(np.float32([0, 1e-45, 1e-38, 2.0**-126, 6 * 2.0**-126, 3e38, 3.4028235e38,
                              np.inf, np.nan]))  # fmt: skip
    if os.environ.get("NVFP4_AOT_EXHAUSTIVE") == "1":
        chunks = [np.arange(s, s + 2**24, dtype=np.uint32).view(np.float32)
                  for s in range(0, 2**31, 2**24)] + chunks  # fmt: skip
    program = PtxBlock(kernel._SCALE_BYTE_PTX)
    for y in chunks:
        with np.errstate(all="ignore"):
            expected = float_to_e4m3_rn_sat((y.astype(np.float64) / 6).astype(np.float32))
        got = program.run({"$1": y.view(np.uint32)})
        bad = np.nonzero((got["$0"] != expected) | (got["$0"] > 0xFF))[0]  # the 16 bits: the byte
        assert len(bad) == 0, (
            f"y={y[bad[0]]!r}: kernel {int(got['$0'][bad[0]]):#x}, reference {expected[bad[0]]:#x}"
        )


# plan-time checks --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, message",
    [(dict(k=40, rows=8), r"k must be a multiple of 16, got 40"),
     (dict(k=32), r"the plain form needs rows"),
     (dict(k=32, rows=4, capacity=8), r"capacity must be rows = 4"),
     (dict(k=32, rows=4, experts=2), r"the plain form has one expert"),
     (dict(k=32, form="contiguous", rows=4), r"the contiguous form needs capacity"),
     (dict(k=32, form="masked", experts=2), r"the masked form needs capacity"),
     (dict(k=32, form="masked", experts=2, capacity=4, rows=9), r"rows must be experts \* capacity = 8"),
     (dict(k=32, form="sparse", rows=4), r"form must be one of"),
     (dict(k=32, rows=4, dtype="float32"), r"dtype must be one of"),
     (dict(k=32, rows=4, row_stride=36), r"row_stride must be >= k = 32 and a multiple of 8"),
     (dict(k=32, rows=4, row_stride=16), r"row_stride must be >= k"),
     (dict(k=32, rows=0), r"rows must be an int >= 1, got 0"),
     (dict(k=32, form="contiguous", capacity=8, experts=1025), r"experts must be <= 1024"),
     (dict(k=16384, rows=2**18), r"do not fit int32"),
     (dict(k=32, form="contiguous", capacity=2**25, experts=128), r"must fit int32")],
)  # fmt: skip
def test_plan_arguments_are_checked(kwargs, message):
    k = kwargs.pop("k")
    args = dict(form="plain", rows=None, capacity=None, experts=1, dtype="bfloat16",
                row_stride=None) | kwargs  # fmt: skip
    with pytest.raises(InvalidProblemError, match=message):
        make_problem(k, **args)


def test_scale_rows_match_the_gemm_layouts():
    plain = make_problem(64, "plain", 300, None, 1, "bfloat16", None)
    assert plain.operand_bytes()["scales"] == blocked_scale_bytes(300, 64)
    contiguous = make_problem(2080, "contiguous", 50, 300, 8, "float16", None)
    assert contiguous.scale_rows == contiguous_scale_rows(300, 8)
    assert contiguous.operand_bytes()["scales"] == contiguous_scale_rows(300, 8) * 132
    masked = make_problem(2080, "masked", None, 100, 8, "float16", None)
    assert masked.operand_bytes()["scales"] == 8 * blocked_scale_bytes(100, 2080)
    assert masked.operand_bytes()["out"] == 8 * 100 * 1040


def test_plan_words_and_grid():
    problem = make_problem(2080, "contiguous", 1000, 3000, 64, "float16", 2096)
    layout = QuantizeLayout.build(problem, _variant(), sm_count=132, ring_slots=4)
    words = struct.unpack_from(f"<{Q_WORDS}q", layout.static_tables(1 << 40))
    assert words[:14] == (
        FORM_CONTIGUOUS, 64, 3000, 1000, 2080, 130, 132, 2, problem.scale_rows * 2, 4192,
        1040, 33, 0, 1,
    )  # fmt: skip
    assert words[Q_SEGMENT_BLOCKS] == 128 == layout.problem.segment_blocks
    units = problem.scale_rows * 2  # a warp a unit, at most the variant's CTAs per SM
    warps, per_sm = _variant().block[0] // 32, _variant().blocks_per_sm
    assert layout.launch.num_ctas == min(round_up(units, warps) // warps, per_sm * 132)
    assert layout.launch.grid == (layout.launch.num_ctas, 1, 1)
    inputs = layout.kernel_inputs(layout.launch, 1 << 40, 2)
    assert inputs == {
        "plan": 1 << 40,
        "run": (1 << 40) + layout.slot_offset(2),
        "num_ctas": layout.launch.num_ctas,
    }
    assert len(layout.run_table([1, 2, 3, 4, 5, 6])) == layout.slot_bytes
    small = QuantizeLayout.build(make_problem(32, "plain", 1, None, 1, "bfloat16", None),
                                 _variant(), 132, 1)  # fmt: skip
    # the grid covers the plan's scale rows (T = 1: 128), whose padding its warps zero
    assert small.launch.num_ctas == 128 // warps
    assert small.problem.segment_blocks == 32  # one unit: the narrowest


def test_unit_width_follows_the_plans_token_rows():
    """128-block units where the plan's most token rows give half the grid's warps a
    unit, 64 or 32 at decode sizes; the plan word carries the width, the units and
    segments follow it; any width can be asked for, no other."""
    warps = 2 * 132 * 8

    def width(k, form="plain", rows=None, capacity=None, experts=1):
        return unit_blocks(make_problem(k, form, rows, capacity, experts, "bfloat16", None), warps)

    assert width(4096, rows=1024) == width(7168, rows=1024) == width(2048, rows=4096) == 128
    assert width(2048, rows=1024) == 64  # 1024 units of 128 blocks: under half the warps
    assert width(4096, rows=128) == width(4096, rows=1) == 32
    assert width(2048, "contiguous", capacity=16 * 8, experts=128) == 32
    assert width(7168, "contiguous", capacity=64 * 8, experts=256) == 128
    assert width(2048, "masked", capacity=8, experts=128) == 64
    problem = make_problem(2080, "plain", 77, None, 1, "bfloat16", None)
    for blocks in (128, 64, 32):
        layout = QuantizeLayout.build(problem, _variant(), 132, 1, segment_blocks=blocks)
        words = struct.unpack_from(f"<{Q_WORDS}q", layout.static_tables(1 << 40))
        segments = -(-132 // blocks)
        assert (words[7], words[8], words[Q_SEGMENT_BLOCKS]) == (segments, 128 * segments, blocks)
    with pytest.raises(InvalidProblemError, match="segment_blocks must be one of"):
        QuantizeLayout.build(problem, _variant(), 132, 1, segment_blocks=48)


# the row map ----------------------------------------------------------------------------------


def test_row_map_by_hand():
    problem = make_problem(64, "contiguous", None, 400, 5, "float16", None)
    counts = [1, 0, 129, 128, 100]
    routing = np.concatenate([[0], np.cumsum(counts)])
    rows = row_map(problem, routing)
    starts = scale_offsets(counts)
    assert starts == [0, 128, 128, 384, 512]
    assert rows.scale_rows.tolist() == list(range(128)) + list(range(128, 640))
    assert rows.out_rows[:2].tolist() == [0, -1]
    assert (rows.out_rows[128 : 128 + 129] == np.arange(1, 130)).all()
    masked = make_problem(32, "masked", None, 200, 3, "float16", None)
    rows = row_map(masked, [5, -4, 1000])  # no padding rows: counts 5, 0, 200 (clamped)
    assert rows.scale_rows.tolist() == list(range(5)) + list(range(512, 712))
    assert rows.out_rows.tolist() == list(range(5)) + list(range(400, 600))


def test_expected_outputs_of_the_plain_form_are_the_reference():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((200, 96)).astype(np.float16)
    problem = make_problem(96, "plain", 200, None, 1, "float16", None)
    expected = expected_outputs(problem, x, np.float32(3.0))
    q = quantize(x, 3.0)
    assert (expected.scales == q.scales_blocked).all() and expected.scales_written.all()
    assert (expected.out == q.packed.ravel()).all() and expected.out_written.all()


# whole runs against a fake driver that executes the kernel's algorithm --------------------


def _clamp(value, low, high):
    return min(max(value, low), high)


def emulate_kernel(memory, plan_address: int, run_address: int, num_ctas: int) -> None:
    """What nvfp4_quantize's kernel writes, following its code: the words it reads,
    expert_segments, locate (the binary search), the unit loop's addresses."""
    plan = struct.unpack("<16q", memory.read(plan_address, 8 * Q_WORDS))
    run = struct.unpack("<8Q", memory.read(run_address, 8 * R_WORDS))
    form, experts, capacity, input_rows, k, blocks, blocks_padded = plan[:7]
    segments, units, row_stride, out_row_bytes, col_tiles, expert_scale_rows, fp16 = plan[7:14]
    assert units % segments == 0 and num_ctas >= 1
    s_seg, s_first, s_rows = [], [], []
    if form == FORM_CONTIGUOUS:
        offsets = np.frombuffer(memory.read(run[R_ROUTING], 4 * (experts + 1)), np.int32)
        carried = 0
        for e in range(experts):
            first = _clamp(int(offsets[e]), 0, capacity)
            rows = _clamp(int(offsets[e + 1]), first, capacity) - first
            s_seg.append(carried)
            s_first.append(first)
            s_rows.append(rows)
            carried += round_up(rows, SF_ROWS)
        s_seg.append(carried)
    g = np.frombuffer(memory.read(run[R_GLOBAL_SCALE], 4), np.float32)[0]
    token_rows = []  # (scale row, input row, output row)
    for s in range(units // segments):
        kind, in_row, out_row = None, 0, 0
        if form == FORM_CONTIGUOUS:
            low, length = 0, experts
            for _step in range((1024).bit_length()):
                half = length // 2
                if length > 0:
                    if s_seg[low + half] <= s:
                        low, length = low + half + 1, length - half - 1
                    else:
                        length = half
            expert = low - 1
            r = s - s_seg[expert]
            if s < s_seg[experts] and r >= 0:
                kind = "padding"
                if r < s_rows[expert]:
                    kind, out_row = "tokens", s_first[expert] + r
                    in_row = out_row
                    if run[R_INDEX]:
                        entry = memory.read(run[R_INDEX] + 4 * out_row, 4)
                        in_row = _clamp(struct.unpack("<i", entry)[0], 0, input_rows - 1)
        elif form == FORM_MASKED:
            expert, r = divmod(s, expert_scale_rows)
            count = struct.unpack("<i", memory.read(run[R_ROUTING] + 4 * expert, 4))[0]
            rows = _clamp(count, 0, capacity)
            if r < rows:  # and no padding rows
                kind, out_row, in_row = "tokens", expert * capacity + r, expert * capacity + r
        else:
            kind = "tokens" if s < capacity else "padding"
            out_row = in_row = s
        if kind == "tokens":
            token_rows.append((s, in_row, out_row))
        elif kind == "padding":
            for b in range(blocks_padded):
                memory.write(_scale_address(run[R_SCALES], s, b, col_tiles), b"\0")
    if not token_rows:
        return
    dtype = np.float16 if fp16 else np.uint16
    x = np.stack([
        np.frombuffer(memory.read(run[R_X] + i * row_stride, 2 * k), dtype)
        for _s, i, _o in token_rows
    ])  # fmt: skip
    q = quantize(x, g)
    for (s, _i, o), codes, scales in zip(token_rows, q.packed, q.scales):
        memory.write(run[R_OUT] + o * out_row_bytes, codes.tobytes())
        for b in range(blocks_padded):
            value = int(scales[b]) if b < blocks else 0
            memory.write(_scale_address(run[R_SCALES], s, b, col_tiles), bytes([value]))


def _scale_address(scales: int, s: int, b: int, col_tiles: int) -> int:
    """The kernel's blocked-scale address of (scale row s, block b)."""
    row = scales + (s // SF_ROWS) * col_tiles * 512 + (s % 32) * 16 + ((s % SF_ROWS) // 32) * 4
    return row + b // 4 * 512 + b % 4


class QuantizerFake(FakeDriver):
    """A fake whose quantizer launches (eager or replayed from a graph) run
    :func:`emulate_kernel` on the simulated memory."""

    def __init__(self, **kwargs):
        kwargs.setdefault("kernel_params", kernel_params_of(MANIFEST))
        kwargs.setdefault("capability", (9, 0))
        super().__init__(**kwargs)
        self.emulate = True  # False: record launches only (operands at made-up addresses)

    def write(self, address: int, data: bytes) -> None:
        self._write(address, data)

    def cuMemcpyDtoH(self, dst, src, size):
        ctypes.memmove(dst, self.read(int(src), size), size)
        return (0,)

    def cuStreamSynchronize(self, stream):
        return (0,)

    def _run(self, launch) -> None:
        if not self.emulate:
            return
        plan_ptr, run_ptr = (struct.unpack("<Q", p)[0] for p in launch.params)
        emulate_kernel(self, plan_ptr, run_ptr, launch.grid[0])

    def cuLaunchKernelEx(self, config, function, kernel_params, extra):
        result = super().cuLaunchKernelEx(config, function, kernel_params, extra)
        if int(config.hStream) not in self._capturing:
            self._run(self.launches[-1])
        return result

    def cuGraphLaunch(self, executable, stream):
        before = len(self.launches)
        result = super().cuGraphLaunch(executable, stream)
        for launch in self.launches[before:]:
            self._run(launch)
        return result


@pytest.fixture
def fake():
    with installed(QuantizerFake()) as driver_fake:
        yield driver_fake


def _upload(fake, array) -> int:
    data = np.ascontiguousarray(array).tobytes()
    pointer = fake.cuMemAlloc(max(len(data), 1))[1]
    fake.write(pointer, data)
    return pointer


def _buffer(fake, size: int, fill: int = 0xA5) -> int:
    pointer = fake.cuMemAlloc(size)[1]
    fake.write(pointer, bytes([fill]) * size)
    return pointer


def _check_run(fake, problem, pointers, x, g, routing=None, index=None, fill=0xA5):
    expected = expected_outputs(problem, x, np.float32(g), routing, index)
    sizes = problem.operand_bytes()
    for name, want, mask in (("out", expected.out, expected.out_written),
                             ("scales", expected.scales, expected.scales_written)):  # fmt: skip
        got = np.frombuffer(fake.read(pointers[name], sizes[name]), np.uint8)
        assert (got == np.where(mask, want, np.uint8(fill))).all(), name


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_plain_run_writes_the_reference_bytes(fake, dtype):
    rows, k, stride = 130, 96, 104
    rng = np.random.default_rng(1)
    values = rng.standard_normal((rows, stride)).astype(np.float32)
    x = (
        values.astype(np.float16)
        if dtype == "float16"
        else (values.view(np.uint32) >> 16).astype(np.uint16)
    )
    with QuantizePlan(k, rows=rows, dtype=dtype, row_stride=stride) as plan:
        pointers = {
            "x": _upload(fake, x),
            "out": _buffer(fake, rows * k // 2),
            "scales": _buffer(fake, plan.scale_bytes),
            "global_scale": _upload(fake, np.float32([0.5])),
        }
        plan.run(**pointers)
        _check_run(fake, plan.problem, pointers, x[:, :k], 0.5)
        assert len(fake.launches) == 1 and fake.launches[0].block == plan.layout.variant.block


def test_contiguous_graph_replays_read_new_routings(fake):
    experts, tokens, capacity, k = 6, 50, 300, 2080
    rng = np.random.default_rng(2)
    x = rng.standard_normal((tokens, k)).astype(np.float16)
    with QuantizePlan(k, form="contiguous", rows=tokens, capacity=capacity, experts=experts,
                      dtype="float16") as plan:  # fmt: skip
        pointers = {
            "x": _upload(fake, x),
            "out": _buffer(fake, capacity * k // 2),
            "scales": _buffer(fake, plan.scale_bytes),
            "global_scale": _upload(fake, np.float32([2.0])),
            "routing": _buffer(fake, 4 * (experts + 1)),
            "index": _buffer(fake, 4 * capacity),
        }
        stream = fake.cuStreamCreate(0)[1]
        fake.cuStreamBeginCapture(stream, 0)
        plan.run(**pointers, stream=stream)
        graph = fake.cuGraphInstantiate(fake.cuStreamEndCapture(stream)[1], 0)[1]
        routings = [[0, 0, 100, 100, 250, 251, 300], [0, 300, 300, 300, 300, 300, 300],
                    [0] * 7, [-5, 400, 3, 2, 1000, -1, 7]]  # fmt: skip
        for routing in routings:
            index = rng.integers(-10, tokens + 10, size=capacity)
            fake.write(pointers["routing"], np.int32(routing).tobytes())
            fake.write(pointers["index"], np.int32(index).tobytes())
            for name in ("out", "scales"):
                size = plan.problem.operand_bytes()[name]
                fake.write(pointers[name], b"\xa5" * size)
            fake.cuGraphLaunch(graph, stream)
            _check_run(fake, plan.problem, pointers, x, 2.0, routing, index)


def test_masked_run_clamps_counts(fake):
    experts, max_m, k = 4, 70, 48
    rng = np.random.default_rng(3)
    x = rng.standard_normal((experts, max_m, k)).astype(np.float16)
    with QuantizePlan(k, form="masked", capacity=max_m, experts=experts, dtype="float16") as plan:
        routing = np.int32([3, -2, 1000, 70])
        pointers = {
            "x": _upload(fake, x),
            "out": _buffer(fake, experts * max_m * k // 2),
            "scales": _buffer(fake, plan.scale_bytes),
            "global_scale": _upload(fake, np.float32([1.0])),
            "routing": _upload(fake, routing),
        }
        plan.run(**pointers)
        _check_run(fake, plan.problem, pointers, x.reshape(-1, k), 1.0, routing)


# run-time checks -------------------------------------------------------------------------

BASE = 0x7000_0000_0000


def _operands(k=64, rows=100, x_typestr="<f2"):
    return {
        "x": FakeArray(BASE, (rows, k), x_typestr),
        "out": FakeArray(BASE + 0x1000_0000, (rows, k // 2), "|u1"),
        "scales": FakeArray(BASE + 0x2000_0000, (blocked_scale_bytes(rows, k),), "|u1"),
        "global_scale": FakeArray(BASE + 0x3000_0000, (1,), "<f4"),
    }


@pytest.mark.parametrize(
    "field, replacement, message",
    [("x", FakeArray(BASE, (100, 64), "|u1"), r"^x must have dtype float16 \(f2\), got u1"),
     ("x", FakeArray(BASE, (99, 64), "<f2"), r"^x must have shape \(100, 64\), got \(99, 64\)"),
     ("x", FakeArray(BASE, (100, 64), "<f2", strides=(256, 2)), r"^x must have strides \(64, 1\)"),
     ("x", FakeArray(BASE + 8, (100, 64), "<f2"), r"^x must be 16-byte aligned"),
     ("out", FakeArray(BASE, (100, 64), "|u1"), r"^out must be C-contiguous uint8 of shape \(100, 32\)"),
     ("out", FakeArray(BASE + 0x1000_0000, (100, 32), "|u1", readonly=True), r"^out is read-only"),
     ("scales", FakeArray(BASE + 0x2000_0000, (100,), "|u1"), r"^scales must hold at least 512 bytes"),
     ("global_scale", FakeArray(BASE + 0x3000_0000, (1,), "<f2"), r"^global_scale must have dtype float32"),
     ("global_scale", 0, r"^global_scale is a null pointer"),
     ("routing", FakeArray(BASE + 0x4000_0000, (2,), "<i4"), r"^routing is not an operand of the plain form"),
     ("index", 0x5000_0000_0000, r"^index is not an operand of the plain form"),
     ("out", BASE + 0x100, r"^out overlaps x"),
     ("scales", FakeArray(BASE + 0x2000_0000, (512,), "|u1", device=1), r"^scales is on device 1")],
)  # fmt: skip
def test_run_arguments_are_checked(fake, field, replacement, message):
    with QuantizePlan(64, rows=100, dtype="float16") as plan:
        operands = _operands() | {field: replacement}
        with pytest.raises(InvalidProblemError, match=message):
            plan.run(**operands)
        assert not fake.launches


def test_contiguous_and_masked_operand_checks(fake):
    with QuantizePlan(64, form="contiguous", rows=10, capacity=100, experts=4,
                      dtype="float16") as plan:  # fmt: skip
        operands = _operands(rows=100) | {
            "x": FakeArray(BASE, (10, 64), "<f2"),
            "scales": FakeArray(BASE + 0x2000_0000, (contiguous_scale_rows(100, 4) * 4,), "|u1"),
        }
        with pytest.raises(InvalidProblemError, match=r"^routing is a null pointer"):
            plan.run(**operands)
        routing = FakeArray(BASE + 0x4000_0000, (5,), "<i4")
        with pytest.raises(
            InvalidProblemError, match=r"the plan's rows \(10\) must be >= capacity"
        ):
            plan.run(**operands, routing=routing)
        with pytest.raises(InvalidProblemError, match=r"^index must be int32 index\[capacity\]"):
            plan.run(**operands, routing=routing, index=FakeArray(BASE + 0x5000_0000, (99,), "<i4"))
        with pytest.raises(InvalidProblemError, match=r"^routing must be int32 offsets\[E \+ 1\]"):
            plan.run(**operands, routing=FakeArray(BASE + 0x4000_0000, (4,), "<i4"))
    with QuantizePlan(64, form="masked", capacity=25, experts=4, dtype="float16") as plan:
        operands = _operands(rows=100) | {
            "x": FakeArray(BASE, (4, 25, 64), "<f2"),
            "out": FakeArray(BASE + 0x1000_0000, (4, 25, 32), "|u1"),
            "scales": FakeArray(BASE + 0x2000_0000, (4 * blocked_scale_bytes(25, 64),), "|u1"),
        }
        with pytest.raises(InvalidProblemError, match=r"^routing must be int32 masked_m\[E\]"):
            plan.run(**operands, routing=FakeArray(BASE + 0x4000_0000, (5,), "<i4"))
        with pytest.raises(InvalidProblemError, match=r"^index is not an operand of the masked"):
            plan.run(**operands, routing=BASE + 0x4000_0000, index=BASE + 0x5000_0000)
        # accepted (staged for a graph replay, not launched: nothing lives at BASE)
        plan.set_graph_operands(**operands, routing=FakeArray(BASE + 0x4000_0000, (4,), "<i4"))


def test_run_words_hold_the_addresses(fake):
    fake.emulate = False
    with QuantizePlan(64, rows=100, dtype="float16") as plan:
        plan.run(**_operands())
        (launch,) = fake.launches
        base = plan._launcher.base
        assert struct.unpack("<Q", launch.params[0])[0] == base  # the plan words
        words = struct.unpack_from(f"<{Q_WORDS}q", fake.read(base, 8 * Q_WORDS))
        assert words == tuple(plan.problem.plan_words())
        assert (
            launch.grid == (plan.layout.launch.num_ctas, 1, 1)
            and launch.block == plan.layout.variant.block
        )
    run = struct.unpack("<Q", launch.params[1])[0]
    assert RUN_FIELDS == ("x", "out", "scales", "global_scale", "routing", "index")
    # the fake's last async copy wrote the run words into that slot
    dst, data, _stream = fake.copies[-1]
    assert dst == run
    words = struct.unpack_from("<6Q", data)
    assert words == (BASE, BASE + 0x1000_0000, BASE + 0x2000_0000, BASE + 0x3000_0000, 0, 0)


def test_segment_covers_four_blocks_per_lane():
    assert SEGMENT_BLOCKS == 32 * 4
    assert (R_X, R_OUT, R_SCALES, R_GLOBAL_SCALE, R_ROUTING, R_INDEX) == tuple(range(6))
    assert FORM_MASKED == 2


# the block PTX, interpreted -------------------------------------------------------------------


def _hostile_blocks(count: int, dtype: str, rng) -> np.ndarray:
    """(count, 16) float32 blocks: wide-range random, zeros, -0, NaN, inf, subnormal,
    huge, and E2M1/E4M3 ties (for g = 1)."""
    x = (rng.standard_normal((count, 16)) * 10.0 ** rng.uniform(-4, 4, (count, 1))).astype(
        np.float32
    )
    kind = rng.integers(0, 12, count)
    x[kind == 0] = 0.0
    x[kind == 1] = -0.0
    x[kind == 2, rng.integers(0, 16)] = np.nan
    x[kind == 3, rng.integers(0, 16)] = np.inf
    x[kind == 4, rng.integers(0, 16)] = -np.inf
    x[kind == 5] *= 1e-40 if dtype == "bfloat16" else 1e-9
    x[kind == 6] = (
        np.clip(x[kind == 6] * 1e30, -6e4, 6e4) if dtype == "float16" else x[kind == 6] * 1e30
    )
    ties = np.float32([0, 0.25, 0.5, 0.75, 1, 1.25, 1.5, 1.75, 2, 2.5, 3, 3.5, 4, 5, 6])
    tie_rows = np.nonzero(kind >= 7)[0]
    values = ties[rng.integers(0, len(ties), (len(tie_rows), 16))]
    values *= np.where(rng.random(values.shape) < 0.5, -1, 1)
    values[:, 0] = 6
    x[tie_rows] = values * np.float32(2.0) ** rng.integers(-6, 7, (len(tie_rows), 1))
    return x


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_the_block_ptx_computes_the_reference_bytes(dtype):
    kernel = _kernel_module()

    rng = np.random.default_rng(11)
    blocks = _hostile_blocks(6000, dtype, rng)
    if dtype == "float16":
        with np.errstate(over="ignore"):
            bits = blocks.astype(np.float16).view(np.uint16)
    else:
        bits = (blocks.view(np.uint32) >> 16).astype(np.uint16)  # truncation keeps specials
    words = bits[:, 0::2].astype(np.uint64) | (bits[:, 1::2].astype(np.uint64) << np.uint64(16))
    fp16 = dtype == "float16"
    scale_ptx, codes_ptx = PtxBlock(kernel._SCALE_PTX[fp16]), PtxBlock(kernel._CODES_PTX[fp16])
    for g in (np.float32(1.0), np.float32(0.37), np.float32(3e-30), np.float32(2.5e36),
              np.float32(2.0**-116), np.float32(2.0**100)):  # fmt: skip
        g_bits = g.view(np.uint32)
        scale = scale_ptx.run(
            {f"${1 + i}": words[:, i] for i in range(8)} | {"$9": np.full(len(blocks), g_bits)}
        )
        got_scales = (scale["$0"] & np.uint64(0xFF)).astype(np.uint8)
        table = multiplier_table(kernel, g)  # the CTA's: the multiplier of every scale byte
        inputs = {f"${2 + i}": words[:, i] for i in range(8)}
        inputs["$10"] = table[got_scales.astype(np.intp)]
        result = codes_ptx.run(inputs)
        codes = np.stack([result["$0"], result["$1"]], axis=1).astype(np.uint32)
        got_packed = codes.view(np.uint8).reshape(len(blocks), 8)
        q = quantize(bits if dtype == "bfloat16" else bits.view(np.float16), g)
        bad = np.nonzero((got_packed != q.packed).any(axis=1) | (got_scales != q.scales[:, 0]))[0]
        assert len(bad) == 0, (
            f"g={g}: block {bad[0]} x={as_float32_row(bits[bad[0]], dtype)} "
            f"ptx codes {got_packed[bad[0]].tolist()} scale {got_scales[bad[0]]}, reference "
            f"{q.packed[bad[0]].tolist()} scale {q.scales[bad[0], 0]}"
        )


def as_float32_row(bits: np.ndarray, dtype: str) -> list[float]:
    from nvfp4_aot.quantize import as_float32

    return as_float32(bits if dtype == "bfloat16" else bits.view(np.float16)).tolist()
