"""MoE plans on the CPU: the layout arithmetic (nvfp4_aot.moe_layout), the plan's launches
and run words against the fake driver with the committed artifacts (nvfp4_aot.moe), the
operand checks, and the numpy routing data (nvfp4_aot.moe_data). The routing kernel itself
runs in tests/test_moe_gpu.py."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from fake_driver import FakeDriver, installed
from nvfp4_aot import loader
from nvfp4_aot.blocked import blocked_scale_bytes
from nvfp4_aot.errors import InvalidProblemError
from nvfp4_aot.intmath import round_up
from nvfp4_aot.launch_layout import ALIGN
from nvfp4_aot.manifest import ROLE_ROUTED_GEMM, ROLE_ROUTING
from nvfp4_aot.moe import MoeGemmPlan
from nvfp4_aot.moe_data import ROUTING_KINDS, MoeProblem, random_counts
from nvfp4_aot.moe_layout import (
    C_GROUPS,
    C_START,
    C_WORDS,
    P_HEADER_WORDS,
    P_SFA_EXPERT_BYTES,
    P_SFA_ROW_BYTES,
    P_SFA_UNIT_BYTES,
    RUN_FIELDS,
    MoeLayout,
    contiguous_scale_rows,
    scale_offsets,
)
from support import DLPackArray, FakeArray, installed_h200, kernel_params_of

MANIFEST = loader.load_manifest()  # the committed artifacts: GEMMs and the routing kernel
SM90 = "sm90_nvfp4_grouped_gemm"


def _layout(experts, layout="contiguous", capacity=1024, n=1536, k=2048, family=SM90):
    gemms = {v.num_groups: v for v in MANIFEST.variants if v.family == family}
    routing = {
        v.num_groups: v for v in MANIFEST.variants if v.role == ROLE_ROUTING and v.arch == "sm_90a"
    }
    return MoeLayout.build(experts, n, k, layout, capacity, gemms, routing, 132, 4)


def test_scale_offsets_and_rows_by_hand():
    assert scale_offsets([0, 1, 128, 129, 0, 5]) == [0, 0, 128, 256, 512, 512]
    # 3 experts sharing 300 tokens: at most 300 + 3 * 127 padded rows, in whole atoms
    assert contiguous_scale_rows(300, 3) == (300 + 381) // 128 * 128 == 640
    assert contiguous_scale_rows(5, 100) == (5 + 5 * 127) // 128 * 128  # <= 5 experts non-empty
    for counts in ([300, 0, 0], [100, 100, 100], [1, 1, 298], [128, 128, 44]):
        padded = sum(round_up(c, 128) for c in counts)
        assert padded <= contiguous_scale_rows(300, 3)


@pytest.mark.parametrize(
    "experts, chunks",
    [(1, [(0, 1, 8)]), (8, [(0, 8, 8)]), (32, [(0, 32, 120)]), (128, [(0, 128, 256)]),
     (256, [(0, 256, 256)]), (300, [(0, 256, 256), (256, 44, 120)]),
     (600, [(0, 256, 256), (256, 256, 256), (512, 88, 120)])],
)  # fmt: skip
def test_experts_split_into_chunks_of_baked_group_counts(experts, chunks):
    layout = _layout(experts)
    assert [(c.first, c.experts, c.num_groups) for c in layout.chunks] == chunks
    assert layout.routing.num_chunks == len(chunks) and layout.routing.grid == (len(chunks), 1, 1)
    assert [v.role for v in layout.variants] == [ROLE_ROUTING] + ["grouped_gemm"] * len(chunks)
    # the routing variant: the smallest that fills the largest chunk, one thread per group+
    routing = layout.variants[0]
    largest = max(g for *_, g in chunks)
    assert routing.num_groups == (120 if largest <= 120 else 256)
    assert routing.block[0] > routing.num_groups and routing.block[0] % 32 == 0


def test_a_chunk_no_routing_variant_fills_is_refused():
    gemms = {v.num_groups: v for v in MANIFEST.variants if v.family == SM90}
    routing = {
        v.num_groups: v for v in MANIFEST.variants if v.role == ROLE_ROUTING and v.arch == "sm_90a"
    }
    del routing[256]
    with pytest.raises(InvalidProblemError, match="fills at most 120 groups.*has 256"):
        MoeLayout.build(128, 1536, 2048, "contiguous", 1024, gemms, routing, 132, 4)


def test_grid_is_fixed_by_the_capacity_bound():
    small = _layout(8, capacity=16, n=256)  # at most 8 row tiles x 2 n tiles
    (chunk,) = small.chunks
    assert chunk.tiles_bound == (16 + 127 * 8) // 128 * 2 and chunk.persistent_blocks == 16
    masked = _layout(8, layout="masked", capacity=200, n=256)
    assert masked.chunks[0].tiles_bound == 8 * 2 * 2
    big = _layout(128, capacity=4096)
    assert all(c.persistent_blocks == 132 and c.grid == (132, 1, 1) for c in big.chunks)


def test_plan_words_and_kernel_inputs():
    layout = _layout(256, capacity=4096)
    base = 1 << 40
    image = layout.static_tables(base)
    assert len(image) == 2 * layout.words_bytes
    for graph in (0, 1):
        words = struct.unpack_from(
            f"<{layout.words_bytes // 8}q", image, graph * layout.words_bytes
        )
        assert words[:5] == (256, 0, 4096, 1536, 2048)
        tables = base + layout.tables_offset + graph * layout.tables_bytes
        for c, chunk in enumerate(layout.chunks):
            record = words[P_HEADER_WORDS + C_WORDS * c :][:C_WORDS]
            assert record[C_START] == chunk.first and record[C_GROUPS] == chunk.num_groups
            assert record[C_GROUPS + 1 :][:4] == (
                tables + chunk.sizes_offset, tables + chunk.abc_offset,
                tables + chunk.scales_offset, tables + chunk.prefix_offset)  # fmt: skip
    eager = [layout.kernel_inputs(x, base, 0) for x in layout.launches]
    graph = [layout.kernel_inputs(x, base, layout.graph_slot) for x in layout.launches]
    assert eager[0]["plan"] == base and graph[0]["plan"] == base + layout.words_bytes
    assert eager[0]["run"] == base + layout.slot_offset(0)
    assert graph[0]["run"] == base + layout.slot_offset(layout.graph_slot)
    for e, g in zip(eager[1:], graph[1:]):  # graph replays never share tables or workspace
        assert e["problem_sizes"] != g["problem_sizes"]
        assert e["tensormap_workspace"] != g["tensormap_workspace"]
        assert all(
            v % 16 == 0 for name, v in e.items() if name not in ("total_tiles", "persistent_blocks")
        )
    regions = layout.zero_once()
    assert regions[0] == (layout.tables_offset, 2 * layout.tables_bytes)
    assert layout.slot_offset(layout.slots) == layout.device_bytes
    assert layout.slot_bytes % ALIGN == 0


def _routed(family=SM90):
    (variant,) = [
        v for v in MANIFEST.variants
        if v.role == ROLE_ROUTED_GEMM and v.family == family + "_routed" and v.epilogue.alpha
        and v.out_dtype == "bfloat16"
    ]  # fmt: skip
    return variant


@pytest.mark.parametrize("layout", ["contiguous", "masked"])
def test_a_routed_layout_is_one_launch_without_tables(layout):
    """A routed GEMM variant: one launch, no routing kernel, no tables; its inputs are the
    plan's header words and the run slot, separate for graph replays."""
    routed = _routed()
    plan = MoeLayout.build(256, 1536, 2048, layout, 4096, {}, {}, 132, 4, routed_variant=routed)
    assert plan.routing is None and plan.variants == (routed,) and plan.gemm_variant is routed
    (chunk,) = plan.launches
    assert (chunk.first, chunk.experts, chunk.num_groups) == (0, 256, 256)
    assert routed.alpha and (chunk.sizes_offset, chunk.prefix_offset, chunk.alpha_offset) == (
        0, 0, None)  # fmt: skip
    assert plan.tables_bytes == 0 and plan.words_bytes == round_up(8 * P_HEADER_WORDS, ALIGN)
    assert all(size for _offset, size in plan.zero_once())  # no empty region to clear
    base = 1 << 40
    eager = plan.kernel_inputs(chunk, base, 0)
    graph = plan.kernel_inputs(chunk, base, plan.graph_slot)
    assert list(eager) == list(routed.input_kinds) == list(graph)
    assert eager["plan"] == base and graph["plan"] == base + plan.words_bytes
    assert eager["run"] == base + plan.slot_offset(0)
    assert eager["tensormap_workspace"] != graph["tensormap_workspace"]
    assert (eager["total_tiles"], eager["persistent_blocks"]) == (
        chunk.tiles_bound, chunk.persistent_blocks)  # fmt: skip
    words = struct.unpack_from(f"<{P_HEADER_WORDS}q", plan.static_tables(base))
    unit = P_SFA_ROW_BYTES if layout == "contiguous" else P_SFA_EXPERT_BYTES
    assert words[P_SFA_UNIT_BYTES] == words[unit] > 0


