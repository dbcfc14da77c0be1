"""NVFP4 block-scaled grouped GEMM for Hopper (sm_90a), written in CuTe DSL.

Hopper has no FP4 tensor cores, so every FP4 element is decoded on chip together
with its FP8 E4M3 block scale into an FP16 value and multiplied with wgmma
(FP16 x FP16 -> FP32).  The decode is exact: an E2M1 nibble placed at FP16 bits
15 and 11..9 is fp4 * 2^-14, and one f16x2 multiply by scale * 2^7 gives
fp4 * scale * 2^-7 exactly (at most 6 significant bits, >= 2^-17, an FP16
subnormal only for scales < 2^-6).  The wgmma products of two such values are
exact in FP32, and the epilogue multiplies by 2^14 (exact).  So the result equals
"FP32 accumulation of exact products", like the Blackwell kernel.

Per group g:  C_g[m, n] = sum_k (A_g[m, k] * SFA_g[m, k // 16]) * (B_g[n, k] * SFB_g[n, k // 16])

Data layouts (identical to the sm_100a kernel's inputs):
  A  m x k FP4, K-major, two per byte (first element in the low nibble); read as
     an (m, k/2) byte matrix.  B likewise n x k.
  SFA/SFB  E4M3 in the cuBLAS "blocked" layout of
     ``blockscaled_layout.tile_atom_to_shape_SF((rows, k, 1), 16)``: 512-byte atoms
     of 128 rows x 4 scale columns, atom index = (r // 128) * ceil(k / 64) + c // 4,
     byte in atom = (r % 32) * 16 + ((r // 32) % 4) * 4 + (c % 4).  We read it as a
     (256, 2 * ceil(k/64), ceil(rows/128)) byte tensor so that TMA zero-fills the
     K residue past the last atom.
  C  m x n FP16, row-major (row stride n).

Kernel structure (one CTA per SM, persistent).  The tile is computed transposed,
C^T = B * A^T, so that the large weight operand B never goes through shared
memory as FP16:
  warps 0-7  two consumer warpgroups; warpgroup w owns weight rows [64w, 64w + 64)
             of the TILE_N tile.  Per K tile t each thread decodes its weight bytes
             straight into registers in the wgmma A-fragment layout (register set
             t % 2), and its half of the TILE_M activation rows of K tile t + 1
             into a 128B-swizzled K-major FP16 buffer ((t + 1) % 4 of four) that
             is the wgmma B operand (N = TILE_M).  The two warpgroups ping-pong
             (FA3 style, named barriers 2 and 3): warpgroup w waits for its turn,
             issues its 8 wgmmas of K tile t, hands the turn to the other one and
             retires its wgmmas, so one warpgroup decodes while the other's
             wgmmas run.  A fixed permutation of the 128 K positions of a tile, the
             same for both operands, makes the register decode cheap (see the
             consumer section).
  warp 8     producer: walks the CTA's tiles (the only warp that reads the group
             tables), points the per-CTA tensormaps (A, B, SFA, SFB) at each new
             group (fields replaced in shared memory, copied to the CTA's global
             workspace row and released to the tensormap proxy by one lane with
             one fence), TMA loads of raw FP4 + scales into a
             NUM_STAGES-deep mbarrier pipeline, and with a tile's first stage a post
             of what the consumers need of it (coordinates, sizes, C address,
             epilogue scale): consumers read no global memory between tiles.
The grid is launched with programmatic stream serialization (PDL, ``_tile_range``): it
may start while the MoE routing kernel before it still writes the tables.
A *routed* variant (:func:`compile_routed`, a MoE plan of up to ``num_groups`` experts)
takes the MoE plan's header words and a run's words instead of the tables: every CTA
first builds the tables in shared memory from the device counts (:mod:`.routed_groups`,
5 KB at 256 groups, one round of loads and three CTA scans) and the kernel then reads
them exactly where it reads the global ones, so no routing kernel runs before it (on
the H200 1-4 µs less per MoE run, docs/decode.md). Every table variant's cubin is
unchanged by it (the extra kernel parameters are None there).
The activation tile (``tile_m`` rows, TILE_M = 128 here), the raw-stage count and
the CTAs per SM are compile-time arguments of :func:`compile`; the decode family
(:mod:`.sm90_grouped_gemm_decode`) takes 16-row tiles, where a tile's rows lie inside
one 128-row scale block (the consumers add the row offset in it), every consumer thread
decodes one 4-byte word of the activations (``_narrow_act``), and those raw activations
of K tile t + 1 are read before the weights of K tile t are decoded.
Tiles are scheduled like the sm_100a kernel: tile t of group g has
cta_rest = t - prefix[g], coord_m = cta_rest % ceil(m / TILE_M),
coord_n = cta_rest // ceil(m / TILE_M); CTA b processes the contiguous tile range
[b * ceil(T / P), min((b + 1) * ceil(T / P), T)).

Limits: k % 32 == 0 (TMA needs a 16-byte row pitch of k/2 bytes); l == 1.  M and N
residues are handled (TMA zero-fill on loads, element-wise guarded FP16 stores).
Scale bytes in the padding of a partial scale atom (scale columns k/16 ..
4*ceil(k/64)-1) meet zero FP4 data, so they only need to be finite (cuBLAS/to_blocked
pads them with zeros).

Operand alignment: A, B, SFA and SFB 16 bytes (they become TMA descriptor base
addresses, used as given: ``assumed_align=16``, nothing rounds them), C 2 bytes
(element-wise FP16 stores).  The runtime requires 32 bytes for all five
(nvfp4_aot/validation.py): that is the sm_100a kernel's real requirement (its
precondition 8: it rounds addresses up to a multiple of 32), so one check serves every
family.
"""

