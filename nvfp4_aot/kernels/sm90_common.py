"""sm_90a helpers shared by the two Hopper NVFP4 grouped GEMM kernels (per-CTA and a16).

Tile sizes, warp roles, the inline-PTX FP4/E4M3 decode, the consumers' wgmma and ping-pong
set-up, the global operand views, the epilogue and the host-side TMA operands; the layouts
and pipeline roles they serve are described in :mod:`.sm90_grouped_gemm`. Like every DSL
helper they are inlined into each kernel at trace time.
"""

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass.cute.nvgpu import cpasync, warpgroup
from cutlass.cute.runtime import make_ptr
from cutlass.cutlass_dsl import dsl_user_op

from .epilogue import C_DTYPES
from .inline_ptx import asm_i32s, ir_i32, lds_u16, lds_v4, mbar_wait

ARCHS = ("sm_90a",)

# CTA tile (M x N x K in FP4 elements).  M runs along the activations A (the
# wgmma N dimension), N along the weights B (the wgmma M dimension: 64 rows per
# consumer warpgroup).
TILE_M = 128
TILE_N = 128
TILE_K = 128

NUM_CONSUMER_WARPS = 8  # two warpgroups, 64 weight rows each
PRODUCER_WARP = NUM_CONSUMER_WARPS
NUM_CONSUMER_THREADS = NUM_CONSUMER_WARPS * 32
THREADS = NUM_CONSUMER_THREADS + 32

SF_VEC = 16  # FP4 elements per scale
BYTES_PER_TENSORMAP = 128
NUM_TENSORMAPS = 4  # A, B, SFA, SFB (workspace row is [4, 16] int64)
ACC_RESCALE = 16384.0  # 2^14 = 1 / (2^-7 * 2^-7): undoes the decode's scaling

# Derived sizes (bytes unless noted).
TILE_KB = TILE_K // 2  # FP4 bytes per tile row
SF_HALVES = TILE_K // 32  # 256-byte halves of 512-byte scale atoms per K tile
B_RAW_BYTES = TILE_N * TILE_KB
SF_BYTES = SF_HALVES * 256
DEC_ELEMS_A = TILE_M * TILE_K

