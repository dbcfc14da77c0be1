"""Where a MoE plan's launches, tables and words lie: pure arithmetic, no driver calls.

A MoE plan serves every routing of E experts with one fixed set of launches: the
routing setup kernel (:mod:`nvfp4_aot.kernels.moe_routing`) reads the device counts and
writes the tables of one grouped GEMM launch per chunk of experts (chunks as
:func:`launch_layout.split_groups` cuts them over the baked group counts), then those
launches run. The grid of each GEMM launch is fixed at plan creation from the capacity;
the kernels read the routed tile count from the CTA prefix on the device. A plan with a
*routed* GEMM variant (sm_90a, up to its 256 groups) is that one launch instead: its CTAs
build the tables from the counts in shared memory (:mod:`nvfp4_aot.kernels.routed_groups`),
it reads the plan's header words and the run words, and the buffer has no tables and
no chunk records.

The plan's device buffer::

    [plan words][plan words, graph]            uploaded once: sizes, strides, chunk records
    [GEMM tables][GEMM tables, graph]          written by the routing kernel every run
    [workspace][workspace, graph]              tensormaps (and the decode-once scratch)
    [slot 0]...[slot R-1][capture slots]       run words: routing array, A, B, C, SFA, SFB

Eager runs and CUDA graph replays each have their own words, tables and workspace, so a
replay never shares them with an eager run of the same plan.

The words' layout is shared with the routing kernel, which imports the constants below.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from . import validation
from .blocked import SF_VEC_SIZE, blocked_scale_bytes
from .errors import InvalidProblemError
from .intmath import ceil_div, round_up
from .launch_layout import ALIGN, SlotRing, persistent_blocks, split_groups
from .manifest import Variant
from .packing import launch_grid

LAYOUTS = ("contiguous", "masked")
SF_BLOCK_ROWS = 128  # rows of one blocked-scale atom; each expert's SFA starts on one
K_MULTIPLE = 64  # expert row offsets keep A 32-byte aligned: (k / 2) % 32 == 0

# plan words (int64): the header ...
P_EXPERTS, P_LAYOUT, P_CAPACITY, P_N, P_K, P_TILE_M, P_TILE_N = range(7)
P_A_ROW_BYTES, P_C_ROW_BYTES, P_SFA_ROW_BYTES = 7, 8, 9
P_B_EXPERT_BYTES, P_SFB_EXPERT_BYTES, P_SFA_EXPERT_BYTES = 10, 11, 12
# bytes of the unit a routed GEMM's SFA offsets count: a blocked-scale row (contiguous),
# an expert's block (masked)
P_SFA_UNIT_BYTES = 13
P_HEADER_WORDS = 16
# ... then per chunk: first expert, experts, the GEMM variant's group count G, and the
# device addresses of its tables (G rows each; the prefix G + 1 entries; the alpha
# pointers 0 when the variant has no alpha)
C_START, C_COUNT, C_GROUPS, C_SIZES, C_ABC, C_SCALES, C_PREFIX, C_ALPHA = range(8)
C_WORDS = 8
# run words (int64): the device addresses a run passes (alpha: per-expert FP32, or 0)
R_ROUTING, R_A, R_B, R_C, R_SFA, R_SFB, R_ALPHA = range(7)
R_WORDS = 8
RUN_FIELDS = ("routing", "a", "b", "c", "sfa", "sfb", "alpha")  # in R_* order


def contiguous_scale_rows(capacity: int, experts: int) -> int:
    """Rows of the blocked SFA buffer of the contiguous layout: expert e's scales start at
    row sum_{j<e} round_up(m_j, 128), so E experts sharing ``capacity`` tokens need at most
    this many (every non-empty expert pads at most 127 rows)."""
    return (
        (capacity + (SF_BLOCK_ROWS - 1) * min(experts, capacity)) // SF_BLOCK_ROWS * SF_BLOCK_ROWS
    )


def scale_offsets(counts) -> list[int]:
    """First blocked-SFA row of every expert in the contiguous layout (the convention of
    vLLM's ``blockscale_offsets``): sum over j < e of round_up(counts[j], 128)."""
    offsets, row = [], 0
    for count in counts:
        offsets.append(row)
        row += round_up(int(count), SF_BLOCK_ROWS)
    return offsets


def check_moe_problem(experts: int, n: int, k: int, layout: str, capacity: int) -> None:
    """The plan-time rules of a MoE plan, with errors naming the field."""
    if layout not in LAYOUTS:
        raise InvalidProblemError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    for name, value in (("experts", experts), ("capacity", capacity)):
        if type(value) is not int or value < 1:
            raise InvalidProblemError(f"{name} must be an int >= 1, got {value!r}")
    validation.check_group(0, capacity, n, k)
    if k % K_MULTIPLE:
        raise InvalidProblemError(
            f"k must be a multiple of {K_MULTIPLE} for MoE layouts (every expert's first "
            f"row of A, k/2 bytes each, must stay 32-byte aligned), got {k}"
        )
    rows = capacity if layout == "contiguous" else experts * capacity
    if rows > validation.INT32_MAX:
        raise InvalidProblemError(f"{layout} layout: {rows} rows do not fit int32")


@dataclass(frozen=True)
class Chunk:
    """One GEMM launch of a MoE plan: experts ``[first, first + experts)`` on a variant of
    ``num_groups`` groups, and where its tables lie inside a table set."""

    first: int
    experts: int
    num_groups: int
    persistent_blocks: int
    tiles_bound: int  # the most tiles any routing gives it (the kernel's host-only input)
    grid: tuple[int, int, int]
    sizes_offset: int  # the table offsets: 0 in a routed plan (no tables)
    abc_offset: int
    scales_offset: int
    prefix_offset: int
    alpha_offset: int | None  # None: no alpha table (no alpha, or a routed plan)


@dataclass(frozen=True)
class RoutingLaunch:
    """The routing setup launch: one CTA per chunk."""

    num_chunks: int
    grid: tuple[int, int, int]


@dataclass(frozen=True)
class MoeLayout(SlotRing):
    """The launches of one MoE plan and the byte layout of its buffer and slots."""

    experts: int
    n: int
    k: int
    layout: str
    capacity: int
    ring_slots: int
    capture_slots: int
    chunks: tuple[Chunk, ...]
    routing: RoutingLaunch | None  # None: one routed GEMM launch builds its own tables
    variants: tuple[Variant, ...]  # per launch: the routing kernel, then one per chunk
    words_bytes: int  # one set of plan words
    tables_bytes: int  # one set of GEMM tables
    tables_offset: int
    workspace_bytes: int
    workspace_offset: int
    ring_offset: int
    slot_bytes: int
    device_bytes: int

    @classmethod
    def build(
        cls, experts: int, n: int, k: int, layout: str, capacity: int,
        gemm_variants: dict[int, Variant], routing_variants: dict[int, Variant],
        sm_count: int, ring_slots: int, capture_slots: int = 8,
        routed_variant: Variant | None = None,
    ) -> MoeLayout:  # fmt: skip
        """Lay out a checked MoE problem over one GEMM family's variants and the routing
        kernel's (both by group count): the routing variant is the smallest that fills
        the largest chunk. With ``routed_variant`` (of at least ``experts`` groups) the
        plan is that one launch, no routing kernel and no tables (its CTAs build them:
        nvfp4_aot/kernels/routed_groups.py)."""
        check_moe_problem(experts, n, k, layout, capacity)
        if routed_variant is not None:
            if experts > routed_variant.num_groups:
                raise InvalidProblemError(
                    f"a routed GEMM serves at most {routed_variant.num_groups} experts, "
                    f"got {experts}"
                )
            gemm_variants = {routed_variant.num_groups: routed_variant}
        split = split_groups(experts, list(gemm_variants))
        routing_variant = None  # and no tables: a routed plan
        if routed_variant is None:
            largest = max(g for _start, _stop, g in split)
            fitting = [g for g in routing_variants if g >= largest]
            if not fitting:
                raise InvalidProblemError(
                    f"the routing kernel fills at most {max(routing_variants)} groups per "
                    f"launch, the GEMM variant has {largest}"
                )
            routing_variant = routing_variants[min(fitting)]
        chunks, variants, offset, workspace = [], [], 0, 0
        for start, stop, g in split:
            variant = gemm_variants[g]
            tile_m, tile_n, _tile_k = variant.tile_mnk
            count = stop - start
            if layout == "contiguous":  # each non-empty expert adds at most one partial tile
                row_tiles = (capacity + (tile_m - 1) * min(count, capacity)) // tile_m
                rows = capacity
            else:
                row_tiles = count * ceil_div(capacity, tile_m)
                rows = count * capacity
            bound = min(row_tiles * ceil_div(n, tile_n), validation.INT32_MAX)
            blocks = persistent_blocks(bound, sm_count, variant.blocks_per_sm)
            grid = launch_grid(variant, {"persistent_blocks": blocks, "total_tiles": bound})
            sizes_offset = abc_offset = scales_offset = prefix_offset = 0
            alpha_offset = None
            if routing_variant is not None:  # the tables the routing kernel writes
                sizes_offset = offset
                abc_offset = round_up(sizes_offset + 16 * g, ALIGN)
                scales_offset = round_up(abc_offset + 24 * g, ALIGN)
                prefix_offset = round_up(scales_offset + 16 * g, ALIGN)
                offset = round_up(prefix_offset + 4 * (g + 1), ALIGN)
                if variant.alpha:
                    alpha_offset, offset = offset, round_up(offset + 8 * g, ALIGN)
            chunks.append(
                Chunk(start, count, g, blocks, bound, grid,
                      sizes_offset, abc_offset, scales_offset, prefix_offset, alpha_offset)
            )  # fmt: skip
            variants.append(variant)
            workspace = max(workspace, variant.workspace.bytes_for([(rows, n, k)], blocks))
        routing, records = None, 0  # a routed plan: no routing launch, tables or records
        if routing_variant is not None:
            routing = RoutingLaunch(
                len(chunks), launch_grid(routing_variant, {"num_chunks": len(chunks)})
            )
            records = len(chunks)
        words_bytes = round_up(8 * (P_HEADER_WORDS + C_WORDS * records), ALIGN)
        tables_offset = 2 * words_bytes
        tables_bytes = offset
        workspace_offset = tables_offset + 2 * tables_bytes
        workspace = round_up(workspace, ALIGN)
        ring_offset = workspace_offset + 2 * workspace
        slot_bytes = round_up(8 * R_WORDS, ALIGN)
        return cls(
            experts=experts, n=n, k=k, layout=layout, capacity=capacity,
            ring_slots=ring_slots, capture_slots=capture_slots, chunks=tuple(chunks),
            routing=routing,
            variants=tuple(v for v in (routing_variant, *variants) if v is not None),
            words_bytes=words_bytes,
            tables_bytes=tables_bytes, tables_offset=tables_offset,
            workspace_bytes=workspace, workspace_offset=workspace_offset,
            ring_offset=ring_offset, slot_bytes=slot_bytes,
            device_bytes=ring_offset + (ring_slots + capture_slots) * slot_bytes,
        )  # fmt: skip

    # the launcher's protocol -------------------------------------------------------------

    @property
    def launches(self) -> tuple:
        return self.chunks if self.routing is None else (self.routing, *self.chunks)

    @property
    def gemm_variant(self) -> Variant:
        """The GEMM launches' variant (the last chunk's: every chunk's epilogue and tile)."""
        return self.variants[-1]

    def zero_once(self) -> list[tuple[int, int]]:
        """Both table sets (the routing kernel rewrites them; zero until then) and, when a
        GEMM kernel needs it, both workspaces."""
        regions = [(self.tables_offset, 2 * self.tables_bytes)] if self.tables_bytes else []
        if any(v.workspace.zero_once for v in self.variants):
            regions.append((self.workspace_offset, 2 * self.workspace_bytes))
        return regions

    def static_tables(self, base: int) -> bytearray:
        """The two sets of plan words (eager, graph) for a buffer at ``base``."""
        image = bytearray(self.tables_offset)
        for graph in (False, True):
            struct.pack_into(
                f"<{self.words_bytes // 8}q", image, self.words_bytes * graph,
                *self._plan_words(base + self._tables(graph)),
            )  # fmt: skip
        return image

    def kernel_inputs(self, launch, base: int, slot: int) -> dict[str, int]:
        graph = slot >= self.graph_slot
        words = {"plan": base + self.words_bytes * graph, "run": base + self.slot_offset(slot)}
        if isinstance(launch, RoutingLaunch):
            return words | {"num_chunks": launch.num_chunks}
        workspace = base + self.workspace_offset + self.workspace_bytes * graph
        if self.routing is None:  # a routed GEMM: the words, no tables
            return words | {
                "tensormap_workspace": workspace,
                "total_tiles": launch.tiles_bound,
                "persistent_blocks": launch.persistent_blocks,
            }
        tables = base + self._tables(graph)
        alpha = (
            {} if launch.alpha_offset is None else {"alpha_pointers": tables + launch.alpha_offset}
        )
        return alpha | {
            "problem_sizes": tables + launch.sizes_offset,
            "abc_pointers": tables + launch.abc_offset,
            "scale_pointers": tables + launch.scales_offset,
            "cta_prefix": tables + launch.prefix_offset,
            "tensormap_workspace": workspace,
            "total_tiles": launch.tiles_bound,
            "persistent_blocks": launch.persistent_blocks,
        }

    # words ------------------------------------------------------------------------------

    def _tables(self, graph: bool) -> int:
        return self.tables_offset + self.tables_bytes * graph

    def _plan_words(self, tables: int) -> list[int]:
        tile_m, tile_n, _tile_k = self.gemm_variant.tile_mnk
        words = [0] * (self.words_bytes // 8)
        header = {
            P_EXPERTS: self.experts,
            P_LAYOUT: LAYOUTS.index(self.layout),
            P_CAPACITY: self.capacity,
            P_N: self.n,
            P_K: self.k,
            P_TILE_M: tile_m,
            P_TILE_N: tile_n,
            P_A_ROW_BYTES: self.k // 2,
            P_C_ROW_BYTES: 2 * self.n,
            P_SFA_ROW_BYTES: round_up(self.k // SF_VEC_SIZE, 4),
            P_B_EXPERT_BYTES: self.n * self.k // 2,
            P_SFB_EXPERT_BYTES: blocked_scale_bytes(self.n, self.k),
            P_SFA_EXPERT_BYTES: blocked_scale_bytes(self.capacity, self.k),
        }
        header[P_SFA_UNIT_BYTES] = header[
            P_SFA_ROW_BYTES if self.layout == "contiguous" else P_SFA_EXPERT_BYTES
        ]
        for index, value in header.items():
            words[index] = value
        for c, chunk in enumerate(self.chunks if self.routing is not None else ()):
            record = P_HEADER_WORDS + C_WORDS * c
            words[record + C_START] = chunk.first
            words[record + C_COUNT] = chunk.experts
            words[record + C_GROUPS] = chunk.num_groups
            words[record + C_SIZES] = tables + chunk.sizes_offset
            words[record + C_ABC] = tables + chunk.abc_offset
            words[record + C_SCALES] = tables + chunk.scales_offset
            words[record + C_PREFIX] = tables + chunk.prefix_offset
            if chunk.alpha_offset is not None:
                words[record + C_ALPHA] = tables + chunk.alpha_offset
        return words

    @property
    def alpha(self) -> bool:
        """Whether the GEMMs take a per-expert alpha (a run then passes its address)."""
        return self.gemm_variant.alpha

    @property
    def run_fields(self) -> tuple[str, ...]:
        """The operands a run passes, in run-word order."""
        return RUN_FIELDS if self.alpha else RUN_FIELDS[:R_ALPHA]

    def run_table(self, pointers) -> bytes:
        """A slot's bytes for the device addresses of :attr:`run_fields`, in order."""
        return struct.pack(
            f"<{self.slot_bytes // 8}Q", *pointers, *[0] * (self.slot_bytes // 8 - len(pointers))
        )

    # operands ---------------------------------------------------------------------------

    def operand_bytes(self) -> dict[str, int]:
        """Bytes of each operand the launches may touch (for any routing)."""
        e, n, k, cap = self.experts, self.n, self.k, self.capacity
        if self.layout == "contiguous":
            rows = cap
            sfa = contiguous_scale_rows(cap, e) * round_up(k // SF_VEC_SIZE, 4)
            routing = 4 * (e + 1)
        else:
            rows = e * cap
            sfa = e * blocked_scale_bytes(cap, k)
            routing = 4 * e
        return {
            "routing": routing,
            "a": rows * k // 2,
            "b": e * n * k // 2,
            "c": rows * n * 2,
            "sfa": sfa,
            "sfb": e * blocked_scale_bytes(n, k),
            "alpha": 4 * e,
        }
