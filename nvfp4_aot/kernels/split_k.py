"""Split-K for a persistent grouped GEMM whose tiles leave SMs idle (device code).

When a launch has at most half as many tiles as CTAs, each tile's K tiles are split into
``splits`` = min(CTAs // tiles, ``max_splits``, its K tiles) consecutive ranges, one
unit each, and a CTA runs one unit alone: the CTAs that had no tile share the weight
stream instead of waiting. Every unit writes its FP32 accumulator fragment to a
partial slot of its own in the workspace and counts itself in the tile's counter; the
unit that arrives last adds the tile's partials in range order (so the sum does not
depend on arrival order) into its accumulator, resets the counter for the next launch,
and runs the epilogue. With more tiles than that, ``splits`` is 1 and nothing changes.

Workspace of a launch of P CTAs (all zero before its first launch: the counters):
``[P x tensormaps] [P x partial slots] [P x 4-byte counters]``; a slot holds every
consumer thread's fragment, thread t's at t x fragment bytes. Counters are indexed by
tile (< P / 2 whenever ``splits`` > 1).
"""

import cutlass
import cutlass.cute as cute
from cutlass._mlir.dialects import llvm
from cutlass.cutlass_dsl import dsl_user_op

from .group_search import ceil_div, find_group
from .sm90_common import asm, asm_i32, ir_i32


def _i64(v, loc, ip):
    return cutlass.Int64(v).ir_value(loc=loc, ip=ip)


def _f32(v, loc, ip):
    return cutlass.Float32(v).ir_value(loc=loc, ip=ip)


@dsl_user_op
def store_v4_f32(address: cutlass.Int64, values, *, loc=None, ip=None) -> None:
    """Four Float32 to 16 bytes of global memory."""
    operands = [_i64(address, loc, ip)] + [_f32(v, loc, ip) for v in values]
    asm("st.global.v4.f32 [$0], {$1, $2, $3, $4};", "l,f,f,f,f", operands, loc, ip)


@dsl_user_op
def load_v4_f32(address: cutlass.Int64, *, loc=None, ip=None):
    """16 bytes of global memory as four Float32, read at L2 (another CTA wrote them;
    this SM's L1 may hold the slot's bytes of an earlier launch)."""
    struct = llvm.StructType.get_literal([cutlass.Float32.mlir_type] * 4)
    value = llvm.inline_asm(
        struct,
        [_i64(address, loc, ip)],
        "ld.global.cg.v4.f32 {$0, $1, $2, $3}, [$4];",
        "=f,=f,=f,=f,l,~{memory}",
        has_side_effects=True,
        is_align_stack=False,
        asm_dialect=llvm.AsmDialect.AD_ATT,
        loc=loc,
        ip=ip,
    )
    return [
        cutlass.Float32(llvm.extractvalue(cutlass.Float32.mlir_type, value, [i], loc=loc, ip=ip))
        for i in range(4)
    ]


@dsl_user_op
def fence_gpu(*, loc=None, ip=None) -> None:
    """Order this thread's global accesses gpu-wide (publish before / acquire after)."""
    asm("fence.acq_rel.gpu;", "", [], loc, ip)


# One thread counts its CTA's unit in the tile's counter: 1 if it was the last of
# ``$2 + 1`` units (after the fence every consumer thread ran on its partial's stores
# and a CTA barrier), else 0.
_ARRIVE_PTX = """{
.reg .u32 old;
.reg .pred p;
atom.acq_rel.gpu.global.add.u32 old, [$1], 1;
setp.eq.u32 p, old, $2;
selp.b32 $0, 1, 0, p;
}"""


@dsl_user_op
def arrive(counter: cutlass.Int64, others: cutlass.Int32, *, loc=None, ip=None):
    operands = [_i64(counter, loc, ip), ir_i32(others, loc, ip)]
    return asm_i32(_ARRIVE_PTX, "=r,l,r", operands, loc, ip)


@dsl_user_op
def reset(counter: cutlass.Int64, *, loc=None, ip=None) -> None:
    asm("st.relaxed.gpu.global.u32 [$0], 0;", "l", [_i64(counter, loc, ip)], loc, ip)


@dsl_user_op
def barrier_or(barrier, flag: cutlass.Int32, *, loc=None, ip=None):
    """Named barrier ``barrier`` (a pipeline.NamedBarrier) that also ORs ``flag`` over
    its threads: every thread gets 1 if any passed non-zero."""
    ptx = (
        "{\n.reg .pred p, q;\nsetp.ne.b32 q, $1, 0;\n"
        f"bar.red.or.pred p, {barrier.barrier_id}, {barrier.num_threads}, q;\n"
        "selp.b32 $0, 1, 0, p;\n}"
    )
    return asm_i32(ptx, "=r,r", [ir_i32(flag, loc, ip)], loc, ip)