assert TILE_M == 128 and TILE_N == 128, "one 128-row scale block per tile"
assert TILE_K == 128, "the register decode maps one 64-byte row onto 8 k16 blocks"
assert TILE_N == 64 * (NUM_CONSUMER_WARPS // 4)


# ---------------------------------------------------------------------------
# Device helpers
# ---------------------------------------------------------------------------

# Decode one 32-bit word of 8 FP4 values (nibbles q0..q7, q0 lowest) into four
# f16x2 registers: (q0, q2), (q4, q6), (q1, q3), (q5, q7), times the scale.
#
# An E2M1 nibble (s e1 e0 m) placed at FP16 bits 15 and 11..9 is exactly
# fp4 * 2^-14 (E2M1's subnormal 0.5 lands on the FP16 subnormal 2^-15, so the map
# is linear).  Both nibbles of every byte are first rearranged into that FP16
# high-byte form (sign at bit 7, e1 e0 m at bits 3..1): y_hi from the high
# nibbles, y_lo from the low ones; one prmt per register then moves two such
# bytes into the high bytes of an f16x2 with zero low bytes.  One multiply by
# the f16x2 scale (E4M3 * 2^7, exact, <= 57344) gives fp4 * scale * 2^-7 exactly
# (>= 2^-17, at most 6 significant bits; the sign rides through the multiply).
# The epilogue multiplies the accumulator by 2^14.  15 instructions per word
# (v4's shift/mask form took 19).  Any fixed nibble -> (register, half) map
# works because weights and activations go through this same function.
_DECODE_WORD_PTX = """{
.reg .b32 x, t, yh, u, v, yl, z, p0, p1, p2, p3;
shr.b32 x, $4, 3;
and.b32 t, x, 0x0E0E0E0E;
lop3.b32 yh, $4, 0x80808080, t, 0xEA;
shl.b32 u, $4, 1;
shl.b32 v, $4, 4;
and.b32 t, u, 0x0E0E0E0E;
lop3.b32 yl, v, 0x80808080, t, 0xEA;
mov.b32 z, 0;
prmt.b32 p0, yl, z, 0x1404;
prmt.b32 p1, yl, z, 0x3424;
prmt.b32 p2, yh, z, 0x1404;
prmt.b32 p3, yh, z, 0x3424;
mul.rn.f16x2 $0, p0, $5;
mul.rn.f16x2 $1, p1, $5;
mul.rn.f16x2 $2, p2, $5;
mul.rn.f16x2 $3, p3, $5;
}"""

# Two consecutive E4M3 scale bytes (low byte first) -> two f16x2 registers holding
# (scale0 * 2^7, scale0 * 2^7) and (scale1 * 2^7, scale1 * 2^7).  The broadcast is
# written as half moves, not prmt, so that ptxas folds it into the decode's HMUL2
# (.H0_H0 / .H1_H1 operand) instead of spending two PRMTs per scale pair.
_DECODE_SCALES_PTX = """{
.reg .b16 h, lo, hi;
.reg .b32 x, c;
cvt.u16.u32 h, $2;
cvt.rn.f16x2.e4m3x2 x, h;
mov.b32 c, 0x58005800;
mul.rn.f16x2 x, x, c;
mov.b32 {lo, hi}, x;
mov.b32 $0, {lo, lo};
mov.b32 $1, {hi, hi};
}"""


@dsl_user_op
def decode_word(word: cutlass.Int32, scale2: cutlass.Int32, *, loc=None, ip=None):
    """8 FP4 values -> 4 f16x2 (see _DECODE_WORD_PTX)."""
    return asm_i32s(
        4,
        _DECODE_WORD_PTX,
        "=r,=r,=r,=r,r,r",
        [ir_i32(word, loc, ip), ir_i32(scale2, loc, ip)],
        False,
        loc,
        ip,
    )


@dsl_user_op
def decode_scales(sf_pair: cutlass.Int32, *, loc=None, ip=None):
    """Two E4M3 bytes -> two broadcast f16x2 scales times 2^7."""
    return asm_i32s(2, _DECODE_SCALES_PTX, "=r,=r,r", [ir_i32(sf_pair, loc, ip)], False, loc, ip)


def consumer_wait(full_bar_base, state):
    """ab_pipeline.consumer_wait(state), retrying at once (full barrier i at base + 8 i).
    The pipeline's own wait takes a 10 ms suspend hint (a NANOSLEEP.SYNCS 0x989680 retry
    loop, among the top stall lines in ncu); retrying at once measured ~2 % faster on the
    H200."""
    mbar_wait(full_bar_base + state.index * 8, state.phase, suspend=False)


def load_weights(b_raw, sfb):
    """Raw weight bytes (rows w_row, w_row + 8) and their scale pairs."""
    w_words = []
    w_sfs = []
    for r8 in range(2):
        w_words.append(lds_v4(b_raw + r8 * 8 * TILE_KB))
        w_sfs.append(lds_u16(sfb + r8 * 128))
    return w_words, w_sfs


def decode_weights(regs, w_words, w_sfs):
    """Weights -> wgmma A fragment registers: reg 8 w + 2 s + r8 of the set."""
    for r8 in range(2):
        sc = decode_scales(w_sfs[r8])
        for w in range(4):
            vals = decode_word(w_words[r8][w], sc[w // 2])
            for s in range(4):
                regs[8 * w + 2 * s + r8] = vals[s]


def gmem_u8(address):
    """Byte pointer to global memory at ``address``, 16-byte aligned as TMA requires."""
    return cute.make_ptr(cutlass.Uint8, address, cute.AddressSpace.gmem, assumed_align=16)


def tma_partition(tma_atom, s_tensor, g_tensor, box_modes):
    """(smem, gmem) partitions of a TMA copy by one CTA (no multicast) whose box is the
    first ``box_modes`` modes of both tensors."""
    return cpasync.tma_partition(
        tma_atom,
        0,
        cute.make_layout(1),
        cute.group_modes(s_tensor, 0, box_modes),
        cute.group_modes(g_tensor, 0, box_modes),
    )


def make_ab_tensor(ptr: cute.Pointer, rows, k):
    """(rows, k/2) byte view of a K-major FP4 matrix (row pitch k/2 bytes)."""
    k_bytes = cute.assume(k // 2, 16)
    return cute.make_tensor(ptr, cute.make_layout((rows, k_bytes), stride=(k_bytes, 1)))


def make_sf_tensor(ptr: cute.Pointer, rows, k):
    """(256, 2 * ceil(k/64), ceil(rows/128)) byte view of a blocked scale tensor.

    Mode 0 is half of a 512-byte (128 rows x 4 scale columns) atom, mode 1 walks
    the atoms of one 128-row block along K in half-atom steps, mode 2 the row blocks.
    """
    k_atoms = (k + 63) // 64
    row_blocks = (rows + 127) // 128
    return cute.make_tensor(
        ptr,
        cute.make_layout(
            (256, k_atoms * 2, row_blocks),
            stride=(1, 256, cute.assume(k_atoms * 512, 512)),
        ),
    )


def consumer_mma(tidx, s_act, tile_m=TILE_M):
    """The consumers' RS wgmma (weights in registers x FP16 activations in smem, the
    activation tile ``tile_m`` rows: wgmma N).

    Returns (tiled_mma, tCrB, tCrA_sets, tCrA_regs, acc, tCcC): the B fragments of
    ``s_act`` (TILE_M, TILE_K, buffers), two weight register sets (even / odd K
    tiles: one is read by the wgmma in flight while the other is decoded) with
    their Int32 views, the C^T accumulator and its tile-relative (n, m) coordinates.
    """
    tiled_mma = sm90_utils.make_trivial_tiled_mma(
        cutlass.Float16,
        cutlass.Float16,
        cute.nvgpu.OperandMajorMode.K,
        cute.nvgpu.OperandMajorMode.K,
        cutlass.Float32,
        (TILE_N // 64, 1, 1),
        tiler_mn=(64, tile_m),
        a_source=warpgroup.OperandSource.RMEM,
    )
    thr_mma = tiled_mma.get_slice(tidx)
    tCrB = tiled_mma.make_fragment_B(thr_mma.partition_B(s_act))
    # (MMA, MMA_M, MMA_K)
    tCrA0 = tiled_mma.make_fragment_A(thr_mma.partition_shape_A((TILE_N, TILE_K)))
    tCrA1 = tiled_mma.make_fragment_A(thr_mma.partition_shape_A((TILE_N, TILE_K)))
    tCrA_regs = (
        cute.recast_tensor(tCrA0, cutlass.Int32),
        cute.recast_tensor(tCrA1, cutlass.Int32),
    )
    # (MMA, MMA_M, MMA_N): C^T tile, rows along n, columns along m
    acc = cute.make_rmem_tensor(thr_mma.partition_shape_C((TILE_N, tile_m)), cutlass.Float32)
    tCcC = thr_mma.partition_C(cute.make_identity_tensor((TILE_N, tile_m)))
    return tiled_mma, tCrB, (tCrA0, tCrA1), tCrA_regs, acc, tCcC


def pingpong_barriers(warp_idx):
    """(warpgroup, all-consumer barrier, own turn barrier, other's turn barrier):
    warpgroup w waits on named barrier 2 + w and signals 3 - w."""
    wg = warp_idx // 4
    return (
        wg,
        pipeline.NamedBarrier(barrier_id=1, num_threads=NUM_CONSUMER_THREADS),
        pipeline.NamedBarrier(barrier_id=2 + wg, num_threads=NUM_CONSUMER_THREADS),
        pipeline.NamedBarrier(barrier_id=3 - wg, num_threads=NUM_CONSUMER_THREADS),
    )


def thread_offsets(tidx):
    """(chunk, chunk_sf_off, w_raw_off, w_sf_off) of a consumer thread.

    The thread reads raw bytes [16 chunk, 16 chunk + 16) of its rows.  Blocked scale
    layout: the scales of groups 2c, 2c+1 of row r are the two bytes at
    (c // 2) * 512 + (r % 32) * 16 + ((r // 32) % 4) * 4 + 2 (c % 2).  Its weight
    rows are w_row and w_row + 8 of the tile (wgmma A fragment rows).
    """
    lane = tidx % 32
    chunk = lane % 4
    chunk_sf_off = (chunk // 2) * 512 + (chunk % 2) * 2
    w_row = (tidx // 128) * 64 + ((tidx % 128) // 32) * 16 + lane // 4
    w_raw_off = w_row * TILE_KB + chunk * 16
    w_sf_off = chunk_sf_off + (w_row % 32) * 16 + ((w_row // 32) % 4) * 4
    return chunk, chunk_sf_off, w_raw_off, w_sf_off


@cute.jit
def store_tile(
    acc,
    tCcC,
    c_address,
    m,
    n,
    coord_m,
    coord_n,
    scale,
    c_dtype: cutlass.Constexpr,
    tile_m: cutlass.Constexpr = TILE_M,
):
    """Epilogue: C[m, n] = scale * acc[n, m] -> ``c_dtype`` (round to nearest even),
    element-wise guarded for the M/N residues. ``scale`` is 2^14 (undoing the decode's
    scaling), times the group's alpha in a variant with alpha (:mod:`.epilogue`)."""
    mC = cute.make_tensor(
        cute.make_ptr(c_dtype, c_address, cute.AddressSpace.gmem, assumed_align=2),
        cute.make_layout((m, n), stride=(n, 1)),
    )
    gC = cute.local_tile(mC, (tile_m, TILE_N), (coord_m, coord_n))
    residue_m = m - coord_m * tile_m
    residue_n = n - coord_n * TILE_N
    for i in cutlass.range_constexpr(cute.size(acc)):
        row_n, col_m = tCcC[i]
        if col_m < residue_m and row_n < residue_n:
            gC[col_m, row_n] = c_dtype(acc[i] * scale)


# ---------------------------------------------------------------------------
# Host
# ---------------------------------------------------------------------------


def _table_tensors(
    ptr_of_tensor_of_problem_sizes,
    ptr_of_tensor_of_abc_ptrs,
    ptr_of_tensor_of_sfasfb_ptrs,
    ptr_of_tensor_of_cta_prefix,
    num_groups,
):
    """The group tables: (sizes, A/B/C pointers, SFA/SFB pointers, CTA prefix)."""
    return (
        cute.make_tensor(
            ptr_of_tensor_of_problem_sizes, cute.make_layout((num_groups, 4), stride=(4, 1))
        ),
        cute.make_tensor(
            ptr_of_tensor_of_abc_ptrs, cute.make_layout((num_groups, 3), stride=(3, 1))
        ),
        cute.make_tensor(
            ptr_of_tensor_of_sfasfb_ptrs, cute.make_layout((num_groups, 2), stride=(2, 1))
        ),
        cute.make_tensor(
            ptr_of_tensor_of_cta_prefix, cute.make_layout((num_groups + 1,), stride=(1,))
        ),
    )


def host_operands(
    ptr_of_tensor_of_problem_sizes,
    ptr_of_tensor_of_abc_ptrs,
    ptr_of_tensor_of_sfasfb_ptrs,
    ptr_of_tensor_of_cta_prefix,
    ptr_of_tensor_of_tensormap,
    persistent_blocks,
    num_groups,
    tile_m=TILE_M,
):
    """The kernel's arguments (all but num_groups) from the host launcher's inputs; A's
    TMA box is ``tile_m`` rows. A routed variant has no table pointers (None): its
    tables are None too (the kernel builds them, :mod:`.routed_groups`)."""
    tables = None
    if ptr_of_tensor_of_abc_ptrs is not None:
        tables = _table_tensors(
            ptr_of_tensor_of_problem_sizes,
            ptr_of_tensor_of_abc_ptrs,
            ptr_of_tensor_of_sfasfb_ptrs,
            ptr_of_tensor_of_cta_prefix,
            num_groups,
        )
    tensor_of_problem_sizes, tensor_of_abc_ptrs, tensor_of_sfasfb_ptrs, tensor_of_cta_prefix = (
        tables or (None,) * 4
    )
    tensor_of_tensormap = cute.make_tensor(
        ptr_of_tensor_of_tensormap,
        cute.make_layout((persistent_blocks, NUM_TENSORMAPS, 16), stride=(64, 16, 1)),
    )

    # Fake shapes for the initial TMA descriptors; the kernel rewrites shape,
    # strides and address per group in its per-CTA tensormap workspace.
    fake_rows = cutlass.Int32(128)
    fake_k = cutlass.Int32(256)
    null_u8 = gmem_u8(0)
    fake_a = make_ab_tensor(null_u8, fake_rows, fake_k)
    fake_b = make_ab_tensor(null_u8, fake_rows, fake_k)
    fake_sfa = make_sf_tensor(null_u8, fake_rows, fake_k)
    fake_sfb = make_sf_tensor(null_u8, fake_rows, fake_k)

    g2s = cpasync.CopyBulkTensorTileG2SOp()
    tma_atom_a, tma_tensor_a = cpasync.make_tiled_tma_atom(
        g2s,
        fake_a,
        cute.make_layout((tile_m, TILE_KB), stride=(TILE_KB, 1)),
        (tile_m, TILE_KB),
    )
    tma_atom_b, tma_tensor_b = cpasync.make_tiled_tma_atom(
        g2s,
        fake_b,
        cute.make_layout((TILE_N, TILE_KB), stride=(TILE_KB, 1)),
        (TILE_N, TILE_KB),
    )
    sf_smem_layout = cute.make_layout((256, SF_HALVES, 1), stride=(1, 256, SF_BYTES))
    tma_atom_sfa, tma_tensor_sfa = cpasync.make_tiled_tma_atom(
        g2s, fake_sfa, sf_smem_layout, (256, SF_HALVES, 1)
    )
    tma_atom_sfb, tma_tensor_sfb = cpasync.make_tiled_tma_atom(
        g2s, fake_sfb, sf_smem_layout, (256, SF_HALVES, 1)
    )

    return (
        tma_atom_a,
        tma_tensor_a,
        tma_atom_b,
        tma_tensor_b,
        tma_atom_sfa,
        tma_tensor_sfa,
        tma_atom_sfb,
        tma_tensor_sfb,
        tensor_of_abc_ptrs,
        tensor_of_sfasfb_ptrs,
        tensor_of_tensormap,
        tensor_of_problem_sizes,
        tensor_of_cta_prefix,
    )


def compile_routed_host(routed_host, num_groups: int, out_dtype: str, alpha: bool, *constexprs):
    """Compile a routed host launcher (plan and run words, tensormap workspace, the two
    Int32 scalars) for up to ``num_groups`` experts and an epilogue; returns the DSL
    object."""
    gmem = cute.AddressSpace.gmem
    return cute.compile(
        routed_host,
        make_ptr(cutlass.Int64, 0, gmem, assumed_align=16),
        make_ptr(cutlass.Int64, 0, gmem, assumed_align=16),
        make_ptr(cutlass.Int64, 0, gmem, assumed_align=16),
        cutlass.Int32(1),
        cutlass.Int32(1),
        num_groups,
        C_DTYPES[out_dtype],
        alpha,
        *constexprs,
    )


def compile_host(grouped_gemm_host, num_groups: int, out_dtype: str, alpha: bool, *constexprs):
    """Compile a family's host launcher for a fixed group count (8 or 120) and epilogue
    (:mod:`.epilogue`), and the family's own compile-time arguments after them; returns
    the DSL object.  Null pointers and Int32 scalars 1: neither is baked into the code."""
    gmem = cute.AddressSpace.gmem
    return cute.compile(
        grouped_gemm_host,
        make_ptr(cutlass.Int32, 0, gmem, assumed_align=16),
        make_ptr(cutlass.Int64, 0, gmem, assumed_align=16),
        make_ptr(cutlass.Int64, 0, gmem, assumed_align=16),
        make_ptr(cutlass.Int32, 0, gmem, assumed_align=16),
        make_ptr(cutlass.Int64, 0, gmem, assumed_align=16),
        cutlass.Int32(1),
        cutlass.Int32(1),
        make_ptr(cutlass.Int64, 0, gmem, assumed_align=16) if alpha else None,
        num_groups,
        C_DTYPES[out_dtype],
        *constexprs,
    )
