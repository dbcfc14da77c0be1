"""Hopper (sm_90a) NVFP4 grouped GEMM that decodes the activations once per launch.

Same inputs, tiles, schedule and consumer ping-pong as :mod:`.sm90_grouped_gemm`
(read its docstring first); the difference is where the activations A are decoded.
There every CTA decodes the activation rows of each tile it computes, so an
activation element is decoded once per N tile of its group (32 times on a
4096-wide group).  Here:

  phase 1  every thread of every CTA decodes a slice of all groups' A (FP4 x SFA,
           plain global loads, several tasks in flight per thread) into FP16 rows of
           k_pad = ceil(k / 128) * 128 elements, already in the per-K-tile permuted
           order the consumers' wgmma expects, in an activation scratch that follows
           the tensormaps in the workspace.  Then a grid barrier: the launch is
           cooperative, so all CTAs are co-resident.
  phase 2  the producer warp loads per K tile the FP16 activations by TMA (a fifth
           per-CTA tensormap: the raw-A descriptor switched to FP16 with 128B swizzle)
           straight into the stage's swizzled buffer that the wgmma reads, plus the raw
           weights and weight scales.  The consumer warpgroups decode only their 64
           weight rows and release a stage once their wgmmas on it have retired.

The tile walks read a tile table staged in shared memory with the group data (first
tile, m, n, C of each group), and the consumers' turns run on across tiles instead of
meeting at a barrier after each one, so a warpgroup's epilogue overlaps the other
one's wgmmas (1 % faster over 28 H200 shapes, up to 4 % where tiles are short).

Workspace of one launch with P CTAs (sizes in ``WORKSPACE``, checked at import):
  [P x 4 x 128 B  per CTA the tensormaps A16 (in the raw-A slot), B, -, SFB; the
                  unused SFA slot of CTA 0 holds the grid barrier's arrival counter
                  (+0) and generation (+4), at the same place whatever P is]
  [per group g    m_g x k_pad_g FP16 activations, row-major]
The counter must be 0 before the first launch (the runtime zeroes the workspace once);
every launch leaves it at 0, so sub-launches of different grid sizes can share it.

Limits as for the other kernel; operand alignment: A and SFA are read only by 4-byte
global loads in phase 1 (4-byte aligned suffices), B and SFB by TMA (16-byte aligned,
``assumed_align=16``, not rounded), C is stored element-wise (2 bytes).  The runtime
requires 32 bytes for all five, the sm_100a kernel's requirement.

This pays where each activation row is reused by many N tiles and K is long (H200:
-15 % on 8 x (m 64-248, 4096, 7168)); on small launches phase 1 and the barrier cost a
few microseconds, so the runtime picks between the two kernels per plan.
"""

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
from cutlass.cute.nvgpu import warpgroup
from cutlass.cutlass_dsl import dsl_user_op
from cutlass.memory import SmemAllocator
from cutlass.tensor_utils import TensorMapManager, TensorMapUpdateMode

from . import family_named
from .epilogue import alpha_table, output_scale
from .group_search import advance_group, ceil_div, cta_tile_range, find_group
from .inline_ptx import asm, asm_i32, ir_i32, ir_i64
from .sm90_common import (
    ACC_RESCALE,
    ARCHS,
    B_RAW_BYTES,
    BYTES_PER_TENSORMAP,
    DEC_ELEMS_A,
    NUM_CONSUMER_WARPS,
    NUM_TENSORMAPS,
    PRODUCER_WARP,
    SF_BYTES,
    SF_HALVES,
    THREADS,
    TILE_K,
    TILE_KB,
    TILE_M,
    TILE_N,
    compile_host,
    consumer_mma,
    consumer_wait,
    decode_scales,
    decode_weights,
    decode_word,
    gmem_u8,
    host_operands,
    load_weights,
    make_ab_tensor,
    make_sf_tensor,
    pingpong_barriers,
    store_tile,
    thread_offsets,
    tma_partition,
)

FAMILY = "sm90_nvfp4_grouped_gemm_a16"
__all__ = ["ARCHS", "FAMILY", "THREADS", "TILE_K", "TILE_M", "TILE_N", "compile"]

NUM_STAGES = 5  # TMA pipeline depth (FP16 activations + raw weights + weight scales)
PHASE1_TASKS_IN_FLIGHT = 2  # decode tasks whose global loads a thread issues together

_A16_STAGE_BYTES = DEC_ELEMS_A * 2  # one K tile of FP16 activations (two 128 x 64 boxes)
_TMA_BYTES_PER_STAGE = _A16_STAGE_BYTES + B_RAW_BYTES + SF_BYTES
_BARRIER_OFFSET = 2 * BYTES_PER_TENSORMAP  # CTA 0's (unused) SFA tensormap slot