def test_a_routed_variant_serves_at_most_its_groups():
    with pytest.raises(
        InvalidProblemError, match="a routed GEMM serves at most 256 experts, got 257"
    ):
        MoeLayout.build(257, 256, 512, "contiguous", 64, {}, {}, 132, 4, routed_variant=_routed())


def test_operand_bytes_per_layout():
    contiguous = _layout(8, capacity=100, n=256, k=512).operand_bytes()
    assert contiguous == {
        "routing": 4 * 9, "a": 100 * 256, "b": 8 * 256 * 256, "c": 100 * 256 * 2,
        "sfa": contiguous_scale_rows(100, 8) * 32, "sfb": 8 * blocked_scale_bytes(256, 512),
        "alpha": 4 * 8,
    }  # fmt: skip
    masked = _layout(8, layout="masked", capacity=100, n=256, k=512).operand_bytes()
    assert masked["a"] == 8 * 100 * 256 and masked["sfa"] == 8 * blocked_scale_bytes(100, 512)
    assert masked["routing"] == 4 * 8


@pytest.mark.parametrize(
    "kwargs, message",
    [(dict(experts=0), r"experts must be an int >= 1, got 0"),
     (dict(capacity=0), r"capacity must be an int >= 1"),
     (dict(layout="ragged"), r"layout must be one of \('contiguous', 'masked'\)"),
     (dict(k=2080), r"k must be a multiple of 64 for MoE layouts"),
     (dict(n=100), r"n must be a multiple of 32"),
     (dict(k=1 << 20, capacity=1 << 12), r"m \* k must be < 2\*\*31")],
)  # fmt: skip
def test_plan_rules_are_checked_before_the_driver(kwargs, message):
    args = dict(experts=8, n=256, k=512, layout="contiguous", capacity=64) | kwargs
    fake = FakeDriver(capability=(9, 0), kernel_params=kernel_params_of(MANIFEST))
    with installed(fake), pytest.raises(InvalidProblemError, match=message):
        MoeGemmPlan(args.pop("experts"), args.pop("n"), args.pop("k"), **args)
    assert "cuMemAlloc" not in fake.names()