import functools

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
from cutlass.cute.nvgpu import warpgroup
from cutlass.cutlass_dsl import dsl_user_op
from cutlass.memory import SmemAllocator
from cutlass.tensor_utils import TensorMapManager, TensorMapUpdateMode

from ..moe_layout import P_HEADER_WORDS, R_WORDS
from .epilogue import alpha_table, output_scale
from .group_search import advance_group, ceil_div, warp_tile_range
from .inline_ptx import asm, ir_i32, ir_i64, lds_u8, lds_u16, lds_u32, lds_v4, sts_b32
from .routed_groups import RoutedGroups, route, routed_storage
from .sm90_common import (
    ACC_RESCALE,
    ARCHS,
    B_RAW_BYTES,
    BYTES_PER_TENSORMAP,
    NUM_CONSUMER_THREADS,
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
    compile_routed_host,
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

FAMILY = "sm90_nvfp4_grouped_gemm"
__all__ = ["ARCHS", "FAMILY", "THREADS", "TILE_K", "TILE_M", "TILE_N", "compile", "compile_routed"]

NUM_STAGES = 5  # raw (FP4 + scale) TMA pipeline depth
NUM_DEC_BUFFERS = 4  # decoded FP16 activation buffers (fixed: see the consumer loop)


# ---------------------------------------------------------------------------
# Device helpers
# ---------------------------------------------------------------------------


# A 128-byte TMA descriptor from shared to global memory, 16 bytes a load and store.
_COPY_DESCRIPTOR_PTX = (
    "{\n.reg .b32 a, b, c, d;\n"
    + "".join(
        f"ld.shared.v4.b32 {{a, b, c, d}}, [$1+{o}];\nst.global.v4.b32 [$0+{o}], {{a, b, c, d}};\n"
        for o in range(0, BYTES_PER_TENSORMAP, 16)
    )
    + "}"
)


@dsl_user_op
def copy_descriptor(gmem: cutlass.Int64, smem: cutlass.Int32, *, loc=None, ip=None) -> None:
    """Copy the TMA descriptor at shared ``smem`` to global ``gmem`` (generic proxy)."""
    asm(_COPY_DESCRIPTOR_PTX, "l,r", [ir_i64(gmem, loc, ip), ir_i32(smem, loc, ip)], loc, ip)


@dsl_user_op
def release_descriptors(*, loc=None, ip=None) -> None:
    """Make this thread's descriptor stores visible to the tensormap proxy (GPU scope)."""
    asm("fence.proxy.tensormap::generic.release.gpu;", "", [], loc, ip)


def _narrow(tile_m):
    """Whether activation tiles of ``tile_m`` rows use the narrow-tile decode (below)."""
    return tile_m < 64


def _act_tasks(tile_m):
    """(row, 16-byte chunk) activation tasks per consumer thread of a tile of 64+ rows:
    task j is row j // 4, chunk j % 4; thread t has tasks t, t + 256, ..."""
    return tile_m * 4 // NUM_CONSUMER_THREADS


def _narrow_act(tidx, wg, chunk, chunk_sf_off, tile_m):
    """Narrow tiles (16 or 32 rows): every consumer thread decodes one 4-byte word (8
    elements) of ``tile_m // 16`` rows, so the activations' decode is spread over all
    four warps of a warpgroup (one warp doing it all was the warpgroup's straggler at
    every turn).  Warpgroup w takes rows [w tile_m / 2, (w + 1) tile_m / 2); warp j of
    it word j of every 16-byte chunk; lane l row l // 4 (task i: + 8 i), chunk l % 4.
    Returns (row, scale column offset, raw offset, swizzle row, decoded offset) of task
    0; its word lands where word j of a wide task's ``_store_act`` does."""
    word = (tidx % 128) // 32
    row = wg * (tile_m // 2) + (tidx % 32) // 4
    sf_col = chunk_sf_off + word // 2
    raw_off = row * TILE_KB + chunk * 16 + word * 4
    # unit 4 (word % 2) + s of the wide form is (4 (word % 2)) ^ s for s < 4
    rr = (row % 8) ^ ((word % 2) * 4)
    dec_off = (row // 8) * 1024 + (row % 8) * 128 + chunk * 4 + (word // 2) * (tile_m * 128)
    return row, sf_col, raw_off, rr, dec_off


def _load_act(a_raw, sfa, tile_m):
    """This thread's raw activation tasks: (words, scale pairs; narrow tiles: one word
    and one scale byte a task)."""
    a_words = []
    a_sfs = []
    if cutlass.const_expr(_narrow(tile_m)):
        for i in range(tile_m // 16):  # rows + 8 i: scale rows + 8 i of one 32-row group
            a_words.append(lds_u32(a_raw + i * 8 * TILE_KB))
            a_sfs.append(lds_u8(sfa + i * 128))
    else:
        for i in range(_act_tasks(tile_m)):
            a_words.append(lds_v4(a_raw + i * 64 * TILE_KB))
            a_sfs.append(lds_u16(sfa + i * 8))
    return a_words, a_sfs


def _decode_act(a_raw, sfa, a_dst, a_rr, tile_m):
    """This thread's activation tasks -> swizzled FP16 buffer."""
    _store_act(*_load_act(a_raw, sfa, tile_m), a_dst, a_rr, tile_m)


def _store_act(a_words, a_sfs, a_dst, a_rr, tile_m):
    """Decoded activation tasks -> swizzled FP16 buffer (word w, shift s is register s of
    16-byte unit u = 4 (w % 2) + s, k = 8 u; narrow tiles: ``a_rr`` has 4 (w % 2) in)."""
    if cutlass.const_expr(_narrow(tile_m)):
        for i in range(tile_m // 16):
            vals = decode_word(a_words[i], decode_scales(a_sfs[i])[0])
            for s in range(4):
                sts_b32(a_dst + i * 1024 + ((a_rr ^ s) * 16), vals[s])
    else:
        for i in range(_act_tasks(tile_m)):
            sc = decode_scales(a_sfs[i])
            dst = a_dst + i * 8 * 1024
            for w in range(4):
                vals = decode_word(a_words[i][w], sc[w // 2])
                for s in range(4):
                    unit = 4 * (w % 2) + s
                    sts_b32(dst + (w // 2) * (tile_m * 128) + ((a_rr ^ unit) * 16), vals[s])


# Per stage, the Int32 words a tile's post holds beside its C address and scale.
TILE_INTS = 5  # coord_m, coord_n, m, n, k_tile_cnt


def _post_tile(tile_posts, stage, group, coord_m, coord_n, c_address, alpha_ptrs, group_idx):
    """Producer: post what the consumers need of a tile (coordinates, sizes, C address,
    epilogue scale with the group's alpha) with its first stage, so that they read no
    global memory between tiles (a chain of dependent loads per tile before)."""
    tile_c, tile_scale, tile_ints = tile_posts
    m, n, _cta_m, k_tile_cnt, _loaded_idx = group
    with cute.arch.elect_one():  # the thread whose arrive publishes the stage
        for i, v in enumerate((coord_m, coord_n, m, n, k_tile_cnt)):
            tile_ints[i, stage] = v
        tile_c[stage] = c_address
        if cutlass.const_expr(alpha_ptrs is not None):
            tile_scale[stage] = output_scale(alpha_ptrs, group_idx, ACC_RESCALE)


@cute.jit
def _read_post(tile_posts, stage, alpha_ptrs):
    """Consumers: (coord_m, coord_n, m, n, k_tile_cnt, C address, epilogue scale) of the
    tile whose first stage is ``stage`` (``_post_tile``). Lane 0 of each warp reads them
    and shuffles them to the others: it is the lane whose ``consumer_release`` later frees
    the stage, so that release orders the read before the producer's next post there."""
    tile_c, tile_scale, tile_ints = tile_posts
    coord_m, coord_n, m, n, k_tile_cnt = (cutlass.Int32(0) for _ in range(TILE_INTS))
    c_address = cutlass.Int64(0)
    scale = cutlass.Float32(ACC_RESCALE)
    if cute.arch.lane_idx() == 0:
        coord_m, coord_n, m, n, k_tile_cnt = (tile_ints[i, stage] for i in range(TILE_INTS))
        c_address = tile_c[stage]
        if cutlass.const_expr(alpha_ptrs is not None):
            scale = tile_scale[stage]
    coord_m, coord_n, m, n, k_tile_cnt, c_address = (
        cute.arch.shuffle_sync(v, 0) for v in (coord_m, coord_n, m, n, k_tile_cnt, c_address)
    )
    if cutlass.const_expr(alpha_ptrs is not None):
        scale = cute.arch.shuffle_sync(scale, 0)
    return coord_m, coord_n, m, n, k_tile_cnt, c_address, scale


def _sf_row_offset(row):
    """Byte offset of row ``row`` (of its 128-row block) in a blocked scale atom."""
    return (row % 32) * 16 + ((row // 32) % 4) * 4


@cute.jit
def _tile_range(bidx, grid_dim_x, tensor_of_cta_prefix, num_groups: cutlass.Constexpr[int]):
    """(tile_start, tile_end, group of tile_start) of this CTA, the same split as the
    sm_100a kernel, once the kernel before this one has finished.

    The kernel is launched with programmatic stream serialization (PDL): its CTAs may
    start while the kernel before them (the MoE routing kernel, which writes the tables
    read here) still runs, so each warp waits in ``griddepcontrol.wait`` before its first
    global read or write (the producer's descriptor set-up before it is in shared memory).
    """
    cute.arch.griddepcontrol_wait()
    return warp_tile_range(bidx, grid_dim_x, tensor_of_cta_prefix, num_groups)


def _walk_start():
    """``group`` for ``_tile_at`` at a CTA's first tile: (m, n, cta_m, k_tile_cnt,
    loaded_idx) with loaded_idx -1, so that the first tile reads its group's sizes."""
    return tuple(cutlass.Int32(v) for v in (0, 0, 1, 0, -1))


@cute.jit
def _tile_at(
    tile_idx: cutlass.Int32,
    group_idx: cutlass.Int32,
    group: tuple,
    tensor_of_problem_sizes: cute.Tensor,
    tensor_of_cta_prefix: cute.Tensor,
    on_new_group=None,
    tile_m: cutlass.Constexpr[int] = TILE_M,
):
    """(group_idx, group, coord_m, coord_n) of tile ``tile_idx``, walking on from group
    ``group_idx`` (the tiles of a CTA ascend).  ``group`` = (m, n, cta_m, k_tile_cnt,
    loaded_idx) of the group whose sizes were last read (from ``_walk_start`` at the
    first tile): they are read from global memory only when the walk enters a new group,
    and then ``on_new_group(group_idx, m, n, k)`` runs (the producer points its
    tensormaps at the group there)."""
    m, n, cta_m, k_tile_cnt, loaded_idx = group
    group_idx = advance_group(tile_idx, group_idx, tensor_of_cta_prefix)
    if group_idx != loaded_idx:
        m = tensor_of_problem_sizes[group_idx, 0]
        n = tensor_of_problem_sizes[group_idx, 1]
        k = tensor_of_problem_sizes[group_idx, 2]
        cta_m = ceil_div(m, tile_m)
        k_tile_cnt = ceil_div(k, TILE_K)
        if cutlass.const_expr(on_new_group is not None):
            on_new_group(group_idx, m, n, k)
        loaded_idx = group_idx
    cta_rest = tile_idx - tensor_of_cta_prefix[group_idx]
    group = (m, n, cta_m, k_tile_cnt, loaded_idx)
    return group_idx, group, cta_rest % cta_m, cta_rest // cta_m


def _update_tensormaps(
    tensormap_manager,
    tma_atoms,
    tensormap_gmem_ptrs,
    tensormap_smem_ptrs,
    tensor_of_abc_ptrs,
    tensor_of_sfasfb_ptrs,
    group_idx,
    m,
    n,
    k,
):
    """Point the CTA's tensormaps (A, B, SFA, SFB) at group ``group_idx`` and fence them
    before the next TMA load uses them, on the critical path of every group's first TMA
    load. The fields are replaced in the shared-memory copies (replacing them in global
    memory was a chain of dependent global read-modify-writes); then the lane that issues
    the TMA loads copies all four to the CTA's workspace row with plain stores and makes
    them visible to the tensormap proxy with one release fence. One
    ``tensormap.cp_fenceproxy`` a descriptor (a copy and a release each) made a switch
    cost ~1.4 µs on the H200; with one fence for all four the 1-token decode rows ran
    0.4-1.6 µs faster (session 14 calls 4-5, ``docs/decode.md``)."""
    real_a = make_ab_tensor(gmem_u8(tensor_of_abc_ptrs[group_idx, 0]), m, k)
    real_b = make_ab_tensor(gmem_u8(tensor_of_abc_ptrs[group_idx, 1]), n, k)
    real_sfa = make_sf_tensor(gmem_u8(tensor_of_sfasfb_ptrs[group_idx, 0]), m, k)
    real_sfb = make_sf_tensor(gmem_u8(tensor_of_sfasfb_ptrs[group_idx, 1]), n, k)
    cute.arch.sync_warp()
    # warp-uniform shared addresses (as the DSL's own update: no predicated R2UR on sm_90a)
    smem_ptrs = tuple(
        cute.make_ptr(
            p.dtype,
            cute.arch.make_warp_uniform(p.toint()),
            cute.AddressSpace.smem,
            assumed_align=p.alignment,
        )
        for p in tensormap_smem_ptrs
    )
    for atom, tensor, smem_ptr in zip(tma_atoms, (real_a, real_b, real_sfa, real_sfb), smem_ptrs):
        cute.nvgpu.cpasync.update_tma_descriptor(atom, tensor, smem_ptr)
    # the replaces above and the copy below are the elected lane's: the TMA loads' lane
    with cute.arch.elect_one():
        # as the DSL's update: the bulk copies issued so far have read their sources
        cute.arch.cp_async_bulk_commit_group()
        cute.arch.cp_async_bulk_wait_group(0, read=True)
        for gmem_ptr, smem_ptr in zip(tensormap_gmem_ptrs, smem_ptrs):
            copy_descriptor(gmem_ptr.toint(), smem_ptr.toint())
        release_descriptors()
    cute.arch.sync_warp()
    for ptr in tensormap_gmem_ptrs:
        tensormap_manager.fence_tensormap_update(ptr)


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
    tensor_of_abc_ptrs: cute.Tensor | None,
    tensor_of_sfasfb_ptrs: cute.Tensor | None,
    tensormaps: cute.Tensor,
    tensor_of_problem_sizes: cute.Tensor | None,
    tensor_of_cta_prefix: cute.Tensor | None,
    num_groups: cutlass.Constexpr[int],
    c_dtype: cutlass.Constexpr,
    alpha_ptrs: cute.Tensor | None,
    tile_m: cutlass.Constexpr[int],
    num_stages: cutlass.Constexpr[int],
    plan_words: cute.Tensor | None,
    run_words: cute.Tensor | None,
    routed_alpha: cutlass.Constexpr[bool],
):
    a_raw_bytes = tile_m * TILE_KB
    dec_elems_a = tile_m * TILE_K
    rows_per_sf_block = 128 // tile_m  # activation tiles per 128-row scale block
    tidx, _, _ = cute.arch.thread_idx()
    warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
    bidx, _, _ = cute.arch.block_idx()
    grid_dim_x, _, _ = cute.arch.grid_dim()

    #
    # Shared memory
    #
    @cute.struct
    class SharedStorage:
        ab_mbar_ptr: cute.struct.MemRange[cutlass.Int64, num_stages * 2]
        # Raw TMA stages: FP4 bytes, row-major (rows, TILE_K / 2), no swizzle.
        sA_raw: cute.struct.Align[
            cute.struct.MemRange[cutlass.Uint8, num_stages * a_raw_bytes], 1024
        ]
        sB_raw: cute.struct.Align[
            cute.struct.MemRange[cutlass.Uint8, num_stages * B_RAW_BYTES], 1024
        ]
        # Raw scale stages: SF_HALVES x 256 bytes = TILE_K / 64 consecutive atoms.
        sSFA_raw: cute.struct.Align[
            cute.struct.MemRange[cutlass.Uint8, num_stages * SF_BYTES], 1024
        ]
        sSFB_raw: cute.struct.Align[
            cute.struct.MemRange[cutlass.Uint8, num_stages * SF_BYTES], 1024
        ]
        # Decoded FP16 activations (the wgmma B operand), K-major 128B-swizzled.
        sA_dec: cute.struct.Align[
            cute.struct.MemRange[cutlass.Float16, NUM_DEC_BUFFERS * dec_elems_a], 1024
        ]
        # What the producer posts with the first stage of each tile (``_post_tile``).
        tile_c: cute.struct.MemRange[cutlass.Int64, num_stages]
        tile_scale: cute.struct.MemRange[cutlass.Float32, num_stages]
        tile_ints: cute.struct.MemRange[cutlass.Int32, num_stages * TILE_INTS]
        # The producer's staging copies of the four descriptors (``_update_tensormaps``).
        tensormap_buffer: cute.struct.Align[
            cute.struct.MemRange[cutlass.Int64, NUM_TENSORMAPS * BYTES_PER_TENSORMAP // 8], 128
        ]

    smem = SmemAllocator()
    storage = smem.allocate(SharedStorage)
    if cutlass.const_expr(plan_words is not None):
        # a routed variant: this CTA builds the group tables from the device counts
        # (routed_groups), and the kernel reads them where it reads the global ones
        warps = THREADS // 32
        groups = RoutedGroups(
            smem.allocate(routed_storage(num_groups, warps)), plan_words, run_words,
            num_groups, warps,
        )  # fmt: skip
        route(groups, tile_m, TILE_N, tidx)
        tensor_of_cta_prefix = groups.prefix
        tensor_of_problem_sizes = groups.sizes
        tensor_of_abc_ptrs = groups.abc
        tensor_of_sfasfb_ptrs = groups.scales
        if cutlass.const_expr(routed_alpha):
            alpha_ptrs = groups.alphas

    # Raw TMA destinations.
    # (tile_m, TILE_K/2, STAGE)
    sA_raw = storage.sA_raw.get_tensor(
        cute.make_layout((tile_m, TILE_KB, num_stages), stride=(TILE_KB, 1, a_raw_bytes))
    )
    # (TILE_N, TILE_K/2, STAGE)
    sB_raw = storage.sB_raw.get_tensor(
        cute.make_layout((TILE_N, TILE_KB, num_stages), stride=(TILE_KB, 1, B_RAW_BYTES))
    )
    # (256, SF_HALVES, 1, STAGE)
    sf_stage_layout = cute.make_layout(
        (256, SF_HALVES, 1, num_stages), stride=(1, 256, SF_BYTES, SF_BYTES)
    )
    sSFA_raw = storage.sSFA_raw.get_tensor(sf_stage_layout)
    sSFB_raw = storage.sSFB_raw.get_tensor(sf_stage_layout)

    # Decoded activation buffers: S<3,4,3> (byte-address 128B swizzle) o (8,64) atoms.
    a_dec_layout = cute.tile_to_shape(
        warpgroup.make_smem_layout_atom(warpgroup.SmemLayoutAtomKind.K_SW128, cutlass.Float16),
        (tile_m, TILE_K, NUM_DEC_BUFFERS),
        order=(0, 1, 2),
    )
    # (tile_m, TILE_K, DEC_BUF)
    sA_dec = storage.sA_dec.get_tensor(a_dec_layout.outer, swizzle=a_dec_layout.inner)
    # (STAGE) / (STAGE) / (TILE_INTS, STAGE)
    tile_posts = (
        storage.tile_c.get_tensor(cute.make_layout(num_stages)),
        storage.tile_scale.get_tensor(cute.make_layout(num_stages)),
        storage.tile_ints.get_tensor(
            cute.make_layout((TILE_INTS, num_stages), stride=(1, TILE_INTS))
        ),
    )

    #
    # Mainloop pipeline: producer = TMA (1 arrive + tx bytes), consumer = one
    # arrive per consumer warp.
    #
    ab_pipeline = pipeline.PipelineTmaAsync.create(
        barrier_storage=storage.ab_mbar_ptr.data_ptr(),
        num_stages=num_stages,
        producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
        consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, NUM_CONSUMER_WARPS),
        tx_count=a_raw_bytes + B_RAW_BYTES + 2 * SF_BYTES,
        cta_layout_vmnk=cute.make_layout((1, 1, 1, 1)),
    )

    #
    # TMA partitions.  The TMA tensors come from fake host shapes; coordinates
    # past those shapes are fine because the real extents live in the
    # per-CTA tensormaps updated below.
    #
    # (tile_m, TILE_K/2, RestM, RestK)
    gA = cute.local_tile(mA, (tile_m, TILE_KB), (None, None))
    # (TILE_N, TILE_K/2, RestN, RestK)
    gB = cute.local_tile(mB, (TILE_N, TILE_KB), (None, None))
    # (256, SF_HALVES, 1, 1, RestK, RestRowBlock)
    gSFA = cute.local_tile(mSFA, (256, SF_HALVES, 1), (None, None, None))
    gSFB = cute.local_tile(mSFB, (256, SF_HALVES, 1), (None, None, None))
    # ((atom_v, rest_v), STAGE) / ((atom_v, rest_v), RestM, RestK)
    tAsA, tAgA = tma_partition(tma_atom_a, sA_raw, gA, 2)
    tBsB, tBgB = tma_partition(tma_atom_b, sB_raw, gB, 2)
    # ((atom_v, rest_v), STAGE) / ((atom_v, rest_v), 1, RestK, RestRowBlock)
    tAsSFA, tAgSFA = tma_partition(tma_atom_sfa, sSFA_raw, gSFA, 3)
    tBsSFB, tBgSFB = tma_partition(tma_atom_sfb, sSFB_raw, gSFB, 3)

    #
    # Producer warp: tensormaps + TMA loads.
    #
    if warp_idx == PRODUCER_WARP:
        tensormap_manager = TensorMapManager(TensorMapUpdateMode.SMEM, BYTES_PER_TENSORMAP)
        tma_atoms = (tma_atom_a, tma_atom_b, tma_atom_sfa, tma_atom_sfb)
        # this CTA's workspace row (A, B, SFA, SFB) and their shared-memory copies
        tensormap_gmem_ptrs = tuple(
            tensormap_manager.get_tensormap_ptr(tensormaps[(bidx, i, None)].iterator)
            for i in range(NUM_TENSORMAPS)
        )
        tensormap_smem_ptrs = tuple(
            storage.tensormap_buffer.data_ptr() + i * (BYTES_PER_TENSORMAP // 8)
            for i in range(NUM_TENSORMAPS)
        )
        for atom, smem_ptr in zip(tma_atoms, tensormap_smem_ptrs):
            tensormap_manager.init_tensormap_from_atom(atom, smem_ptr, PRODUCER_WARP)
        tensormap_manager.fence_tensormap_initialization()
        tile_start, tile_end, start_group = _tile_range(
            bidx, grid_dim_x, tensor_of_cta_prefix, num_groups
        )

        producer_state = pipeline.make_pipeline_state(
            pipeline.PipelineUserType.Producer, num_stages
        )
        update_tensormaps = functools.partial(
            _update_tensormaps,
            tensormap_manager,
            tma_atoms,
            tensormap_gmem_ptrs,
            tensormap_smem_ptrs,
            tensor_of_abc_ptrs,
            tensor_of_sfasfb_ptrs,
        )
        if tile_start < tile_end:
            tile_idx = tile_start
            group_idx, group = start_group, _walk_start()
            while tile_idx < tile_end:
                group_idx, group, coord_m, coord_n = _tile_at(
                    tile_idx,
                    group_idx,
                    group,
                    tensor_of_problem_sizes,
                    tensor_of_cta_prefix,
                    update_tensormaps,
                    tile_m,
                )
                _m, _n, _cta_m, k_tile_cnt, _loaded_idx = group
                tAgA_tile = tAgA[(None, coord_m, None)]
                tBgB_tile = tBgB[(None, coord_n, None)]
                sf_block = coord_m
                if cutlass.const_expr(rows_per_sf_block > 1):
                    sf_block = coord_m // rows_per_sf_block
                tAgSFA_tile = tAgSFA[(None, 0, None, sf_block)]
                tBgSFB_tile = tBgSFB[(None, 0, None, coord_n)]
                desc_a, desc_b, desc_sfa, desc_sfb = (
                    tensormap_manager.get_tensormap_ptr(ptr, cute.AddressSpace.generic)
                    for ptr in tensormap_gmem_ptrs
                )
                for k_tile in cutlass.range(k_tile_cnt, unroll=1):
                    stage = producer_state.index
                    # producer_acquire, with the tile's post written between the wait
                    # for the empty stage and the arrive that releases it to consumers
                    ab_pipeline.sync_object_empty.wait(stage, producer_state.phase)
                    if k_tile == 0:
                        _post_tile(
                            tile_posts,
                            stage,
                            group,
                            coord_m,
                            coord_n,
                            tensor_of_abc_ptrs[group_idx, 2],
                            alpha_ptrs,
                            group_idx,
                        )
                    ab_pipeline.sync_object_full.arrive(stage, ab_pipeline.producer_mask)
                    bar = ab_pipeline.producer_get_barrier(producer_state)
                    cute.copy(
                        tma_atom_a,
                        tAgA_tile[(None, k_tile)],
                        tAsA[(None, stage)],
                        tma_bar_ptr=bar,
                        tma_desc_ptr=desc_a,
                    )
                    cute.copy(
                        tma_atom_b,
                        tBgB_tile[(None, k_tile)],
                        tBsB[(None, stage)],
                        tma_bar_ptr=bar,
                        tma_desc_ptr=desc_b,
                    )
                    cute.copy(
                        tma_atom_sfa,
                        tAgSFA_tile[(None, k_tile)],
                        tAsSFA[(None, stage)],
                        tma_bar_ptr=bar,
                        tma_desc_ptr=desc_sfa,
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
    # Consumer warpgroups.  The product is computed transposed, C^T = B * A^T:
    # the weights B (TILE_N rows) are the wgmma A operand, decoded straight from
    # the raw stage into registers in the wgmma A-fragment layout; the
    # activations A (TILE_M rows) are decoded once per CTA into a swizzled FP16
    # buffer that is the wgmma B operand (N = TILE_M).
    #
    # K permutation.  Inside a K tile both operands use the same permutation of
    # the 128 K positions, so the dot products are unchanged (every element is
    # multiplied by its own scale while it is decoded).  Thread lane l holds
    # fragment columns kk = 2c, 2c+1, 2c+8, 2c+9 (c = l % 4) of every k16 block
    # kb; we let them be raw bytes [16c, 16c + 16) of the row, read as words
    # W[0..3]: register s of decode_word(W[kb // 2]) is physical (kb, kk = 2c + 8h
    # + e) with s = 2 (kb % 2) + h (which nibbles land in which register and half
    # does not matter: the activations use the same decode_word).
    #
    if warp_idx < NUM_CONSUMER_WARPS:
        # (MMA, MMA_N, MMA_K, DEC_BUF)
        tiled_mma, tCrB, tCrA_sets, tCrA_regs, acc, tCcC = consumer_mma(tidx, sA_dec, tile_m)
        num_k_blocks = cute.size(tCrA_sets[0], mode=[2])
        wg, consumer_bar, my_turn_bar, other_turn_bar = pingpong_barriers(warp_idx)
        consumer_state = pipeline.make_pipeline_state(
            pipeline.PipelineUserType.Consumer, num_stages
        )

        a_raw_base = storage.sA_raw.data_ptr().toint()
        b_raw_base = storage.sB_raw.data_ptr().toint()
        sfa_base = storage.sSFA_raw.data_ptr().toint()
        sfb_base = storage.sSFB_raw.data_ptr().toint()
        a_dec_base = storage.sA_dec.data_ptr().toint()
        full_bar_base = storage.ab_mbar_ptr.data_ptr().toint()

        chunk, chunk_sf_off, w_raw_off, w_sf_off = thread_offsets(tidx)
        # 128B swizzle: byte = (k // 64) * TILE_M * 128 + (r // 8) * 1024 + (r % 8) * 128
        #               + (((k % 64) // 8) ^ (r % 8)) * 16 + (k % 8) * 2
        if cutlass.const_expr(_narrow(tile_m)):
            a_row, a_sf_col, a_raw_off, a_rr, a_dec_row_off = _narrow_act(
                tidx, wg, chunk, chunk_sf_off, tile_m
            )
        else:
            # Activations: task i is row a_row + 64 i, bytes [16 c, 16 c + 16).
            a_row = tidx // 4
            a_sf_col = chunk_sf_off
            a_raw_off = a_row * TILE_KB + chunk * 16
            a_rr = a_row % 8
            a_dec_row_off = (a_row // 8) * 1024 + a_rr * 128 + chunk * 4
        a_sf_off = a_sf_col + _sf_row_offset(a_row)

        tile_idx, tile_end, _start_group = _tile_range(
            bidx, grid_dim_x, tensor_of_cta_prefix, num_groups
        )
        while tile_idx < tile_end:
            # The tile's first stage carries what the producer posted for it.
            consumer_wait(full_bar_base, consumer_state)
            coord_m, coord_n, m, n, k_tile_cnt, c_address, scale = _read_post(
                tile_posts, consumer_state.index, alpha_ptrs
            )
            if cutlass.const_expr(rows_per_sf_block > 1):
                # the tile's rows sit inside a 128-row scale block
                a_sf_off = a_sf_col + _sf_row_offset((coord_m % rows_per_sf_block) * tile_m + a_row)
            acc.fill(0.0)
            tiled_mma.set(warpgroup.Field.ACCUMULATE, True)
            # Ping-pong.  Prologue: both warpgroups decode their halves of
            # the activations of K tile 0 into buffer 0.
            _decode_act(
                a_raw_base + consumer_state.index * a_raw_bytes + a_raw_off,
                sfa_base + consumer_state.index * SF_BYTES + a_sf_off,
                a_dec_base + a_dec_row_off,
                a_rr,
                tile_m,
            )
            # Raw weights are loaded one K tile ahead (here K tile 0), so
            # the LDS latency is off the decode's critical path.
            w_words, w_sfs = load_weights(
                b_raw_base + consumer_state.index * B_RAW_BYTES + w_raw_off,
                sfb_base + consumer_state.index * SF_BYTES + w_sf_off,
            )
            cute.arch.fence_proxy("async.shared", space="cta")
            consumer_bar.arrive_and_wait()
            # K tile t: decode own weights (t) into register set t % 2 and
            # own activation half of K tile t + 1 into buffer (t + 1) % 4,
            # then wait for this warpgroup's turn, issue, retire wgmma t - 1,
            # hand the turn to the other warpgroup.  Warpgroup 0 goes first.
            # Each warpgroup retires its own wgmmas right after issuing them
            # (FA3 style); the other warpgroup decodes meanwhile.  Keeping a
            # wgmma in flight across the decode instead (wait_group(1), or
            # v2's wait before the issue) gave no gain on the H200, and ptxas
            # serialises every HGMMA (C7511) when this loop is unrolled by 4
            # with it.  Four activation buffers: a warpgroup writes buffer
            # (t + 1) % 4 while the other may still be reading t - 2's.
            for k_quad in cutlass.range((k_tile_cnt + 3) // 4, unroll=1):
                for q in cutlass.range_constexpr(4):
                    t = k_quad * 4 + q
                    if t < k_tile_cnt:
                        next_dst = (
                            a_dec_base
                            + ((q + 1) % NUM_DEC_BUFFERS) * (dec_elems_a * 2)
                            + a_dec_row_off
                        )
                        if cutlass.const_expr(tile_m == TILE_M):
                            if t + 1 < k_tile_cnt:
                                next_state = consumer_state.clone()
                                next_state.advance()
                                consumer_wait(full_bar_base, next_state)
                                nstage = next_state.index
                                _decode_act(
                                    a_raw_base + nstage * a_raw_bytes + a_raw_off,
                                    sfa_base + nstage * SF_BYTES + a_sf_off,
                                    next_dst,
                                    a_rr,
                                    tile_m,
                                )
                            decode_weights(tCrA_regs[q % 2], w_words, w_sfs)
                        else:
                            # Tiles under 128 rows: the raw activations of K tile
                            # t + 1 are read first and decoded after the weights,
                            # so their load latency hides behind the weight decode
                            # (past the last K tile: unused reads of a stage that
                            # may refill).
                            next_state = consumer_state.clone()
                            next_state.advance()
                            if t + 1 < k_tile_cnt:
                                consumer_wait(full_bar_base, next_state)
                            nstage = next_state.index
                            a_words, a_sfs = _load_act(
                                a_raw_base + nstage * a_raw_bytes + a_raw_off,
                                sfa_base + nstage * SF_BYTES + a_sf_off,
                                tile_m,
                            )
                            decode_weights(tCrA_regs[q % 2], w_words, w_sfs)
                            if t + 1 < k_tile_cnt:
                                _store_act(a_words, a_sfs, next_dst, a_rr, tile_m)
                        ab_pipeline.consumer_release(consumer_state)
                        consumer_state.advance()
                        cute.arch.fence_proxy("async.shared", space="cta")
                        if t > 0 or wg == 1:
                            my_turn_bar.arrive_and_wait()
                        warpgroup.fence()
                        for kb in cutlass.range_constexpr(num_k_blocks):
                            cute.gemm(
                                tiled_mma,
                                acc,
                                tCrA_sets[q % 2][(None, None, kb)],
                                tCrB[(None, None, kb, q)],
                                acc,
                            )
                        warpgroup.commit_group()
                        if t + 1 < k_tile_cnt or wg == 0:
                            other_turn_bar.arrive()
                        # Raw weights of K tile t + 1 (waited for above), read
                        # while the wgmmas run.  Past the last K tile these are
                        # unused reads of a stage that may be refilling.
                        w_words, w_sfs = load_weights(
                            b_raw_base + consumer_state.index * B_RAW_BYTES + w_raw_off,
                            sfb_base + consumer_state.index * SF_BYTES + w_sf_off,
                        )
                        warpgroup.wait_group(0)
            # Retire the last wgmma; the next tile's prologue overwrites
            # buffer 0, so wait for the other warpgroup too.
            warpgroup.wait_group(0)
            consumer_bar.arrive_and_wait()

            store_tile(
                acc,
                tCcC,
                c_address,
                m,
                n,
                coord_m,
                coord_n,
                scale,
                c_dtype,
                tile_m,
            )
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
    tile_m: cutlass.Constexpr[int],
    num_stages: cutlass.Constexpr[int],
    blocks_per_sm: cutlass.Constexpr[int],
):
    """Launch the Hopper NVFP4 grouped GEMM (same ABI shape as the sm_100a kernel)."""
    kernel(
        *host_operands(
            ptr_of_tensor_of_problem_sizes,
            ptr_of_tensor_of_abc_ptrs,
            ptr_of_tensor_of_sfasfb_ptrs,
            ptr_of_tensor_of_cta_prefix,
            ptr_of_tensor_of_tensormap,
            persistent_blocks,
            num_groups,
            tile_m,
        ),
        num_groups,
        c_dtype,
        alpha_table(alpha_ptrs_ptr, num_groups),
        tile_m,
        num_stages,
        None,
        None,
        False,
    ).launch(
        grid=(persistent_blocks, 1, 1),
        block=[THREADS, 1, 1],
        cluster=(1, 1, 1),
        min_blocks_per_mp=blocks_per_sm,
        use_pdl=True,  # see _tile_range
        # several CTAs per SM need the whole unified L1/shared memory as shared memory
        preferred_smem_carveout=100 if blocks_per_sm > 1 else None,
    )
    return


@cute.jit
def routed_gemm_host(
    ptr_of_plan: cute.Pointer,
    ptr_of_run: cute.Pointer,
    ptr_of_tensor_of_tensormap: cute.Pointer,
    total_num_clusters: cutlass.Int32,
    persistent_blocks: cutlass.Int32,
    num_groups: cutlass.Constexpr[int],
    c_dtype: cutlass.Constexpr,
    alpha: cutlass.Constexpr[bool],
    tile_m: cutlass.Constexpr[int],
    num_stages: cutlass.Constexpr[int],
    blocks_per_sm: cutlass.Constexpr[int],
):
    """Launch a routed variant: a MoE run of up to ``num_groups`` experts whose CTAs build
    the group tables from the run's device counts (:mod:`.routed_groups`), with no
    routing kernel before it. ``ptr_of_plan`` / ``ptr_of_run``: the MoE plan's header
    words and a run slot's words (:mod:`nvfp4_aot.moe_layout`)."""
    kernel(
        *host_operands(
            None,
            None,
            None,
            None,
            ptr_of_tensor_of_tensormap,
            persistent_blocks,
            num_groups,
            tile_m,
        ),
        num_groups,
        c_dtype,
        None,
        tile_m,
        num_stages,
        cute.make_tensor(ptr_of_plan, cute.make_layout(P_HEADER_WORDS)),
        cute.make_tensor(ptr_of_run, cute.make_layout(R_WORDS)),
        alpha,
    ).launch(
        grid=(persistent_blocks, 1, 1),
        block=[THREADS, 1, 1],
        cluster=(1, 1, 1),
        min_blocks_per_mp=blocks_per_sm,
        use_pdl=True,  # see routed_groups.route
        preferred_smem_carveout=100 if blocks_per_sm > 1 else None,
    )
    return


def compile(
    num_groups: int,
    out_dtype: str = "float16",
    alpha: bool = False,
    tile_m: int = TILE_M,
    num_stages: int = NUM_STAGES,
    blocks_per_sm: int = 1,
):
    """Compile the kernel for a fixed group count (8 or 120), epilogue, activation tile
    (``tile_m`` rows, ``num_stages`` raw stages) and CTAs per SM (registers capped to fit
    them); returns the DSL object."""
    # a narrower tile lies inside one 128-row scale block; 16-64 rows ran on the H200
    if tile_m not in (16, 32, 64, TILE_M):
        raise ValueError(f"tile_m must be 16, 32, 64 or {TILE_M}, got {tile_m}")
    return compile_host(
        grouped_gemm_host, num_groups, out_dtype, alpha, tile_m, num_stages, blocks_per_sm
    )


def compile_routed(
    num_groups: int,
    out_dtype: str = "float16",
    alpha: bool = False,
    tile_m: int = TILE_M,
    num_stages: int = NUM_STAGES,
    blocks_per_sm: int = 1,
):
    """Compile the routed variant (:func:`routed_gemm_host`) of the kernel with ``tile_m``
    -row tiles for MoE plans of up to ``num_groups`` experts; returns the DSL object."""
    if num_groups + 1 > THREADS:  # route() takes an expert a thread
        raise ValueError(f"a routed variant serves at most {THREADS - 1} experts, got {num_groups}")
    return compile_routed_host(
        routed_gemm_host, num_groups, out_dtype, alpha, tile_m, num_stages, blocks_per_sm
    )