WORKSPACE = family_named(FAMILY).workspace
assert WORKSPACE.bytes_per_block == NUM_TENSORMAPS * BYTES_PER_TENSORMAP
assert WORKSPACE.zero_once
assert WORKSPACE.activation_bytes_per_element == 2
assert WORKSPACE.activation_k_multiple == TILE_K


# ---------------------------------------------------------------------------
# Device helpers (inline PTX)
# ---------------------------------------------------------------------------


@dsl_user_op
def ldg_b32(addr: cutlass.Int64, *, loc=None, ip=None) -> cutlass.Int32:
    """4-byte read-only global load."""
    return asm_i32("ld.global.nc.b32 $0, [$1];", "=r,l", [ir_i64(addr, loc, ip)], loc, ip)


@dsl_user_op
def stg_v4(
    addr: cutlass.Int64,
    v0: cutlass.Int32,
    v1: cutlass.Int32,
    v2: cutlass.Int32,
    v3: cutlass.Int32,
    *,
    loc=None,
    ip=None,
) -> None:
    """16-byte global store."""
    asm(
        "st.global.v4.b32 [$0], {$1, $2, $3, $4};",
        "l,r,r,r,r",
        [ir_i64(addr, loc, ip)] + [ir_i32(v, loc, ip) for v in (v0, v1, v2, v3)],
        loc,
        ip,
    )


@dsl_user_op
def fence_proxy_async_global(*, loc=None, ip=None) -> None:
    """Order this thread's generic-proxy global accesses with async-proxy (TMA) ones."""
    asm("fence.proxy.async.global;", "", [], loc, ip)


# Grid barrier for one thread per CTA (all CTAs co-resident).  Words at $0: [0]
# arrival counter, [4] generation.  The thread reads the generation, then arrives
# (acq_rel atomic after a gpu-scope fence that publishes the CTA's phase-1 stores,
# ordered before it by the CTA barrier).  The last arriver (old == grid - 1) resets
# the counter to 0 and bumps the generation with a release store; the others spin
# with acquire loads until the generation changes.
_GRID_BARRIER_PTX = """{
.reg .u32 g0, old, g1;
.reg .pred p, q;
ld.acquire.gpu.global.u32 g0, [$0+4];
fence.acq_rel.gpu;
atom.acq_rel.gpu.global.add.u32 old, [$0], 1;
setp.eq.u32 p, old, $1;
@!p bra GB_SPIN;
st.relaxed.gpu.global.u32 [$0], 0;
add.u32 g1, g0, 1;
st.release.gpu.global.u32 [$0+4], g1;
bra GB_DONE;
GB_SPIN:
ld.acquire.gpu.global.u32 g1, [$0+4];
setp.eq.u32 q, g1, g0;
@q bra GB_SPIN;
GB_DONE:
fence.acq_rel.gpu;
fence.proxy.async.global;
}"""


@dsl_user_op
def grid_barrier_thread(ctr_addr: cutlass.Int64, last: cutlass.Int32, *, loc=None, ip=None):
    asm(_GRID_BARRIER_PTX, "l,r", [ir_i64(ctr_addr, loc, ip), ir_i32(last, loc, ip)], loc, ip)


@dsl_user_op
def tmap_set_f16_sw128(desc: cutlass.Int64, *, loc=None, ip=None) -> None:
    """Element type FP16 (6) and 128B swizzle (3) in a descriptor in global memory."""
    asm(
        "tensormap.replace.tile.elemtype.global.b1024.b32 [$0], 6;\n"
        "tensormap.replace.tile.swizzle_mode.global.b1024.b32 [$0], 3;",
        "l",
        [ir_i64(desc, loc, ip)],
        loc,
        ip,
    )


@dsl_user_op
def tmap_update_2d(
    desc: cutlass.Int64,
    addr: cutlass.Int64,
    dim0: cutlass.Int32,
    dim1: cutlass.Int32,
    stride_bytes: cutlass.Int64,
    *,
    loc=None,
    ip=None,
):
    """Address, extents and row pitch of a rank-2 descriptor in global memory."""
    asm(
        "tensormap.replace.tile.global_address.global.b1024.b64 [$0], $1;\n"
        "tensormap.replace.tile.global_dim.global.b1024.b32 [$0], 0, $2;\n"
        "tensormap.replace.tile.global_dim.global.b1024.b32 [$0], 1, $3;\n"
        "tensormap.replace.tile.global_stride.global.b1024.b64 [$0], 0, $4;",
        "l,l,r,r,l",
        [
            ir_i64(desc, loc, ip),
            ir_i64(addr, loc, ip),
            ir_i32(dim0, loc, ip),
            ir_i32(dim1, loc, ip),
            ir_i64(stride_bytes, loc, ip),
        ],
        loc,
        ip,
    )


