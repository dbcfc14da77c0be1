"""MoE routing setup: device token counts -> the tables the grouped GEMM kernels read.

A router decides on the GPU how many tokens each expert gets. This kernel runs on the
same stream just before the grouped GEMM and writes, for every sub-launch ("chunk") of
at most ``num_groups`` experts, exactly the tables the GEMM kernels already read:
problem sizes (m, n, k, 1), A/B/C and SFA/SFB pointers, and the CTA prefix, with the
experts that got no tokens compacted away (the GEMM schedulers allow empty groups only
after the last group with tiles). The GEMM cubins stay as they are: they take the total
tile count from ``cta_prefix[G]`` on the device, so a grid fixed at plan creation serves
every routing, and an all-empty routing launches CTAs that find no tile. The kernel lets
its dependents launch at once (``griddepcontrol.launch_dependents``): the sm_90a GEMM
families are launched with programmatic stream serialization and wait for this grid in
``griddepcontrol.wait`` before they read the tables, so their launch and set-up overlap
it (a GEMM launched without that attribute, as the sm_100a one, waits as before).

Two layouts (``nvfp4_aot.moe`` documents them with a picture):

* contiguous (layout 0): ``routing`` is int32 offsets[E + 1]; expert e owns the rows
  offsets[e] .. offsets[e + 1] of A (T, k/2) and C (T, n). Its activation scales start
  at row sf_offset[e] = sum over j < e of round_up(m_j, 128) of one blocked SFA buffer.
* masked (layout 1): ``routing`` is int32 masked_m[E]; expert e owns rows
  e * max_m .. e * max_m + masked_m[e] of A (E * max_m, k/2) and C (E * max_m, n), and
  the blocked SFA of max_m rows at e * blocked_scale_bytes(max_m, k).

Hostile counts cannot make the GEMM write outside C: every expert's rows are clamped
to the plan's capacity (contiguous: 0 <= offsets[e] <= offsets[e + 1] <= capacity after
clamping; masked: 0 <= m_e <= max_m).

One CTA per chunk, one thread per expert of the chunk (threads > G, the chunk's GEMM
variant's group count, at most ``num_groups``, which the variant is compiled for: the
CTA has ``threads_for(num_groups)`` threads). The
contiguous layout's scale offset of the chunk's first expert is a sum over all earlier
experts, which each CTA adds up itself (no inter-CTA communication).

Kernel parameters: ``plan`` (int64 words written once by the runtime: sizes, strides
and per chunk the addresses of its tables), ``run`` (int64 words per run: the routing
array and the A, B, C, SFA, SFB base addresses, and the per-expert FP32 alpha array's
when the GEMM variant has alpha: group g's alpha pointer is then alpha + 4 * expert),
``num_chunks`` (int32: the grid). The
words' layout has one home, :mod:`nvfp4_aot.moe_layout`.
"""

import cutlass
import cutlass.cute as cute
from cutlass.cute.runtime import make_ptr
from cutlass.memory import SmemAllocator

from ..moe_layout import (
    C_ABC,
    C_ALPHA,
    C_COUNT,
    C_GROUPS,
    C_PREFIX,
    C_SCALES,
    C_SIZES,
    C_START,
    C_WORDS,
    LAYOUTS,
    P_A_ROW_BYTES,
    P_B_EXPERT_BYTES,
    P_C_ROW_BYTES,
    P_CAPACITY,
    P_EXPERTS,
    P_HEADER_WORDS,
    P_K,
    P_LAYOUT,
    P_N,
    P_SFA_EXPERT_BYTES,
    P_SFA_ROW_BYTES,
    P_SFB_EXPERT_BYTES,
    P_TILE_M,
    P_TILE_N,
    R_A,
    R_ALPHA,
    R_B,
    R_C,
    R_ROUTING,
    R_SFA,
    R_SFB,
    R_WORDS,
    SF_BLOCK_ROWS,
)
from .cta_scan import block_scan

FAMILY = "moe_routing"
ARCHS = ("sm_90a", "sm_100a", "sm_103a")
THREADS = 128  # the CTA of the 120-group variant; see threads_for
LAYOUT_CONTIGUOUS = LAYOUTS.index("contiguous")
MAX_CHUNKS = 1 << 16  # an extent for the plan words' tensor, far past any real plan

# No output tiles of its own (the GEMM's tile is a plan word); the bake records a tile
# shape for every family.
TILE_M, TILE_N, TILE_K = 1, 1, 1


