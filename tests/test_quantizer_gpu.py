"""The NVFP4 activation quantizer on a real GPU: the kernel's bytes are the numpy
reference's bytes, and nothing outside what a run may write changes.

Every output buffer sits between two guard regions; before each run the buffer and its
guards are poisoned. After the run every byte is read back: the bytes the run writes
(:func:`nvfp4_aot.quantize_routing.expected_outputs`) must equal the reference's
(:func:`nvfp4_aot.quantize.quantize`) exactly, every other byte, guards included, must
still hold the poison. A mismatch reports the first differing byte: which buffer, row,
16-element block, the block's input values, g, and the expected and actual codes/scale.

Inputs mix wide-range random values with hostile blocks: all zero, -0.0, NaN, +-inf,
subnormals, values whose codes land exactly on E2M1 ties (g = 1), blocks whose scale lands
exactly on an E4M3 tie, and huge values (g * amax overflows). Forms: plain (T = 1 ..
16384, k = 16 .. 16384, k % 64 == 32 included, row strides > k), contiguous (an index
permutation, routings uniform / skewed / all to one expert / all empty, hostile offsets
and index entries) and masked (hostile counts); a CUDA graph captured once is replayed
with new routings, indices and global scales.
"""

from __future__ import annotations

import os
from functools import partial

import numpy as np
import pytest

from nvfp4_aot import driver
from nvfp4_aot.device_data import CapturedGraph
from nvfp4_aot.layouts import E4M3_VALUES, blocked_offset
from nvfp4_aot.quantize import as_float32, default_global_scale
from nvfp4_aot.quantize_layout import BLOCK_ROWS
from nvfp4_aot.quantize_routing import expected_outputs, row_map
from nvfp4_aot.quantizer import QuantizePlan

pytestmark = pytest.mark.gpu

GUARD = 4096  # bytes of poison before and after every output buffer
POISONS = (0xA5, 0x5A)
DTYPES = ("bfloat16", "float16")
ROUTINGS = int(os.environ.get("NVFP4_AOT_QUANT_ROUTINGS", 8))  # fewer under a sanitizer


# device buffers ----------------------------------------------------------------------------


class Guarded:
    """``size`` device bytes between two GUARD-byte regions, in one allocation; the
    buffer ``offset`` bytes past a 16-byte boundary."""

    def __init__(self, size: int, offset: int = 0):
        self.size = size
        self.allocation = driver.mem_alloc(size + 2 * GUARD + offset)
        self.base = self.allocation + offset
        self.pointer = self.base + GUARD

    def write(self, array: np.ndarray) -> None:
        array = np.ascontiguousarray(array)
        assert array.nbytes <= self.size, (array.nbytes, self.size)
        driver.memcpy_htod(self.pointer, array.ctypes.data, array.nbytes)

    def poison(self, value: int) -> None:
        driver.memset_d8(self.base, value, self.size + 2 * GUARD)

    def read_all(self) -> np.ndarray:
        """Guard, buffer, guard."""
        out = np.empty(self.size + 2 * GUARD, np.uint8)
        driver.memcpy_dtoh(out.ctypes.data, self.base, out.nbytes)
        return out

    def free(self) -> None:
        if self.allocation:
            driver.mem_free(self.allocation)
            self.allocation = 0