@dsl_user_op
def fence_tmap_release(*, loc=None, ip=None) -> None:
    asm("fence.proxy.tensormap::generic.release.gpu;", "", [], loc, ip)


@dsl_user_op
def fence_tmap_acquire(desc: cutlass.Int64, *, loc=None, ip=None) -> None:
    asm(
        "fence.proxy.tensormap::generic.acquire.gpu [$0], 128;",
        "l",
        [ir_i64(desc, loc, ip)],
        loc,
        ip,
    )


@dsl_user_op
def tma_load_2d(
    dst: cutlass.Int32,
    desc: cutlass.Int64,
    c0: cutlass.Int32,
    c1: cutlass.Int32,
    mbar: cutlass.Int32,
    *,
    loc=None,
    ip=None,
) -> None:
    """One 2-D TMA box (inner coordinate c0, outer c1) into shared memory at dst."""
    asm(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
        " [$0], [$1, {$2, $3}], [$4];",
        "r,l,r,r,r",
        [
            ir_i32(dst, loc, ip),
            ir_i64(desc, loc, ip),
            ir_i32(c0, loc, ip),
            ir_i32(c1, loc, ip),
            ir_i32(mbar, loc, ip),
        ],
        loc,
        ip,
    )


# ---------------------------------------------------------------------------
# Phase 1
# ---------------------------------------------------------------------------


@cute.jit
def _stage_groups(
    tensor_of_problem_sizes: cute.Tensor,
    tensor_of_abc_ptrs: cute.Tensor,
    tensor_of_sfasfb_ptrs: cute.Tensor,
    tensor_of_cta_prefix: cute.Tensor,
    groups: tuple,
    tiles: tuple,
    tidx: cutlass.Int32,
    num_groups: cutlass.Constexpr[int],
):
    """Per group into shared memory: k, the A and SFA addresses and the prefix sum of
    decode tasks (``groups`` = tasks, prefix, k, a, sfa tensors), so that phase 1 and
    the producer find any group's data with shared-memory loads; and the tile table
    (``tiles`` = first tile of each group and the total, m, n, C address) that the
    tile walks read.  Walking the groups through global memory cost ~1 us of
    dependent loads per group, and a tile start waited for them."""
    s_tasks, s_prefix, s_k, s_a, s_sfa = groups
    s_tile_prefix, s_m, s_n, s_c = tiles
    for g in cutlass.range(tidx, num_groups, THREADS, unroll=1):
        m = tensor_of_problem_sizes[g, 0]
        k = tensor_of_problem_sizes[g, 2]
        s_tasks[g] = m * ceil_div(k, TILE_K) * 4
        s_k[g] = k
        s_m[g] = m
        s_n[g] = tensor_of_problem_sizes[g, 1]
        s_a[g] = tensor_of_abc_ptrs[g, 0]
        s_c[g] = tensor_of_abc_ptrs[g, 2]
        s_sfa[g] = tensor_of_sfasfb_ptrs[g, 0]
    for g in cutlass.range(tidx, num_groups + 1, THREADS, unroll=1):
        s_tile_prefix[g] = tensor_of_cta_prefix[g]
    cute.arch.barrier()
    for g in cutlass.range(tidx, num_groups + 1, THREADS, unroll=1):
        before = cutlass.Int32(0)
        for h in cutlass.range(g, unroll=1):
            before += s_tasks[h]
        s_prefix[g] = before
    cute.arch.barrier()


@cute.jit
def _tile_at(tile_idx: cutlass.Int32, group_idx: cutlass.Int32, tiles: tuple, s_k: cute.Tensor):
    """(group, m, n, k, coord_m, coord_n) of tile ``tile_idx``, walking on from group
    ``group_idx`` through the shared-memory tile table (the tiles of a CTA ascend)."""
    s_tile_prefix, s_m, s_n, _s_c = tiles
    group_idx = advance_group(tile_idx, group_idx, s_tile_prefix)
    m = s_m[group_idx]
    cta_m = ceil_div(m, TILE_M)
    cta_rest = tile_idx - s_tile_prefix[group_idx]
    return group_idx, m, s_n[group_idx], s_k[group_idx], cta_rest % cta_m, cta_rest // cta_m