def gemm_table(plan: cute.Tensor, word, dtype, layout) -> cute.Tensor:
    """The GEMM table whose device address plan word ``word`` holds (inlined at trace)."""
    pointer = cute.make_ptr(dtype, plan[word], cute.AddressSpace.gmem, assumed_align=16)
    return cute.make_tensor(pointer, layout)


@cute.jit
def expert_rows(expert, routing: cute.Tensor, layout, capacity):
    """(first row, rows) of ``expert``, clamped to the plan's capacity."""
    first = cutlass.Int32(0)
    rows = cutlass.Int32(0)
    if layout == LAYOUT_CONTIGUOUS:
        start = cutlass.min(cutlass.max(routing[expert], 0), capacity)
        end = cutlass.min(cutlass.max(routing[expert + 1], start), capacity)
        first = start
        rows = end - start
    else:
        rows = cutlass.min(cutlass.max(routing[expert], 0), capacity)
        first = expert * capacity
    return first, rows


@cute.jit
def place_experts(expert, present, routing: cute.Tensor, layout, capacity, n, tile_m, tile_n,
                  s_warp: cute.Tensor, tidx):  # fmt: skip
    """Every thread of the CTA places its ``expert`` (where ``present``) among the CTA's by
    three CTA scans: (first row, rows, 1 if it has tokens, its slot among the experts
    with tokens, how many have tokens, the output tiles before it, all tiles, its
    blocked-scale row among the CTA's experts). The routing kernel and the routed GEMMs
    (:mod:`.routed_groups`) place experts alike."""
    first = cutlass.Int32(0)
    rows = cutlass.Int32(0)
    if present:
        first, rows = expert_rows(expert, routing, layout, capacity)
    active = cutlass.Int32(0)
    tiles = cutlass.Int32(0)
    if rows > 0:
        active = cutlass.Int32(1)
        tiles = (rows + tile_m - 1) // tile_m * ((n + tile_n - 1) // tile_n)
    padded = (rows + SF_BLOCK_ROWS - 1) // SF_BLOCK_ROWS * SF_BLOCK_ROWS
    slot, used = block_scan(active, s_warp, tidx)
    tile_before, total_tiles = block_scan(tiles, s_warp, tidx)
    sf_row, _sf_total = block_scan(padded, s_warp, tidx)
    return first, rows, active, slot, used, tile_before, total_tiles, sf_row