@pytest.fixture
def fake():
    with installed_h200() as f:
        yield f


BASE = 0x7000_0000_0000


def _pointers():
    return [BASE + (i + 1) * (1 << 34) for i in range(6)]  # routing, a, b, c, sfa, sfb


def test_run_writes_one_small_table_and_launches_routing_then_gemms(fake):
    with MoeGemmPlan(600, 1536, 2048, layout="masked", capacity=16) as plan:  # 256+256+88
        routing, a, b, c, sfa, sfb = _pointers()
        plan.run(a, b, c, sfa, sfb, routing, stream=9)
        symbols = [launch.function.symbol for launch in fake.launches]
        assert len(symbols) == 4 and symbols[0] == plan.layout.variants[0].kernel_symbol
        assert len(set(symbols[1:])) == 1  # three GEMM launches of one family
        assert [launch.stream for launch in fake.launches] == [9] * 4
        dst, data, stream = fake.copies[-1]
        assert stream == 9 and len(data) == plan.layout.slot_bytes
        assert struct.unpack_from("<6Q", data) == (routing, a, b, c, sfa, sfb)
        # host work is independent of E: one copy, one routing launch, one per chunk
        plan.run(a, b, c, sfa, sfb, routing, stream=9)
        assert len(fake.launches) == 8


def _slot_values(variant, launch) -> dict[str, int]:
    """The inputs a fake launch of ``variant`` carried, by name."""
    return {
        slot.name: int.from_bytes(
            launch.params[p.index][slot.offset : slot.offset + slot.size], "little"
        )  # fmt: skip
        for p in variant.params
        for slot in p.slots
    }