@cute.jit
def _decode_activations(
    groups: tuple,
    a16_base: cutlass.Int64,
    gtid: cutlass.Int32,
    gstride: cutlass.Int32,
    num_groups: cutlass.Constexpr[int],
):
    """Decode every group's A (FP4 x SFA) into FP16 rows of k_pad elements.

    Task (row, K tile kt, word w) of a group, numbered (row * KT + kt) * 4 + w after
    the tasks of the groups before it, writes the 64 bytes at a16_base + 64 * task:
    the 32 FP16 values at K-tile positions 32 w .. 32 w + 31 in the consumers'
    permuted order, i.e. position 32 w + 8 s + 2 c + h holds register s, half h of
    decode_word(raw word w of 16-byte chunk c).  That is what the other kernel's
    activation decode stores at logical K 32 w + 8 s + 2 c + h of its swizzled
    buffer, so a plain TMA load feeds the same wgmma B operand; and group g's rows
    start at a16_base + 64 * prefix[g].  A thread takes tasks gtid, gtid + gstride,
    ... and issues the loads of PHASE1_TASKS_IN_FLIGHT of them before decoding any.
    """
    _s_tasks, s_prefix, s_k, s_a, s_sfa = groups
    total = s_prefix[num_groups]
    g = cutlass.Int32(0)
    cur = gtid
    while cur < total:
        loaded = []
        for u in cutlass.range_constexpr(PHASE1_TASKS_IN_FLIGHT):
            task = cur + u * gstride
            valid = task < total
            # past the end: look up the last task instead (its loads are skipped)
            looked_up = task
            if not valid:
                looked_up = total - 1
            g = advance_group(looked_up, g, s_prefix)
            local = looked_up - s_prefix[g]
            k = s_k[g]
            kt_cnt = ceil_div(k, TILE_K)
            w = local % 4
            rest = local // 4
            kt = rest % kt_cnt
            row = rest // kt_cnt
            kvalid = k - kt * TILE_K
            src = (
                s_a[g]
                + cutlass.Int64(row) * cutlass.Int64(k // 2)
                + cutlass.Int64(kt * TILE_KB + 4 * w)
            )
            words = []
            for c in cutlass.range_constexpr(4):
                word = cutlass.Int32(0)
                if valid and 32 * c < kvalid:
                    word = ldg_b32(src + 16 * c)
                words.append(word)
            # Blocked scales: atom (row // 128, 2 kt + j), row byte offset as in the
            # consumers; the word holds the scale bytes of 4 K groups.
            k_atoms = (k + 63) // 64
            atom = (row // 128) * k_atoms + 2 * kt
            sf_src = s_sfa[g] + cutlass.Int64(atom * 512 + (row % 32) * 16 + ((row // 32) % 4) * 4)
            s0 = cutlass.Int32(0)
            s1 = cutlass.Int32(0)
            if valid:
                s0 = ldg_b32(sf_src)
                if 2 * kt + 1 < k_atoms:
                    s1 = ldg_b32(sf_src + 512)
            loaded.append((task, w, valid, words, s0, s1))
        for u in cutlass.range_constexpr(PHASE1_TASKS_IN_FLIGHT):
            task, w, valid, words, s0, s1 = loaded[u]
            if valid:
                sh = (w // 2) * 8
                x0 = s0 >> sh
                x1 = s1 >> sh
                sc01 = decode_scales((x0 & 0xFF) | ((x0 >> 8) & 0xFF00))
                sc23 = decode_scales((x1 & 0xFF) | ((x1 >> 8) & 0xFF00))
                scales = (sc01[0], sc01[1], sc23[0], sc23[1])
                vals = [decode_word(words[c], scales[c]) for c in range(4)]
                dst = a16_base + cutlass.Int64(task) * 64
                for s in cutlass.range_constexpr(4):
                    stg_v4(dst + 16 * s, vals[0][s], vals[1][s], vals[2][s], vals[3][s])
        cur += PHASE1_TASKS_IN_FLIGHT * gstride


# ---------------------------------------------------------------------------
# Kernel
# ---------------------------------------------------------------------------


@cute.kernel
def kernel(
    tma_atom_a: cute.CopyAtom,
    mA: cute.Tensor,
    tma_atom_b: cute.CopyAtom,
    mB: cute.Tensor,
    tma_atom_sfa: cute.CopyAtom,
    mSFA: cute.Tensor,
    tma_atom_sfb: cute.CopyAtom,
    mSFB: cute.Tensor,
    tensor_of_abc_ptrs: cute.Tensor,
    tensor_of_sfasfb_ptrs: cute.Tensor,
    tensormaps: cute.Tensor,
    tensor_of_problem_sizes: cute.Tensor,
    tensor_of_cta_prefix: cute.Tensor,
    num_groups: cutlass.Constexpr[int],
    c_dtype: cutlass.Constexpr,
    alpha_ptrs: cute.Tensor | None,
):
    tidx, _, _ = cute.arch.thread_idx()
    warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
    bidx, _, _ = cute.arch.block_idx()
    grid_dim_x, _, _ = cute.arch.grid_dim()

    # Contiguous tile range of this CTA (same split as the sm_100a kernel).
    tile_start, tile_end = cta_tile_range(bidx, grid_dim_x, tensor_of_cta_prefix, num_groups)

    # Workspace places (see the module docstring).
    workspace = tensormaps.iterator.toint()
    barrier_words = workspace + _BARRIER_OFFSET
    a16_desc_addr = workspace + cutlass.Int64(bidx) * (NUM_TENSORMAPS * BYTES_PER_TENSORMAP)
    a16_base = workspace + cutlass.Int64(grid_dim_x) * (NUM_TENSORMAPS * BYTES_PER_TENSORMAP)

    @cute.struct
    class SharedStorage:
        ab_mbar_ptr: cute.struct.MemRange[cutlass.Int64, NUM_STAGES * 2]
        # Per group (see _stage_groups): A and SFA addresses, decode tasks and their
        # prefix sum, k.
        group_a: cute.struct.Align[cute.struct.MemRange[cutlass.Int64, num_groups], 8]
        group_sfa: cute.struct.Align[cute.struct.MemRange[cutlass.Int64, num_groups], 8]
        group_tasks: cute.struct.MemRange[cutlass.Int32, num_groups]
        group_task_prefix: cute.struct.MemRange[cutlass.Int32, num_groups + 1]
        group_k: cute.struct.MemRange[cutlass.Int32, num_groups]
        # The tile table: first tile of each group (+ total), m, n, C address.
        group_c: cute.struct.Align[cute.struct.MemRange[cutlass.Int64, num_groups], 8]
        group_tile_prefix: cute.struct.MemRange[cutlass.Int32, num_groups + 1]
        group_m: cute.struct.MemRange[cutlass.Int32, num_groups]
        group_n: cute.struct.MemRange[cutlass.Int32, num_groups]
        # FP16 activation stages (the wgmma B operand), K-major 128B-swizzled,
        # filled by two TMA boxes of 128 rows x 64 FP16 each.
        sA16: cute.struct.Align[
            cute.struct.MemRange[cutlass.Float16, NUM_STAGES * DEC_ELEMS_A], 1024
        ]
        # Raw weight stages: FP4 bytes, row-major (rows, TILE_K / 2), no swizzle.
        sB_raw: cute.struct.Align[
            cute.struct.MemRange[cutlass.Uint8, NUM_STAGES * B_RAW_BYTES], 1024
        ]
        # Raw weight scale stages: SF_HALVES x 256 bytes = TILE_K / 64 atoms.
        sSFB_raw: cute.struct.Align[
            cute.struct.MemRange[cutlass.Uint8, NUM_STAGES * SF_BYTES], 1024
        ]

    storage = SmemAllocator().allocate(SharedStorage)

    one_per_group = cute.make_layout(num_groups)
    groups = (
        storage.group_tasks.get_tensor(one_per_group),
        storage.group_task_prefix.get_tensor(cute.make_layout(num_groups + 1)),
        storage.group_k.get_tensor(one_per_group),
        storage.group_a.get_tensor(one_per_group),
        storage.group_sfa.get_tensor(one_per_group),
    )
    s_task_prefix = groups[1]
    tiles = (
        storage.group_tile_prefix.get_tensor(cute.make_layout(num_groups + 1)),
        storage.group_m.get_tensor(one_per_group),
        storage.group_n.get_tensor(one_per_group),
        storage.group_c.get_tensor(one_per_group),
    )
    s_tile_prefix, s_c = tiles[0], tiles[3]
    s_k = groups[2]

    # (TILE_N, TILE_K/2, STAGE)
    sB_raw = storage.sB_raw.get_tensor(
        cute.make_layout((TILE_N, TILE_KB, NUM_STAGES), stride=(TILE_KB, 1, B_RAW_BYTES))
    )
    # (256, SF_HALVES, 1, STAGE)
    sSFB_raw = storage.sSFB_raw.get_tensor(
        cute.make_layout((256, SF_HALVES, 1, NUM_STAGES), stride=(1, 256, SF_BYTES, SF_BYTES))
    )
    # FP16 activation stages: S<3,4,3> (byte-address 128B swizzle) o (8,64) atoms.
    a16_layout = cute.tile_to_shape(
        warpgroup.make_smem_layout_atom(warpgroup.SmemLayoutAtomKind.K_SW128, cutlass.Float16),
        (TILE_M, TILE_K, NUM_STAGES),
        order=(0, 1, 2),
    )
    # (TILE_M, TILE_K, STAGE)
    sA16 = storage.sA16.get_tensor(a16_layout.outer, swizzle=a16_layout.inner)

    # Producer = TMA (1 arrive + tx bytes), consumer = one arrive per consumer warp.
    # A stage holds FP16 activations, so it is released only after both
    # warpgroups' wgmmas that read it have retired.
    ab_pipeline = pipeline.PipelineTmaAsync.create(
        barrier_storage=storage.ab_mbar_ptr.data_ptr(),
        num_stages=NUM_STAGES,
        producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
        consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, NUM_CONSUMER_WARPS),
        tx_count=_TMA_BYTES_PER_STAGE,
        cta_layout_vmnk=cute.make_layout((1, 1, 1, 1)),
    )

    #
    # Phase 1: all threads of all CTAs decode the activations of every group
    # into the FP16 scratch, then a grid barrier.
    #
    _stage_groups(
        tensor_of_problem_sizes,
        tensor_of_abc_ptrs,
        tensor_of_sfasfb_ptrs,
        tensor_of_cta_prefix,
        groups,
        tiles,
        tidx,
        num_groups,
    )
    _decode_activations(groups, a16_base, bidx * THREADS + tidx, grid_dim_x * THREADS, num_groups)
    fence_proxy_async_global()
    cute.arch.barrier()
    if tidx == 0:
        grid_barrier_thread(barrier_words, grid_dim_x - 1)
    cute.arch.barrier()

    # (TILE_N, TILE_K/2, RestN, RestK)
    gB = cute.local_tile(mB, (TILE_N, TILE_KB), (None, None))
    # (256, SF_HALVES, 1, 1, RestK, RestRowBlock)
    gSFB = cute.local_tile(mSFB, (256, SF_HALVES, 1), (None, None, None))
    tBsB, tBgB = tma_partition(tma_atom_b, sB_raw, gB, 2)
    tBsSFB, tBgSFB = tma_partition(tma_atom_sfb, sSFB_raw, gSFB, 3)
    a16_smem_base = storage.sA16.data_ptr().toint()
    full_bar_base = storage.ab_mbar_ptr.data_ptr().toint()

    #
    # Producer warp: tensormaps (B, SFB, A16) + TMA loads.
    #
    if warp_idx == PRODUCER_WARP:
        fence_proxy_async_global()
        tensormap_manager = TensorMapManager(TensorMapUpdateMode.GMEM, BYTES_PER_TENSORMAP)
        tensormap_b_gmem_ptr = tensormap_manager.get_tensormap_ptr(
            tensormaps[(bidx, 1, None)].iterator
        )
        tensormap_sfb_gmem_ptr = tensormap_manager.get_tensormap_ptr(
            tensormaps[(bidx, 3, None)].iterator
        )
        tensormap_a16_gmem_ptr = tensormap_manager.get_tensormap_ptr(
            cute.make_ptr(
                cutlass.Int64,
                a16_desc_addr,
                cute.AddressSpace.gmem,
                assumed_align=BYTES_PER_TENSORMAP,
            )
        )
        tensormap_manager.init_tensormap_from_atom(tma_atom_b, tensormap_b_gmem_ptr, PRODUCER_WARP)
        tensormap_manager.init_tensormap_from_atom(
            tma_atom_sfb, tensormap_sfb_gmem_ptr, PRODUCER_WARP
        )
        tensormap_manager.init_tensormap_from_atom(
            tma_atom_a, tensormap_a16_gmem_ptr, PRODUCER_WARP
        )
        tensormap_manager.fence_tensormap_initialization()
        with cute.arch.elect_one():
            tmap_set_f16_sw128(a16_desc_addr)
        cute.arch.sync_warp()

        producer_state = pipeline.make_pipeline_state(
            pipeline.PipelineUserType.Producer, NUM_STAGES
        )
        if tile_start < tile_end:
            tile_idx = tile_start
            group_idx = find_group(tile_idx, s_tile_prefix, num_groups)
            prev_group_idx = cutlass.Int32(-1)
            while tile_idx < tile_end:
                group_idx, m, n, k, coord_m, coord_n = _tile_at(tile_idx, group_idx, tiles, s_k)
                k_tile_cnt = ceil_div(k, TILE_K)
                if group_idx != prev_group_idx:
                    real_b = make_ab_tensor(gmem_u8(tensor_of_abc_ptrs[group_idx, 1]), n, k)
                    real_sfb = make_sf_tensor(gmem_u8(tensor_of_sfasfb_ptrs[group_idx, 1]), n, k)
                    tensormap_manager.update_tensormap(
                        (real_b, real_sfb),
                        (tma_atom_b, tma_atom_sfb),
                        (tensormap_b_gmem_ptr, tensormap_sfb_gmem_ptr),
                        PRODUCER_WARP,
                        (None, None),
                    )
                    # A16: (m, k_pad) FP16, row pitch k_pad * 2 bytes, 64 bytes per task.
                    a16_group = a16_base + cutlass.Int64(s_task_prefix[group_idx]) * 64
                    with cute.arch.elect_one():
                        tmap_update_2d(
                            a16_desc_addr,
                            a16_group,
                            k_tile_cnt * TILE_K,
                            m,
                            cutlass.Int64(k_tile_cnt * (TILE_K * 2)),
                        )
                        fence_tmap_release()
                    cute.arch.sync_warp()
                    tensormap_manager.fence_tensormap_update(tensormap_b_gmem_ptr)
                    tensormap_manager.fence_tensormap_update(tensormap_sfb_gmem_ptr)
                    fence_tmap_acquire(a16_desc_addr)
                    prev_group_idx = group_idx

                tBgB_tile = tBgB[(None, coord_n, None)]
                tBgSFB_tile = tBgSFB[(None, 0, None, coord_n)]
                desc_b = tensormap_manager.get_tensormap_ptr(
                    tensormap_b_gmem_ptr, cute.AddressSpace.generic
                )
                desc_sfb = tensormap_manager.get_tensormap_ptr(
                    tensormap_sfb_gmem_ptr, cute.AddressSpace.generic
                )
                row0 = coord_m * TILE_M
                for k_tile in cutlass.range(k_tile_cnt, unroll=1):
                    ab_pipeline.producer_acquire(producer_state)
                    bar = ab_pipeline.producer_get_barrier(producer_state)
                    stage = producer_state.index
                    with cute.arch.elect_one():
                        dst = a16_smem_base + stage * _A16_STAGE_BYTES
                        mbar = full_bar_base + stage * 8
                        tma_load_2d(dst, a16_desc_addr, k_tile * TILE_K, row0, mbar)
                        tma_load_2d(
                            dst + TILE_M * 128, a16_desc_addr, k_tile * TILE_K + 64, row0, mbar
                        )
                    cute.copy(
                        tma_atom_b,
                        tBgB_tile[(None, k_tile)],
                        tBsB[(None, stage)],
                        tma_bar_ptr=bar,
                        tma_desc_ptr=desc_b,
                    )
                    cute.copy(
                        tma_atom_sfb,
                        tBgSFB_tile[(None, k_tile)],
                        tBsSFB[(None, stage)],
                        tma_bar_ptr=bar,
                        tma_desc_ptr=desc_sfb,
                    )
                    ab_pipeline.producer_commit(producer_state)
                    producer_state.advance()
                tile_idx += 1
            ab_pipeline.producer_tail(producer_state)

    #
    # Consumer warpgroups: C^T = B * A^T as in the other kernel; the FP16
    # activations arrive by TMA already in the permuted K order (phase 1).
    #
    if warp_idx < NUM_CONSUMER_WARPS:
        # (MMA, MMA_N, MMA_K, STAGE)
        tiled_mma, tCrB, tCrA_sets, tCrA_regs, acc, tCcC = consumer_mma(tidx, sA16)
        num_k_blocks = cute.size(tCrA_sets[0], mode=[2])
        wg, _consumer_bar, my_turn_bar, other_turn_bar = pingpong_barriers(warp_idx)
        consumer_state = pipeline.make_pipeline_state(
            pipeline.PipelineUserType.Consumer, NUM_STAGES
        )
        b_raw_base = storage.sB_raw.data_ptr().toint()
        sfb_base = storage.sSFB_raw.data_ptr().toint()
        _chunk, _chunk_sf_off, w_raw_off, w_sf_off = thread_offsets(tidx)

        if tile_start < tile_end:
            tile_idx = tile_start
            group_idx = find_group(tile_idx, s_tile_prefix, num_groups)
            while tile_idx < tile_end:
                group_idx, m, n, k, coord_m, coord_n = _tile_at(tile_idx, group_idx, tiles, s_k)
                k_tile_cnt = ceil_div(k, TILE_K)
                # read before the main loop, so the load's latency hides behind it
                scale = output_scale(alpha_ptrs, group_idx, ACC_RESCALE)

                acc.fill(0.0)
                tiled_mma.set(warpgroup.Field.ACCUMULATE, True)
                # Raw weights are loaded one K tile ahead (here K tile 0).
                consumer_wait(full_bar_base, consumer_state)
                w_words, w_sfs = load_weights(
                    b_raw_base + consumer_state.index * B_RAW_BYTES + w_raw_off,
                    sfb_base + consumer_state.index * SF_BYTES + w_sf_off,
                )
                # K tile t: decode own weights (t) into register set t % 2, wait
                # for this warpgroup's turn, issue the 8 wgmmas on stage t's FP16
                # activations, hand the turn over, wait for stage t + 1 and read
                # its raw weights while the wgmmas run, retire them, release
                # stage t.  Warpgroup 0 goes first; the turns run on across tiles,
                # so each warpgroup's epilogue overlaps the other one's wgmmas.
                for k_pair in cutlass.range((k_tile_cnt + 1) // 2, unroll=1):
                    for q in cutlass.range_constexpr(2):
                        t = k_pair * 2 + q
                        if t < k_tile_cnt:
                            decode_weights(tCrA_regs[q], w_words, w_sfs)
                            if t > 0 or wg == 1 or tile_idx != tile_start:
                                my_turn_bar.arrive_and_wait()
                            stage = consumer_state.index
                            warpgroup.fence()
                            for kb in cutlass.range_constexpr(num_k_blocks):
                                cute.gemm(
                                    tiled_mma,
                                    acc,
                                    tCrA_sets[q][(None, None, kb)],
                                    tCrB[(None, None, kb, stage)],
                                    acc,
                                )
                            warpgroup.commit_group()
                            if t + 1 < k_tile_cnt or wg == 0 or tile_idx + 1 < tile_end:
                                other_turn_bar.arrive()
                            next_state = consumer_state.clone()
                            next_state.advance()
                            if t + 1 < k_tile_cnt:
                                consumer_wait(full_bar_base, next_state)
                            # Raw weights of K tile t + 1.  Past the last K tile
                            # these are unused reads of a stage that may be refilling.
                            w_words, w_sfs = load_weights(
                                b_raw_base + next_state.index * B_RAW_BYTES + w_raw_off,
                                sfb_base + next_state.index * SF_BYTES + w_sf_off,
                            )
                            warpgroup.wait_group(0)
                            ab_pipeline.consumer_release(consumer_state)
                            consumer_state.advance()
                # Each warpgroup stores its own rows while the other one's wgmmas run.
                store_tile(acc, tCcC, s_c[group_idx], m, n, coord_m, coord_n, scale, c_dtype)
                tile_idx += 1


# ---------------------------------------------------------------------------
# Host
# ---------------------------------------------------------------------------


@cute.jit
def grouped_gemm_host(
    ptr_of_tensor_of_problem_sizes: cute.Pointer,
    ptr_of_tensor_of_abc_ptrs: cute.Pointer,
    ptr_of_tensor_of_sfasfb_ptrs: cute.Pointer,
    ptr_of_tensor_of_cta_prefix: cute.Pointer,
    ptr_of_tensor_of_tensormap: cute.Pointer,
    total_num_clusters: cutlass.Int32,
    persistent_blocks: cutlass.Int32,
    alpha_ptrs_ptr: cute.Pointer | None,
    num_groups: cutlass.Constexpr[int],
    c_dtype: cutlass.Constexpr,
):
    """Launch (cooperatively: phase 1 ends in a grid barrier); same ABI as the others."""
    kernel(
        *host_operands(
            ptr_of_tensor_of_problem_sizes,
            ptr_of_tensor_of_abc_ptrs,
            ptr_of_tensor_of_sfasfb_ptrs,
            ptr_of_tensor_of_cta_prefix,
            ptr_of_tensor_of_tensormap,
            persistent_blocks,
            num_groups,
        ),
        num_groups,
        c_dtype,
        alpha_table(alpha_ptrs_ptr, num_groups),
    ).launch(
        grid=(persistent_blocks, 1, 1),
        block=[THREADS, 1, 1],
        cluster=(1, 1, 1),
        min_blocks_per_mp=1,
        cooperative=True,
    )
    return


def compile(num_groups: int, out_dtype: str = "float16", alpha: bool = False):
    """Compile the kernel for a fixed group count (8 or 120) and epilogue; returns the
    DSL object."""
    return compile_host(grouped_gemm_host, num_groups, out_dtype, alpha)