def threads_for(num_groups: int) -> int:
    """Threads of the CTA that fills a chunk of ``num_groups`` groups: one per group and
    one more (thread G writes the prefix's total), in whole warps."""
    return max(THREADS, (num_groups + 1 + 31) // 32 * 32)


@cute.kernel
def kernel(ptr_of_plan: cute.Pointer, ptr_of_run: cute.Pointer, num_groups: cutlass.Constexpr[int]):
    # The GEMM after this kernel is launched with programmatic stream serialization: let
    # its CTAs start now (they wait in griddepcontrol.wait until this grid has finished).
    cute.arch.griddepcontrol_launch_dependents()
    threads = threads_for(num_groups)
    warps = threads // 32
    tidx, _, _ = cute.arch.thread_idx()
    chunk, _, _ = cute.arch.block_idx()
    # static extents: a shape that depended on num_chunks would be a host-derived kernel
    # parameter, which the launch-ABI capture cannot reproduce (and need not)
    plan = cute.make_tensor(ptr_of_plan, cute.make_layout(P_HEADER_WORDS + MAX_CHUNKS * C_WORDS))
    run = cute.make_tensor(ptr_of_run, cute.make_layout(R_WORDS))

    @cute.struct
    class SharedStorage:
        warp_totals: cute.struct.MemRange[cutlass.Int32, warps]

    storage = SmemAllocator().allocate(SharedStorage)
    s_warp = storage.warp_totals.get_tensor(cute.make_layout(warps))

    experts = cutlass.Int32(plan[P_EXPERTS])
    layout = cutlass.Int32(plan[P_LAYOUT])
    capacity = cutlass.Int32(plan[P_CAPACITY])
    n = cutlass.Int32(plan[P_N])
    k = cutlass.Int32(plan[P_K])
    tile_m = cutlass.Int32(plan[P_TILE_M])
    tile_n = cutlass.Int32(plan[P_TILE_N])
    record = P_HEADER_WORDS + chunk * C_WORDS
    first_expert = cutlass.Int32(plan[record + C_START])
    chunk_experts = cutlass.Int32(plan[record + C_COUNT])
    groups = cutlass.Int32(plan[record + C_GROUPS])
    routing = cute.make_tensor(
        cute.make_ptr(cutlass.Int32, run[R_ROUTING], cute.AddressSpace.gmem, assumed_align=4),
        cute.make_layout(experts + 1),
    )

    # Contiguous layout: the blocked-scale row where this chunk's first expert starts.
    sf_before = cutlass.Int32(0)
    if layout == LAYOUT_CONTIGUOUS:
        for base in cutlass.range(0, first_expert, threads, unroll=1):
            padded = cutlass.Int32(0)
            if base + tidx < first_expert:
                _first, rows = expert_rows(base + tidx, routing, layout, capacity)
                padded = (rows + SF_BLOCK_ROWS - 1) // SF_BLOCK_ROWS * SF_BLOCK_ROWS
            _before, total = block_scan(padded, s_warp, tidx)
            sf_before = sf_before + total

    expert = first_expert + tidx
    first, rows, active, slot, used, tile_before, total_tiles, sf_row = place_experts(
        expert, tidx < chunk_experts, routing, layout, capacity, n, tile_m, tile_n, s_warp, tidx
    )
    sf_row = sf_row + sf_before

    sizes = gemm_table(
        plan, record + C_SIZES, cutlass.Int32, cute.make_layout((groups, 4), stride=(4, 1))
    )
    abc = gemm_table(
        plan, record + C_ABC, cutlass.Int64, cute.make_layout((groups, 3), stride=(3, 1))
    )
    scales = gemm_table(
        plan, record + C_SCALES, cutlass.Int64, cute.make_layout((groups, 2), stride=(2, 1))
    )
    prefix = gemm_table(plan, record + C_PREFIX, cutlass.Int32, cute.make_layout(groups + 1))
    # a GEMM variant with alpha: each group's pointer to its expert's FP32 alpha
    has_alpha = plan[record + C_ALPHA] != 0
    alphas = gemm_table(plan, record + C_ALPHA, cutlass.Int64, cute.make_layout(groups))

    if active == 1:
        expert64 = cutlass.Int64(expert)
        sizes[slot, 0] = rows
        sizes[slot, 1] = n
        sizes[slot, 2] = k
        sizes[slot, 3] = cutlass.Int32(1)
        abc[slot, 0] = run[R_A] + cutlass.Int64(first) * plan[P_A_ROW_BYTES]
        abc[slot, 1] = run[R_B] + expert64 * plan[P_B_EXPERT_BYTES]
        abc[slot, 2] = run[R_C] + cutlass.Int64(first) * plan[P_C_ROW_BYTES]
        if layout == LAYOUT_CONTIGUOUS:
            scales[slot, 0] = run[R_SFA] + cutlass.Int64(sf_row) * plan[P_SFA_ROW_BYTES]
        else:
            scales[slot, 0] = run[R_SFA] + expert64 * plan[P_SFA_EXPERT_BYTES]
        scales[slot, 1] = run[R_SFB] + expert64 * plan[P_SFB_EXPERT_BYTES]
        if has_alpha:
            alphas[slot] = run[R_ALPHA] + expert64 * 4
        prefix[slot] = tile_before
    # Slots past the active experts: empty groups (zero sizes and pointers) whose CTA
    # prefix entry is the total, up to and including prefix[groups].
    if tidx >= used:
        if tidx < groups:
            for j in cutlass.range_constexpr(4):
                sizes[tidx, j] = cutlass.Int32(0)
            for j in cutlass.range_constexpr(3):
                abc[tidx, j] = cutlass.Int64(0)
            for j in cutlass.range_constexpr(2):
                scales[tidx, j] = cutlass.Int64(0)
            if has_alpha:
                alphas[tidx] = cutlass.Int64(0)
        if tidx <= groups:
            prefix[tidx] = total_tiles


@cute.jit
def routing_host(
    ptr_of_plan: cute.Pointer,
    ptr_of_run: cute.Pointer,
    num_chunks: cutlass.Int32,
    num_groups: cutlass.Constexpr[int],
):
    """Launch one CTA per chunk of at most ``num_groups`` experts."""
    kernel(ptr_of_plan, ptr_of_run, num_groups).launch(
        grid=(num_chunks, 1, 1), block=[threads_for(num_groups), 1, 1]
    )
    return


def compile(num_groups: int):
    """Compile for chunks of at most ``num_groups`` experts."""
    if num_groups < 1:
        raise ValueError(f"the routing kernel handles chunks of >= 1 groups, got {num_groups}")
    gmem = cute.AddressSpace.gmem
    return cute.compile(
        routing_host,
        make_ptr(cutlass.Int64, 0, gmem, assumed_align=16),
        make_ptr(cutlass.Int64, 0, gmem, assumed_align=16),
        cutlass.Int32(1),
        num_groups,
    )