@pytest.mark.parametrize("layout", ["contiguous", "masked"])
def test_plans_take_the_routed_variant_of_their_family(fake, layout):
    """Up to 256 experts a per-CTA sm_90a family's plan is one routed GEMM launch (the
    same run words); routed=False keeps the routing kernel; more experts, or a family
    without a routed twin, run the routing kernel."""
    pointers = _pointers()
    routing, a, b, c, sfa, sfb = pointers
    with MoeGemmPlan(128, 1536, 2048, layout=layout, capacity=64) as plan:
        variant = plan.layout.gemm_variant
        assert variant.role == ROLE_ROUTED_GEMM and variant.family == plan.family + "_routed"
        plan.run(a, b, c, sfa, sfb, routing, stream=5)
        (launch,) = fake.launches
        assert launch.function.symbol == variant.kernel_symbol and launch.stream == 5
        base, slot = plan._launcher.base, plan._launcher._last_slot
        inputs = plan.layout.kernel_inputs(plan.layout.chunks[0], base, slot)
        carried = {name: v for name, v in inputs.items() if name != "total_tiles"}  # host-only
        assert _slot_values(variant, launch) == carried
        dst, data, _stream = fake.copies[-1]
        assert dst == inputs["run"]
        assert struct.unpack_from("<6Q", data) == (routing, a, b, c, sfa, sfb)
    fake.launches.clear()
    with MoeGemmPlan(128, 1536, 2048, layout=layout, capacity=64, routed=False) as plan:
        assert plan.layout.routing is not None and plan.layout.gemm_variant.role != ROLE_ROUTED_GEMM
        plan.run(a, b, c, sfa, sfb, routing)
        assert len(fake.launches) == 2
    with MoeGemmPlan(300, 1536, 2048, layout=layout, capacity=64) as many:
        assert many.layout.routing is not None  # 300 > 256 groups
        with pytest.raises(InvalidProblemError, match="routed=True: no routed variant"):
            MoeGemmPlan(300, 1536, 2048, layout=layout, capacity=64, routed=True)
    with MoeGemmPlan(32, 4096, 7168, layout=layout, capacity=2048 if layout == "contiguous"
                     else 64) as wide:  # fmt: skip
        assert wide.family == "sm90_nvfp4_grouped_gemm_a16" and wide.layout.routing is not None
    with pytest.raises(InvalidProblemError, match="routed must be None, True or False"):
        MoeGemmPlan(8, 256, 512, capacity=64, routed="yes")


def test_all_experts_fit_one_family_choice_by_n_and_k(fake):
    # 64 rows per expert: past the decode tiles, the 128-row families' rule by n and k
    with MoeGemmPlan(32, 4096, 7168, capacity=2048) as wide:
        assert wide.family == "sm90_nvfp4_grouped_gemm_a16"
    with MoeGemmPlan(32, 1536, 2048, capacity=2048) as narrow:
        assert narrow.family == SM90
    # 8 rows per expert: 16-row tiles (tests/test_selection.py has the rule's edges)
    with MoeGemmPlan(32, 4096, 7168, capacity=256) as decode:
        assert decode.family == "sm90_nvfp4_grouped_gemm_decode"
    with MoeGemmPlan(32, 1536, 2048, capacity=256, kernel="sm90_nvfp4_grouped_gemm_a16") as forced:
        assert forced.family == "sm90_nvfp4_grouped_gemm_a16"