@cute.jit
def unit_of_cta(
    bidx: cutlass.Int32,
    grid_dim_x: cutlass.Int32,
    tile_start: cutlass.Int32,
    tile_end: cutlass.Int32,
    cta_prefix: cute.Tensor,
    problem_sizes: cute.Tensor,
    num_groups: cutlass.Constexpr[int],
    tile_k: cutlass.Constexpr[int],
    max_splits: cutlass.Constexpr[int],
):
    """(tile_start, tile_end, split, splits) of CTA ``bidx``. With more than half as many
    tiles as CTAs: the tile range given, split 0 of 1. Else the CTA's unit: tile
    bidx // S, range bidx % S of S = min(CTAs // tiles, max_splits), and the tile takes
    splits = min(S, its K tiles) units, so none is empty (a CTA past them has no tile)."""
    total_tiles = cta_prefix[num_groups]
    per_tile = cutlass.Int32(1)
    if total_tiles > 0:
        per_tile = cutlass.max(cutlass.min(grid_dim_x // total_tiles, max_splits), 1)
    split = cutlass.Int32(0)
    splits = cutlass.Int32(1)
    if per_tile > 1:
        tile_start = bidx // per_tile
        split = bidx - tile_start * per_tile
        tile_end = tile_start
        if tile_start < total_tiles:
            group = find_group(tile_start, cta_prefix, num_groups)
            splits = cutlass.min(per_tile, ceil_div(problem_sizes[group, 2], tile_k))
            if split < splits:
                tile_end = tile_start + 1
    return tile_start, tile_end, split, splits


def k_range(k_tile_cnt, split, splits):
    """[k_begin, k_end) of K tiles of range ``split`` of ``splits`` <= k_tile_cnt: sizes
    differ by one at most, none empty."""
    return split * k_tile_cnt // splits, (split + 1) * k_tile_cnt // splits


def slot_bytes(fragment_elements: int, threads: int) -> int:
    """Bytes of one partial slot: every consumer thread's FP32 fragment."""
    return fragment_elements * 4 * threads


@cute.jit
def sum_partials(
    acc,
    workspace: cutlass.Int64,
    grid_dim_x: cutlass.Int32,
    bidx: cutlass.Int32,
    tidx: cutlass.Int32,
    tile_idx: cutlass.Int32,
    split: cutlass.Int32,
    splits: cutlass.Int32,
    barrier,
    tensormap_bytes: cutlass.Constexpr[int],
    threads: cutlass.Constexpr[int],
):
    """Publish this unit's accumulator (range ``split`` of the tile's ``splits``) and
    count it; returns 1 in the CTA whose unit was the tile's last, with ``acc`` then the
    sum of the tile's partials in range order (and the counter reset), else 0. Every
    consumer thread calls it."""
    fragment = cute.size(acc)
    slot = slot_bytes(fragment, threads)
    partials = workspace + cutlass.Int64(grid_dim_x) * tensormap_bytes
    counter = partials + cutlass.Int64(grid_dim_x) * slot + cutlass.Int64(tile_idx) * 4
    mine = partials + cutlass.Int64(bidx) * slot + cutlass.Int64(tidx) * (fragment * 4)
    for i in cutlass.range_constexpr(fragment // 4):
        store_v4_f32(mine + i * 16, [acc[4 * i + j] for j in range(4)])
    fence_gpu()
    barrier.arrive_and_wait()
    last = cutlass.Int32(0)
    if tidx == 0:
        last = arrive(counter, splits - 1)
    last = barrier_or(barrier, last)
    if last != 0:
        fence_gpu()
        acc.fill(0.0)
        # the tile's units are CTAs bidx - split, ... (consecutive: see unit_of_cta)
        first = partials + cutlass.Int64(bidx - split) * slot + cutlass.Int64(tidx) * (fragment * 4)
        for s in cutlass.range(splits, unroll=1):
            for i in cutlass.range_constexpr(fragment // 4):
                values = load_v4_f32(first + cutlass.Int64(s) * slot + i * 16)
                for j in cutlass.range_constexpr(4):
                    acc[4 * i + j] = acc[4 * i + j] + values[j]
        if tidx == 0:
            reset(counter)
    return last