class Operands:
    """x, out, scales, g, routing and index of one plan in device memory."""

    def __init__(
        self, plan: QuantizePlan, x_host: np.ndarray, row_stride: int, scales_offset: int = 0
    ):
        p = plan.problem
        self.plan, self.problem = plan, p
        self.x_rows = x_host  # (rows, k), dense: what the reference reads
        strided = np.zeros((p.rows, row_stride), x_host.dtype)
        strided[:, : p.k] = x_host
        self.buffers = {}
        try:
            self.buffers["x"] = Guarded(strided.nbytes)
            self.buffers["x"].write(strided)
            self.buffers["out"] = Guarded(p.operand_bytes()["out"])
            self.buffers["scales"] = Guarded(p.operand_bytes()["scales"], scales_offset)
            self.buffers["global_scale"] = Guarded(4)
            self.buffers["routing"] = Guarded(4 * (p.experts + 1))
            self.buffers["index"] = Guarded(4 * p.capacity)
        except BaseException:
            self.free()
            raise

    def pointers(self, with_index: bool) -> dict:
        b = self.buffers
        form = self.problem.form
        return {
            "x": b["x"].pointer,
            "out": b["out"].pointer,
            "scales": b["scales"].pointer,
            "global_scale": b["global_scale"].pointer,
            "routing": None if form == "plain" else b["routing"].pointer,
            "index": b["index"].pointer if with_index else None,
        }

    def load(self, g, routing=None, index=None, poison: int = POISONS[0]) -> None:
        self.buffers["global_scale"].write(np.asarray([g], np.float32))
        if routing is not None:
            self.buffers["routing"].write(np.asarray(routing, np.int32))
        if index is not None:
            self.buffers["index"].write(np.asarray(index, np.int32))
        self.buffers["out"].poison(poison)
        self.buffers["scales"].poison(poison)
        driver.synchronize()

    def check(self, g, routing=None, index=None, poison: int = POISONS[0], label: str = ""):
        expected = expected_outputs(self.problem, self.x_rows, np.float32(g), routing, index)
        for name, want, mask in (
            ("out", expected.out, expected.out_written),
            ("scales", expected.scales, expected.scales_written),
        ):
            got = self.buffers[name].read_all()
            problem = _first_problem(got, want, mask, poison)
            if problem is not None:
                detail = self._explain(name, problem, expected, got, g, routing, index)
                pytest.fail(f"{label}: {name}: {detail}", pytrace=False)

    def _explain(self, name, problem, expected, got, g, routing, index) -> str:
        """The first wrong byte, with the row, block and input values it comes from."""
        where, offset, want, have = problem
        text = f"{where} byte {offset}: expected {want}, got {have} (g = {np.float32(g)!r})"
        if where != "buffer":
            return text
        p = self.problem
        rows = row_map(p, routing, index)
        kb = p.k // 16
        if name == "out":
            out_row, byte = divmod(offset, p.k // 2)
            block = 2 * byte // 16
            hit = np.nonzero(rows.out_rows == out_row)[0]
            text += f"; out row {out_row}, byte {byte} (elements {2 * byte}, {2 * byte + 1})"
        else:
            scale_rows = rows.scale_rows
            columns = np.arange(p.blocks_padded)
            table = blocked_offset(scale_rows[:, None], columns[None, :], kb)
            hit_rc = np.argwhere(table == offset)
            if len(hit_rc) == 0:
                return text + "; a byte no scale row of this routing covers"
            i, block = (int(v) for v in hit_rc[0])
            hit = [i]
            text += f"; scale row {int(scale_rows[i])}, block {block}"
            if rows.out_rows[i] < 0:
                return text + " (a padding row: its scales must be 0)"
        if len(hit) == 0:
            return text + "; no routed row writes this output row"
        in_row = int(rows.in_rows[hit[0]])
        if block >= kb:
            return text + f" (a padding column of input row {in_row}: must be 0)"
        values = as_float32(self.x_rows[in_row, 16 * block : 16 * block + 16])
        out = expected.out.reshape(p.output_rows, p.k // 2)
        out_row = int(rows.out_rows[hit[0]])
        want_codes = out[out_row, 8 * block : 8 * block + 8]
        have = ""
        if name == "out":
            start = GUARD + out_row * (p.k // 2) + 8 * block
            have = f" got {[f'0x{int(b):02x}' for b in got[start : start + 8]]}"
        want_sf = expected.scales[blocked_offset(rows.scale_rows[hit[0]], block, kb)]
        with np.errstate(all="ignore"):
            amax = np.float32(np.max(np.abs(values)))
            s = (np.float32(g) * amax) / np.float32(6)
        return (
            f"{text}; input row {in_row}, block {block}: x = {values.tolist()}, amax = {amax!r}, "
            f"(g * amax) / 6 = {s!r}, expected scale byte 0x{int(want_sf):02x}, expected codes "
            f"{[f'0x{int(b):02x}' for b in want_codes]}{have} (bytes: element 2j low nibble)"
        )

    def free(self) -> None:
        for buffer in self.buffers.values():
            buffer.free()
        self.buffers = {}

    def __enter__(self) -> Operands:
        return self

    def __exit__(self, *exc) -> None:
        self.free()


def _first_problem(got: np.ndarray, want: np.ndarray, mask: np.ndarray, poison: int):
    """(where, offset, expected, actual) of the first wrong byte, or None."""
    for where, region in (("guard before", got[:GUARD]), ("guard after", got[-GUARD:])):
        bad = np.nonzero(region != poison)[0]
        if len(bad):
            return where, int(bad[0]), f"poison 0x{poison:02x}", f"0x{int(region[bad[0]]):02x}"
    data = got[GUARD:-GUARD]
    expected = np.where(mask, want, np.uint8(poison))
    bad = np.nonzero(data != expected)[0]
    if len(bad):
        i = int(bad[0])
        want_text = f"0x{int(want[i]):02x}" if mask[i] else f"untouched (poison 0x{poison:02x})"
        return "buffer", i, want_text, f"0x{int(data[i]):02x}"
    return None


# inputs ------------------------------------------------------------------------------------


def _bits(values: np.ndarray, dtype: str) -> np.ndarray:
    """float32 values as the plan's input: float16, or bfloat16 as uint16 bits (RNE)."""
    values = np.asarray(values, np.float32)
    if dtype == "float16":
        with np.errstate(over="ignore"):
            return values.astype(np.float16)
    u = values.view(np.uint32).astype(np.uint64)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    nan = np.isnan(values)
    return np.where(nan, (u >> 16) | 0x40, rounded).astype(np.uint16)


def random_input(rows: int, k: int, dtype: str, rng, hostile: bool) -> np.ndarray:
    """(rows, k) in the plan's dtype: wide-range random values, hostile blocks mixed in."""
    scale = 10.0 ** rng.uniform(-3, 3, size=(rows, 1))
    if dtype == "float16":
        scale = 10.0 ** rng.uniform(-2, 2, size=(rows, 1))
    x = (rng.standard_normal((rows, k)) * scale).astype(np.float32)
    if hostile:
        blocks = x.reshape(rows, k // 16, 16)
        kind = rng.integers(0, 10, size=(rows, k // 16))
        blocks[kind == 0] = 0.0
        blocks[kind == 1] = -0.0
        tiny = 2.0**-140 if dtype == "bfloat16" else 2.0**-24
        small = blocks[kind == 2]
        blocks[kind == 2] = np.round(small * 4) * tiny  # subnormal inputs
        where = np.argwhere(kind == 3)
        blocks[where[:, 0], where[:, 1], rng.integers(0, 16, size=len(where))] = np.inf
        where = np.argwhere(kind == 4)
        blocks[where[:, 0], where[:, 1], rng.integers(0, 16, size=len(where))] = -np.inf
        where = np.argwhere(kind == 5)
        blocks[where[:, 0], where[:, 1], rng.integers(0, 16, size=len(where))] = np.nan
        big = 3.0e38 if dtype == "bfloat16" else 60000.0
        huge = blocks[kind == 6]  # amax near the dtype's largest value
        peak = np.abs(huge).max(axis=-1, keepdims=True, initial=0.0)
        with np.errstate(over="ignore", invalid="ignore"):
            blocks[kind == 6] = huge * (big / np.maximum(peak, 1e-30))
    return _bits(x, dtype)


TIE_VALUES = np.array([0, 0.25, 0.5, 0.75, 1, 1.25, 1.5, 1.75, 2, 2.5, 3, 3.5, 4, 5, 6])


def tie_input(rows: int, k: int, dtype: str, rng) -> np.ndarray:
    """Blocks that, with g = 1, land exactly on E2M1 ties (amax = 6 * 2^e, so the scale is
    2^e and x * (g / sf) = x / 2^e) or whose scale lands exactly on an E4M3 tie."""
    exponent = rng.integers(-6, 7, size=(rows, k // 16, 1)).astype(np.float64)
    values = TIE_VALUES[rng.integers(0, len(TIE_VALUES), size=(rows, k // 16, 16))]
    signs = np.where(rng.random((rows, k // 16, 16)) < 0.5, -1.0, 1.0)
    blocks = values * signs * 2.0**exponent
    blocks[:, :, 0] = 6.0 * 2.0 ** exponent[:, :, 0]
    # every third block: amax = 6 x the midpoint of two neighbouring E4M3 values
    codes = rng.integers(1, 0x7E, size=(rows, k // 16))
    mid = (E4M3_VALUES[codes] + E4M3_VALUES[codes + 1]) / 2
    third = (np.arange(k // 16) % 3 == 2)[None, :] & np.ones((rows, 1), bool)
    amax = 6.0 * mid
    ratio = np.abs(blocks).max(axis=-1) / amax
    scaled = blocks / np.maximum(ratio, 1e-300)[..., None]
    blocks = np.where(third[..., None], scaled, blocks)
    blocks[third, 0] = amax[third]
    return _bits(blocks.reshape(rows, k).astype(np.float32), dtype)


def global_scale_for(x: np.ndarray, rng) -> np.float32:
    """The default g where the tensor is finite, else a random power-of-ten one."""
    x32 = as_float32(x)
    if np.isfinite(x32).all():
        return default_global_scale(x32)
    return np.float32(10.0 ** rng.uniform(-3, 3))


# plain -------------------------------------------------------------------------------------

PLAIN_SHAPES = [  # (T, k, extra row stride)
    (1, 32, 0), (1, 16384, 0), (2, 16, 0), (3, 48, 8), (7, 96, 0), (31, 2080, 0),
    (128, 64, 0), (129, 160, 16), (255, 2048, 0), (1000, 2080, 0), (1024, 7168, 0),
    (2048, 4096, 64), (4096, 1024, 0), (333, 16384, 0), (16384, 256, 0), (16384, 32, 8),
    (300, 6144, 0), (64, 10240, 16),  # 3 and 5 row segments of 128 blocks (not a power of 2)
    # a row's last segment with 33 / 66 / 168 - 128 = 40 / 288 - 256 = 32 blocks: each of
    # the kernel's short-segment paths (1, 2 or all 4 of a lane's blocks) with lanes past
    # k and blocked-scale padding columns (33 and 66 blocks are not multiples of 4)
    (5, 528, 0), (77, 1056, 8), (130, 2688, 0), (9, 4608, 0),
]  # fmt: skip


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", PLAIN_SHAPES, ids=lambda s: f"T{s[0]}-k{s[1]}-pad{s[2]}")
def test_plain_bytes_equal_the_reference(device, dtype, shape):
    rows, k, pad = shape
    rng = np.random.default_rng(rows * 131 + k + pad)
    x = random_input(rows, k, dtype, rng, hostile=rows * k < 2**22)
    with QuantizePlan(k, rows=rows, dtype=dtype, row_stride=k + pad, device=device) as plan:
        with Operands(plan, x, k + pad) as data:
            for poison, g in zip(POISONS, (global_scale_for(x, rng), np.float32(0.37))):
                data.load(g, poison=poison)
                plan.run(**data.pointers(False))
                plan.synchronize()
                data.check(g, poison=poison, label=f"plain T={rows} k={k} {dtype} g={g}")


@pytest.mark.parametrize("dtype", DTYPES)
def test_ties_zeros_nan_inf_subnormals(device, dtype):
    rows, k = 300, 2080
    rng = np.random.default_rng(7)
    ties = tie_input(rows, k, dtype, rng)
    hostile = random_input(rows, k, dtype, rng, hostile=True)
    for label, x, g in (
        ("E2M1/E4M3 ties, g = 1", ties, np.float32(1.0)),
        ("hostile blocks, g = 1", hostile, np.float32(1.0)),
        ("hostile blocks, tiny g", hostile, np.float32(1e-30)),
        ("hostile blocks, huge g", hostile, np.float32(3e37)),
        ("ties, g = 2^-3", ties, np.float32(0.125)),
    ):
        with QuantizePlan(k, rows=rows, dtype=dtype, device=device) as plan:
            with Operands(plan, x, k) as data:
                data.load(g)
                plan.run(**data.pointers(False))
                plan.synchronize()
                data.check(g, label=f"{label} {dtype}")


# contiguous and masked ----------------------------------------------------------------------


def contiguous_routings(experts: int, capacity: int, count: int, rng) -> list:
    """offsets[E + 1] of uniform, skewed, one-expert, all-empty and sparse routings."""
    out = []
    for i in range(count):
        total = int(rng.integers(0, capacity + 1))
        kind = i % 5
        if kind == 0:
            counts = rng.multinomial(total, np.ones(experts) / experts)
        elif kind == 1:
            weights = rng.pareto(1.0, experts) + 1e-3
            counts = rng.multinomial(total, weights / weights.sum())
        elif kind == 2:
            counts = np.zeros(experts, np.int64)
            counts[rng.integers(experts)] = capacity
        elif kind == 3:
            counts = np.zeros(experts, np.int64)
        else:
            counts = np.zeros(experts, np.int64)
            live = rng.choice(experts, size=max(1, experts // 7), replace=False)
            counts[live] = rng.multinomial(total, np.ones(len(live)) / len(live))
        out.append(np.concatenate([[0], np.cumsum(counts)]).astype(np.int32))
    return out


def hostile_contiguous(experts: int, capacity: int, rng) -> list:
    size = experts + 1
    return [
        rng.integers(-5000, 5000, size=size),  # out of order, out of range
        np.full(size, capacity + 1000),  # everything past the capacity
        np.concatenate([[0], np.full(experts, capacity)]),  # one expert takes all
        np.arange(size) * -7,  # decreasing, negative
        np.concatenate([[capacity // 2], np.full(experts, capacity * 4)]),  # starts late
        np.array([0] + [capacity, 0] * (experts // 2) + [capacity] * (experts % 2)),  # overlaps
    ]


CONTIGUOUS = [  # (experts, tokens, capacity, k)
    (1, 64, 64, 256), (8, 300, 600, 2080), (64, 1000, 2000, 1024), (256, 512, 4096, 512),
    (7, 100, 100, 16), (33, 600, 600, 7168),
]  # fmt: skip


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("config", CONTIGUOUS, ids=lambda c: f"E{c[0]}-T{c[1]}-cap{c[2]}-k{c[3]}")
def test_contiguous_one_graph_serves_every_routing(device, dtype, config):
    experts, tokens, capacity, k = config
    rng = np.random.default_rng(experts * 1009 + k)
    x = random_input(tokens, k, dtype, rng, hostile=True)
    stream = driver.stream_create()
    try:
        with QuantizePlan(k, form="contiguous", rows=tokens, capacity=capacity,
                          experts=experts, dtype=dtype, device=device) as plan:  # fmt: skip
            with Operands(plan, x, k) as data:
                cases = contiguous_routings(experts, capacity, ROUTINGS, rng)
                indices = [rng.integers(0, tokens, size=capacity) for _ in cases]
                g = np.float32(10.0 ** rng.uniform(-2, 2))
                data.load(g, cases[0], indices[0])
                run = partial(plan.run, **data.pointers(True), stream=stream)
                with CapturedGraph(stream, run) as graph:
                    for i, (routing, index) in enumerate(zip(cases, indices)):
                        g = np.float32(10.0 ** rng.uniform(-2, 2))
                        poison = POISONS[i % 2]
                        data.load(g, routing, index, poison)
                        graph.launch(stream)
                        driver.stream_synchronize(stream)
                        label = f"contiguous E={experts} k={k} {dtype} replay {i}"
                        data.check(g, routing, index, poison, label)
                # hostile offsets and index entries, eager runs of the same plan
                for i, routing in enumerate(hostile_contiguous(experts, capacity, rng)):
                    index = rng.integers(-3 * tokens, 3 * tokens, size=capacity)
                    data.load(g, routing, index)
                    run()
                    plan.synchronize()
                    data.check(g, routing, index, label=f"contiguous E={experts} hostile {i}")
    finally:
        driver.stream_destroy(stream)


def test_contiguous_without_index_reads_row_i(device):
    experts, capacity, k = 16, 700, 1056
    rng = np.random.default_rng(5)
    x = random_input(capacity, k, "bfloat16", rng, hostile=True)
    with QuantizePlan(k, form="contiguous", capacity=capacity, experts=experts,
                      device=device) as plan:  # fmt: skip
        with Operands(plan, x, k) as data:
            for routing in contiguous_routings(experts, capacity, 5, rng):
                data.load(np.float32(2.5), routing)
                plan.run(**data.pointers(False))
                plan.synchronize()
                data.check(np.float32(2.5), routing, None, label="contiguous, no index")


MASKED = [(1, 1, 32), (8, 100, 2080), (32, 256, 512), (4, 300, 7168), (64, 17, 16)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("config", MASKED, ids=lambda c: f"E{c[0]}-maxm{c[1]}-k{c[2]}")
def test_masked_one_graph_serves_every_routing(device, dtype, config):
    experts, max_m, k = config
    rng = np.random.default_rng(experts * 31 + max_m + k)
    x = random_input(experts * max_m, k, dtype, rng, hostile=True)
    stream = driver.stream_create()
    try:
        with QuantizePlan(k, form="masked", capacity=max_m, experts=experts, dtype=dtype,
                          device=device) as plan:  # fmt: skip
            with Operands(plan, x, k) as data:
                cases = [rng.integers(0, max_m + 1, size=experts) for _ in range(ROUTINGS)]
                cases += [np.zeros(experts, np.int64), np.full(experts, max_m)]  # none, full
                g = np.float32(1.0)
                data.load(g, cases[0])
                run = partial(plan.run, **data.pointers(False), stream=stream)
                with CapturedGraph(stream, run) as graph:
                    for i, counts in enumerate(cases):
                        g = np.float32(10.0 ** rng.uniform(-2, 2))
                        poison = POISONS[i % 2]
                        data.load(g, counts, None, poison)
                        graph.launch(stream)
                        driver.stream_synchronize(stream)
                        data.check(g, counts, None, poison, f"masked E={experts} replay {i}")
                for i, counts in enumerate(
                    (rng.integers(-1000, 100000, size=experts), np.full(experts, 1 << 30),
                     np.full(experts, -1), np.full(experts, max_m + 1))
                ):  # fmt: skip
                    data.load(g, counts)
                    run()
                    plan.synchronize()
                    data.check(g, counts, None, label=f"masked E={experts} hostile {i}")
    finally:
        driver.stream_destroy(stream)


def test_padding_rows_follow_the_gemm_layout(device):
    """The contiguous scale segments start where nvfp4_aot.moe's routing kernel points
    the GEMM (sum of round_up(m_j, 128)), padding rows zero."""
    experts, capacity, k = 5, 400, 64
    counts = np.array([1, 0, 129, 128, 100])
    routing = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    rng = np.random.default_rng(3)
    x = random_input(capacity, k, "float16", rng, hostile=False)
    with QuantizePlan(k, form="contiguous", capacity=capacity, experts=experts,
                      dtype="float16", device=device) as plan:  # fmt: skip
        with Operands(plan, x, k) as data:
            data.load(np.float32(1.0), routing)
            plan.run(**data.pointers(False))
            plan.synchronize()
            data.check(np.float32(1.0), routing, None, label="GEMM layout")
            starts = np.concatenate([[0], np.cumsum((counts + 127) // 128 * 128)])[:-1]
            assert starts.tolist() == [0, 128, 128, 384, 512]
            got = data.buffers["scales"].read_all()[GUARD:-GUARD]
            kb = k // 16
            for e, (start, m) in enumerate(zip(starts, counts)):
                for r in range(int(m), (int(m) + BLOCK_ROWS - 1) // BLOCK_ROWS * BLOCK_ROWS):
                    offsets = blocked_offset(start + r, np.arange(4), kb)
                    assert (got[offsets] == 0).all(), f"expert {e} padding row {r} not zero"


@pytest.mark.parametrize("offset", (1, 4, 8, 12))
def test_scales_at_any_byte_address(device, offset):
    """The padding rows' scales are zeroed with 16-byte stores where the scale buffer is
    aligned for them, byte by byte where not: the same bytes at any address, each form
    (rows past T, experts ending inside, at and past an atom, an empty one, 66 blocks: a
    padding column)."""
    k, rng = 1056, np.random.default_rng(offset)
    counts = np.array([1, 0, 129, 128, 100])
    routing = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    cases = [
        (dict(rows=77), 77, None),
        (dict(form="contiguous", capacity=400, experts=5), 400, routing),
        (dict(form="masked", capacity=130, experts=5), 5 * 130, np.minimum(counts, 130)),
    ]
    for kw, rows, counts_in in cases:
        x = random_input(rows, k, "bfloat16", rng, hostile=False)
        with QuantizePlan(k, device=device, **kw) as plan:
            with Operands(plan, x, k, scales_offset=offset) as data:
                g = global_scale_for(x, rng)
                data.load(g, counts_in)
                plan.run(**data.pointers(False))
                plan.synchronize()
                data.check(g, counts_in, None, label=f"{plan.problem.form} scales at +{offset}")


@pytest.mark.parametrize("segment_blocks", (128, 64, 32))
def test_every_unit_width(device, segment_blocks):
    """Units of 128, 64 or 32 blocks (4, 2 or 1 a lane; the plan picks by size) write the
    same bytes: rows of 33-168 blocks (short last segments of each width, padding
    columns), each form, hostile routings too."""
    rng = np.random.default_rng(segment_blocks)
    counts = np.array([1, 0, 129, 128, 100])
    routing = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    hostile = np.array([5, 3, 400, 1000, -7, 2], np.int32)
    cases = [
        (dict(rows=77, row_stride=2096), 2080, 77, [None]),
        (dict(rows=9), 2688, 9, [None]),
        (dict(form="contiguous", capacity=400, experts=5), 528, 400, [routing, hostile]),
        (dict(form="masked", capacity=130, experts=5), 1056, 650, [np.minimum(counts, 130),
                                                                    hostile[:5]]),
    ]  # fmt: skip
    for kw, k, rows, routings in cases:
        x = random_input(rows, k, "bfloat16", rng, hostile=True)
        stride = kw.get("row_stride", k)
        with QuantizePlan(k, device=device, segment_blocks=segment_blocks, **kw) as plan:
            assert plan.problem.segment_blocks == segment_blocks
            with Operands(plan, x, stride) as data:
                for i, counts_in in enumerate(routings):
                    g = global_scale_for(x, rng)
                    poison = POISONS[i % 2]
                    data.load(g, counts_in, None, poison)
                    plan.run(**data.pointers(False))
                    plan.synchronize()
                    data.check(g, counts_in, None, poison,
                               f"{plan.problem.form} k={k} {segment_blocks}-block units {i}")  # fmt: skip


def test_torch_tensors_and_streams(device):
    torch = pytest.importorskip("torch")
    rows, k = 1000, 2080
    x = torch.randn(rows, k, dtype=torch.bfloat16, device="cuda") * 3
    out = torch.empty(rows, k // 2, dtype=torch.uint8, device="cuda")
    with QuantizePlan(k, rows=rows, device=device) as plan:
        scales = torch.empty(plan.scale_bytes, dtype=torch.uint8, device="cuda")
        g = torch.tensor([0.75], dtype=torch.float32, device="cuda")
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            plan.run(x, out, scales, g, stream=stream)
        stream.synchronize()
        x_bits = x.view(torch.int16).cpu().numpy().view(np.uint16)
        from nvfp4_aot.quantize import quantize

        q = quantize(x_bits, np.float32(0.75))
        assert np.array_equal(out.cpu().numpy(), q.packed)
        assert np.array_equal(scales.cpu().numpy(), q.scales_blocked)


def test_runs_wait_for_the_kernel_before_them(device):
    """Launched with programmatic stream serialization, a run may start while the kernel
    before it still runs (the quantizer lets its dependents launch at once): it must read
    its input and write its outputs only after that kernel. A chain of three plans, each
    quantizing the codes of the one before it (read as BF16), on few units, so that the
    next run's CTAs find room on the SMs at once: eager runs on a stream (the second and
    third reuse their ring slots: kernel follows kernel, no table copy between) and
    replays of one graph, each checked against the reference of the chain. A quantizer
    baked with the attribute but without the wait fails here, at the first replay (H200,
    session 19 call 6, three tries out of three)."""
    from nvfp4_aot.quantize import quantize

    rng = np.random.default_rng(11)
    rows, ks = 64, (4096, 1024, 256)
    stream = driver.stream_create()
    plans, buffers, graph = [], [], None
    try:
        plans = [QuantizePlan(k, rows=rows, device=device) for k in ks]
        x = Guarded(rows * ks[0] * 2)
        g = Guarded(4)
        outs = [Guarded(rows * k // 2) for k in ks]
        scales = [Guarded(plan.scale_bytes) for plan in plans]
        buffers = [x, g, *outs, *scales]
        g.write(np.float32([1.0]))
        sources = [x, *outs[:-1]]

        def record():
            for plan, source, out, sf in zip(plans, sources, outs, scales, strict=True):
                plan.run(source.pointer, out.pointer, sf.pointer, g.pointer, stream=stream)

        for attempt in range(6):
            host = random_input(rows, ks[0], "bfloat16", rng, hostile=False)
            x.write(host)
            poison = POISONS[attempt % 2]
            for buffer in (*outs, *scales):
                buffer.poison(poison)
            driver.synchronize()
            if attempt < 3:
                record()
            else:
                graph = graph or CapturedGraph(stream, record)
                graph.launch(stream)
            driver.stream_synchronize(stream)
            chain_input = host
            for i, k in enumerate(ks):
                q = quantize(chain_input, np.float32(1.0))
                written = (("out", outs[i], q.packed), ("scales", scales[i], q.scales_blocked))
                for name, buffer, want in written:
                    everywhere = np.ones(want.size, bool)
                    problem = _first_problem(buffer.read_all(), want.ravel(), everywhere, poison)
                    assert problem is None, f"attempt {attempt}, plan {i} (k={k}) {name}: {problem}"
                chain_input = q.packed.view(np.uint16)
    finally:
        if graph is not None:
            graph.destroy()
        for buffer in buffers:
            buffer.free()
        for plan in plans:
            plan.close()
        driver.stream_destroy(stream)