def _arrays(experts=8, n=256, k=512, capacity=100, layout="contiguous", **changes):
    rows = capacity if layout == "contiguous" else experts * capacity
    shapes = {
        "routing": ((experts + 1 if layout == "contiguous" else experts,), "<i4"),
        "a": ((rows, k // 2) if layout == "contiguous" else (experts, capacity, k // 2), "|u1"),
        "b": ((experts, n, k // 2), "|u1"),
        "c": ((rows, n) if layout == "contiguous" else (experts, capacity, n), "<f2"),
        "sfa": ((1 << 20,), "|u1"),
        "sfb": ((experts * blocked_scale_bytes(n, k),), "|u1"),
    }
    shapes |= changes
    return {f: FakeArray(p, *shapes[f]) for f, p in zip(RUN_FIELDS, _pointers())}


@pytest.mark.parametrize(
    "layout, field, change, message",
    [("contiguous", "a", ((99, 256), "|u1"), r"^a must have shape \(rows >= capacity = 100, 256\)"),
     ("contiguous", "c", ((100, 256), "<f8"), r"^c: unsupported dtype \(typestr '<f8'\)"),
     ("contiguous", "c", ((100, 128), "<f2"), r"^c must have shape \(100, 256\), got \(100, 128\)"),
     ("contiguous", "routing", ((8,), "<i4"), r"^routing must be int32 offsets\[E \+ 1\] of shape \(9,\)"),
     ("contiguous", "routing", ((9,), "|u1"), r"^routing must have dtype i4"),
     ("contiguous", "b", ((7, 256, 256), "|u1"), r"^b must have shape \(8, 256, 256\)"),
     ("contiguous", "sfb", ((100,), "|u1"), r"^sfb must hold at least"),
     ("masked", "a", ((8, 99, 256), "|u1"), r"^a must have shape \(8, 100, 256\)"),
     ("masked", "routing", ((9,), "<i4"), r"^routing must be int32 masked_m\[E\] of shape \(8,\)")],
)  # fmt: skip
def test_bad_arrays_name_the_operand(fake, layout, field, change, message):
    with MoeGemmPlan(8, 256, 512, layout=layout, capacity=100) as plan:
        arrays = _arrays(layout=layout, **{field: change})
        with pytest.raises(InvalidProblemError, match=message):
            plan.run(*(arrays[f] for f in ("a", "b", "c", "sfa", "sfb", "routing")))
        assert fake.launches == []


def test_bad_pointers_and_aliasing(fake):
    with MoeGemmPlan(8, 256, 512, capacity=100) as plan:
        routing, a, b, c, sfa, sfb = _pointers()
        with pytest.raises(InvalidProblemError, match=r"^a must be 32-byte aligned"):
            plan.run(a + 16, b, c, sfa, sfb, routing)
        with pytest.raises(InvalidProblemError, match=r"^routing must be 4-byte aligned"):
            plan.run(a, b, c, sfa, sfb, routing + 2)
        with pytest.raises(InvalidProblemError, match=r"^b is not a device address: 0"):
            plan.run(a, 0, c, sfa, sfb, routing)
        with pytest.raises(InvalidProblemError, match=r"^c overlaps sfa"):
            plan.run(a, b, c, c + 1024, sfb, routing)
        assert fake.launches == []
        plan.run(a, b, c, sfa, sfb, routing + 4)  # 4-byte aligned routing is fine
        assert len(fake.launches) == len(plan.layout.launches)


def test_arrays_are_described_once_and_dlpack_works(fake):
    with MoeGemmPlan(8, 256, 512, capacity=100) as plan:
        arrays = _arrays()
        arrays["routing"] = DLPackArray(arrays["routing"].__cuda_array_interface__["data"][0],
                                        (9,), (0, 32, 1))  # fmt: skip
        plan.run(*(arrays[f] for f in ("a", "b", "c", "sfa", "sfb", "routing")), stream=3)
        assert struct.unpack_from("<6Q", fake.copies[-1][1]) == tuple(_pointers())


@pytest.mark.parametrize("kind", ROUTING_KINDS)
def test_random_counts_respect_the_total(kind):
    rng = np.random.default_rng(5)
    for experts, total in ((8, 100), (256, 17), (32, 0)):
        counts = random_counts(kind, experts, total, rng)
        assert counts.shape == (experts,) and counts.min() >= 0 and counts.sum() <= total
        if kind == "empty" or total == 0:
            assert counts.sum() == 0
        if kind == "one_expert" and total:
            assert (counts > 0).sum() == 1 and counts.sum() == total


def test_moe_problem_lays_out_contiguous_scales_per_routing():
    rng = np.random.default_rng(7)
    problem = MoeProblem(4, 128, 128, "contiguous", 300, rng)
    routing = problem.routing([130, 0, 2, 100])
    assert routing.routing.tolist() == [0, 130, 130, 132, 232]
    assert routing.row_ranges == [(0, 130), (130, 130), (130, 132), (132, 232)]
    row_bytes = 8  # round_up(128 / 16, 4)
    assert routing.sfa.size == contiguous_scale_rows(300, 4) * row_bytes
    # expert 2's scales start at row 256 (= round_up(130, 128)), expert 3's at 384
    from nvfp4_aot.layouts import scales_to_blocked

    sfa_rows = problem._sfa_rows
    for row, (start, stop) in ((0, (0, 130)), (256, (130, 132)), (384, (132, 232))):
        block = scales_to_blocked(sfa_rows[start:stop])
        assert (routing.sfa[row * row_bytes : row * row_bytes + block.size] == block).all()
    assert not routing.sfa[640 * row_bytes :].any()  # past the last segment: zero
    with pytest.raises(ValueError, match="301 tokens routed, capacity is 300"):
        problem.routing([301, 0, 0, 0])


def test_eager_runs_launch_one_recorded_graph_per_slot(fake):
    """Several launches per run are recorded per ring slot at creation; an eager run is
    one cuGraphLaunch whose copy reads the slot's staging when it runs; a run inside the
    caller's stream capture records the launches themselves; close destroys the graphs."""
    plan = MoeGemmPlan(300, 1536, 2048, capacity=4096)  # two GEMM launches: 256 + 44
    assert fake.names().count("cuGraphInstantiate") == plan.layout.ring_slots
    assert fake.launches == [] and fake.copies == []  # recorded, not run
    routing, a, b, c, sfa, sfb = _pointers()
    plan.run(a, b, c, sfa, sfb, routing, stream=4)
    plan.run(a + 256, b, c, sfa, sfb, routing, stream=4)  # another table: the next slot
    launched = [n for n in fake.names() if n in ("cuGraphLaunch", "cuLaunchKernelEx")]
    assert launched[-2:] == ["cuGraphLaunch", "cuGraphLaunch"]
    graphs = [args[0] for name, args in fake.calls if name == "cuGraphLaunch"]
    assert graphs[0] != graphs[1]
    assert len(fake.launches) == 2 * 3 and {x.stream for x in fake.launches} == {4}
    assert [struct.unpack_from("<Q", data, 8)[0] for _dst, data, _s in fake.copies] == [a, a + 256]
    fake.capturing_streams = {6}
    before = fake.names().count("cuGraphLaunch")
    plan.run(a, b, c, sfa, sfb, routing, stream=6)
    assert fake.names().count("cuGraphLaunch") == before  # captured: launches, not a graph
    assert len(fake.launches) == 2 * 3 + 3
    plan.close()
    assert fake.names().count("cuGraphExecDestroy") == plan.layout.ring_slots


class TorchLike:
    """Duck-types what the runtime reads of a CUDA torch.Tensor (torch is not imported)."""

    def __init__(self, pointer, shape, dtype, contiguous=True, device=0):
        self.is_cuda, self.shape, self._pointer = True, shape, pointer
        self.dtype = type("dtype", (), {"__str__": lambda _self: f"torch.{dtype}"})()
        self.device = type("device", (), {"index": device})()
        self._contiguous = contiguous
        self.described = False

    def data_ptr(self):
        return self._pointer

    def is_contiguous(self):
        return self._contiguous

    def get_device(self):
        return self.device.index

    def numel(self):
        return int(np.prod(self.shape))

    def element_size(self):
        return 4 if self.dtype.__str__().endswith("int32") else 1

    def __dlpack__(self, **kwargs):  # the slow path: a test fails if it gets here
        self.described = True
        raise TypeError("not described in this test")

    def __dlpack_device__(self):
        return (2, 0)


def _torch_operands(fp4_dtype: str, scale_dtype: str) -> dict:
    """Torch-like A, B, C, SFA, SFB of an (E 8, n 256, k 512, capacity 100) plan at
    ``_pointers()``, B in ``fp4_dtype`` and SFA in ``scale_dtype``."""
    _routing, a, b, c, sfa, sfb = _pointers()
    return {
        "a": TorchLike(a, (100, 256), "uint8"),
        "b": TorchLike(b, (8, 256, 256), fp4_dtype),
        "c": TorchLike(c, (100, 256), "float16"),
        "sfa": TorchLike(sfa, (1 << 16,), scale_dtype),
        "sfb": TorchLike(sfb, (8 * blocked_scale_bytes(256, 512),), "uint8"),
    }


def test_torch_tensors_take_the_attribute_fast_path(fake):
    """Tensors that plainly fit go straight to their data_ptr (no DLPack capsule); one
    that does not (wrong dtype, not contiguous) is described in full, which names it."""
    with MoeGemmPlan(8, 256, 512, capacity=100) as plan:
        routing, a, b, c, sfa, sfb = _pointers()
        tensors = _torch_operands("float4_e2m1fn_x2", "float8_e4m3fn")
        tensors["routing"] = TorchLike(routing, (9,), "int32")
        order = ("a", "b", "c", "sfa", "sfb", "routing")
        plan.run(*(tensors[f] for f in order), stream=3)
        assert not any(t.described for t in tensors.values())
        assert struct.unpack_from("<6Q", fake.copies[-1][1]) == tuple(_pointers())
        tensors["c"] = TorchLike(c, (100, 256), "float16", contiguous=False)
        with pytest.raises(InvalidProblemError, match="^c: not described in this test"):
            plan.run(*(tensors[f] for f in order))
        assert tensors["c"].described


def _recording_checks(plan):
    """Record the fields whose pointer the plan checks (address, alignment)."""
    checked = []
    check = plan._check_address

    def record(word, pointer):
        checked.append(plan._fields[word])
        check(word, pointer)

    plan._check_address = record
    return checked


def test_a_new_routing_each_run_rechecks_only_the_routing(fake):
    """bench_decode.py's eager steps: the same five tensors and another routing each run.
    The pointer checks run for what changed (all of them when c does), and a bad new
    operand is still refused with its field named; tensors are never hashed."""
    with MoeGemmPlan(8, 256, 512, capacity=100) as plan:
        checked = _recording_checks(plan)
        routing, a, b, c, sfa, sfb = _pointers()
        tensors = _torch_operands("uint8", "uint8")
        for t in tensors.values():  # run must not hash tensors (torch's __hash__ is Python)
            t.__class__ = type("Unhashable", (TorchLike,), {"__hash__": None})
        fixed = [tensors[f] for f in ("a", "b", "c", "sfa", "sfb")]
        plan.run(*fixed, TorchLike(routing, (9,), "int32"))
        assert sorted(checked) == sorted(RUN_FIELDS[:6])
        for step in range(1, 4):  # a new routing tensor at a new address each run
            checked.clear()
            plan.run(*fixed, TorchLike(routing + 64 * step, (9,), "int32"))
            assert checked == ["routing"]
            assert struct.unpack_from("<Q", fake.copies[-1][1])[0] == routing + 64 * step
        launches = len(fake.launches)
        with pytest.raises(InvalidProblemError, match=r"^routing must be 4-byte aligned"):
            plan.run(*fixed, TorchLike(routing + 2, (9,), "int32"))
        with pytest.raises(InvalidProblemError, match=r"^c overlaps routing"):
            plan.run(*fixed, TorchLike(c + 64, (9,), "int32"))
        bad_shape = FakeArray(routing + 256, (8,), "<i4")  # described in full: named
        with pytest.raises(InvalidProblemError, match=r"^routing must be int32 offsets\[E \+ 1\]"):
            plan.run(*fixed, bad_shape)
        assert len(fake.launches) == launches
        # a tensor changed in place is read again: its new address is checked and used
        tensors["sfa"]._pointer = sfa + 16
        with pytest.raises(InvalidProblemError, match=r"^sfa must be 32-byte aligned"):
            plan.run(*fixed, TorchLike(routing, (9,), "int32"))
        tensors["sfa"]._pointer = c + 1024
        with pytest.raises(InvalidProblemError, match=r"^c overlaps sfa"):
            plan.run(*fixed, TorchLike(routing, (9,), "int32"))
        tensors["sfa"]._pointer = sfa
        tensors["c"]._contiguous = False  # no longer plainly fits: described (and named)
        with pytest.raises(InvalidProblemError, match=r"^c: not described in this test"):
            plan.run(*fixed, TorchLike(routing, (9,), "int32"))
        tensors["c"]._contiguous = True
        checked.clear()
        tensors["c"]._pointer = c + (1 << 30)  # c moved: every overlap is checked again
        plan.run(*fixed, TorchLike(routing, (9,), "int32"))
        assert sorted(checked) == sorted(RUN_FIELDS[:6])
        assert struct.unpack_from("<6Q", fake.copies[-1][1]) == (
            routing,
            a,
            b,
            c + (1 << 30),
            sfa,
            sfb,
        )
