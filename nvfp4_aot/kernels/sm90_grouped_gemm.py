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
  warp 8     producer: per-CTA tensormaps (A, B, SFA, SFB) updated in global
             memory whenever the group changes, TMA loads of raw FP4 + scales into
             a NUM_STAGES-deep mbarrier pipeline.
Tiles are scheduled like the sm_100a kernel: tile t of group g has
cta_rest = t - prefix[g], coord_m = cta_rest % ceil(m / TILE_M),
coord_n = cta_rest // ceil(m / TILE_M); CTA b processes the contiguous tile range
[b * ceil(T / P), min((b + 1) * ceil(T / P), T)).

Limits: k % 32 == 0 (TMA needs a 16-byte row pitch of k/2 bytes); l == 1; global
pointers 16-byte aligned.  M and N residues are handled (TMA zero-fill on loads,
element-wise guarded FP16 stores).  Scale bytes in the padding of a partial
scale atom (scale columns k/16 .. 4*ceil(k/64)-1) meet zero FP4 data, so they only
need to be finite (cuBLAS/to_blocked pads them with zeros).
"""

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass._mlir.dialects import llvm
from cutlass.cute.nvgpu import cpasync, warpgroup
from cutlass.cute.runtime import make_ptr
from cutlass.cutlass_dsl import dsl_user_op
from cutlass.memory import SmemAllocator
from cutlass.tensor_utils import TensorMapManager, TensorMapUpdateMode

from .group_search import advance_group, find_group

FAMILY = "sm90_nvfp4_grouped_gemm"
ARCHS = ("sm_90a",)

# CTA tile (M x N x K in FP4 elements).  M runs along the activations A (the
# wgmma N dimension), N along the weights B (the wgmma M dimension: 64 rows per
# consumer warpgroup).
TILE_M = 128
TILE_N = 128
TILE_K = 128
NUM_STAGES = 5  # raw (FP4 + scale) TMA pipeline depth
NUM_DEC_BUFFERS = 4  # decoded FP16 activation buffers (fixed: see the consumer loop)

NUM_CONSUMER_WARPS = 8  # two warpgroups, 64 weight rows each
PRODUCER_WARP = NUM_CONSUMER_WARPS
NUM_CONSUMER_THREADS = NUM_CONSUMER_WARPS * 32
THREADS = NUM_CONSUMER_THREADS + 32

SF_VEC = 16  # FP4 elements per scale
BYTES_PER_TENSORMAP = 128
NUM_TENSORMAPS = 4  # A, B, SFA, SFB (workspace row is [4, 16] int64)
ACC_RESCALE = 16384.0  # 2^14 = 1 / (2^-7 * 2^-7): undoes the decode's scaling

# Derived sizes (bytes unless noted).
_TILE_KB = TILE_K // 2  # FP4 bytes per tile row
_SF_HALVES = TILE_K // 32  # 256-byte halves of 512-byte scale atoms per K tile
_A_RAW_BYTES = TILE_M * _TILE_KB
_B_RAW_BYTES = TILE_N * _TILE_KB
_SF_BYTES = _SF_HALVES * 256
_DEC_ELEMS_A = TILE_M * TILE_K
_TMA_BYTES_PER_STAGE = _A_RAW_BYTES + _B_RAW_BYTES + 2 * _SF_BYTES
_ACT_TASKS = TILE_M * 4 // NUM_CONSUMER_THREADS  # (row, 16-byte chunk) tasks per thread

assert TILE_M == 128 and TILE_N == 128, "one 128-row scale block per tile"
assert TILE_K == 128, "the register decode maps one 64-byte row onto 8 k16 blocks"
assert TILE_N == 64 * (NUM_CONSUMER_WARPS // 4)


def ceil_div(a, b):
    return (a + b - 1) // b


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


def _i32(v, loc, ip):
    return cutlass.Int32(v).ir_value(loc=loc, ip=ip)


def _struct_i32(n):
    return llvm.StructType.get_literal([cutlass.Int32.mlir_type] * n)


def _unpack(res, n, loc, ip):
    return [
        cutlass.Int32(llvm.extractvalue(cutlass.Int32.mlir_type, res, [i], loc=loc, ip=ip))
        for i in range(n)
    ]


def _asm(ptx, constraints, operands, loc, ip):
    """Inline PTX without results, ordered with every other memory access."""
    llvm.inline_asm(
        None, operands, ptx, constraints + ",~{memory}" if constraints else "~{memory}",
        has_side_effects=True, is_align_stack=False,
        asm_dialect=llvm.AsmDialect.AD_ATT, loc=loc, ip=ip,
    )


def _asm_i32(ptx, constraints, operands, loc, ip):
    """Inline PTX with one 32-bit result, never reordered or dropped."""
    return cutlass.Int32(llvm.inline_asm(
        cutlass.Int32.mlir_type, operands, ptx, constraints,
        has_side_effects=True, is_align_stack=False,
        asm_dialect=llvm.AsmDialect.AD_ATT, loc=loc, ip=ip,
    ))


@dsl_user_op
def lds_v4(addr: cutlass.Int32, *, loc=None, ip=None):
    """16-byte shared load -> 4 Int32."""
    res = llvm.inline_asm(
        _struct_i32(4), [_i32(addr, loc, ip)],
        "ld.shared.v4.b32 {$0, $1, $2, $3}, [$4];", "=r,=r,=r,=r,r,~{memory}",
        has_side_effects=True, is_align_stack=False,
        asm_dialect=llvm.AsmDialect.AD_ATT, loc=loc, ip=ip,
    )
    return _unpack(res, 4, loc, ip)


@dsl_user_op
def lds_u16(addr: cutlass.Int32, *, loc=None, ip=None) -> cutlass.Int32:
    """2-byte shared load, zero extended."""
    return _asm_i32("ld.shared.u16 $0, [$1];", "=r,r,~{memory}", [_i32(addr, loc, ip)], loc, ip)


@dsl_user_op
def sts_b32(addr: cutlass.Int32, val: cutlass.Int32, *, loc=None, ip=None) -> None:
    _asm("st.shared.b32 [$0], $1;", "r,r", [_i32(addr, loc, ip), _i32(val, loc, ip)], loc, ip)


@dsl_user_op
def decode_word(word: cutlass.Int32, scale2: cutlass.Int32, *, loc=None, ip=None):
    """8 FP4 values -> 4 f16x2 (see _DECODE_WORD_PTX)."""
    res = llvm.inline_asm(
        _struct_i32(4), [_i32(word, loc, ip), _i32(scale2, loc, ip)],
        _DECODE_WORD_PTX, "=r,=r,=r,=r,r,r",
        has_side_effects=False, is_align_stack=False,
        asm_dialect=llvm.AsmDialect.AD_ATT, loc=loc, ip=ip,
    )
    return _unpack(res, 4, loc, ip)


@dsl_user_op
def decode_scales(sf_pair: cutlass.Int32, *, loc=None, ip=None):
    """Two E4M3 bytes -> two broadcast f16x2 scales times 2^7."""
    res = llvm.inline_asm(
        _struct_i32(2), [_i32(sf_pair, loc, ip)],
        _DECODE_SCALES_PTX, "=r,=r,r",
        has_side_effects=False, is_align_stack=False,
        asm_dialect=llvm.AsmDialect.AD_ATT, loc=loc, ip=ip,
    )
    return _unpack(res, 2, loc, ip)



# Consumer wait on a raw-stage full mbarrier: try_wait.parity with suspend-time
# hint 0.  The pipeline's consumer_wait uses a 10 ms hint (a NANOSLEEP.SYNCS
# 0x989680 retry loop, among the top stall lines in ncu); hint 0 measured ~2%
# faster on the H200.
_FULL_WAIT_PTX = """{
.reg .pred P1;
FULL_WAIT:
mbarrier.try_wait.parity.shared::cta.b64 P1, [$0], $1, 0;
@!P1 bra.uni FULL_WAIT;
}"""


@dsl_user_op
def mbar_wait_nohint(addr: cutlass.Int32, phase: cutlass.Int32, *, loc=None, ip=None) -> None:
    _asm(_FULL_WAIT_PTX, "r,r", [_i32(addr, loc, ip), _i32(phase, loc, ip)], loc, ip)


def _consumer_wait(full_bar_base, state):
    """ab_pipeline.consumer_wait(state) with hint 0 (full barrier i at base + 8 i)."""
    mbar_wait_nohint(full_bar_base + state.index * 8, state.phase)


def _load_weights(b_raw, sfb):
    """Raw weight bytes (rows w_row, w_row + 8) and their scale pairs."""
    w_words = []
    w_sfs = []
    for r8 in range(2):
        w_words.append(lds_v4(b_raw + r8 * 8 * _TILE_KB))
        w_sfs.append(lds_u16(sfb + r8 * 128))
    return w_words, w_sfs


def _decode_weights(regs, w_words, w_sfs):
    """Weights -> wgmma A fragment registers: reg 8 w + 2 s + r8 of the set."""
    for r8 in range(2):
        sc = decode_scales(w_sfs[r8])
        for w in range(4):
            vals = decode_word(w_words[r8][w], sc[w // 2])
            for s in range(4):
                regs[8 * w + 2 * s + r8] = vals[s]


def _decode_act(a_raw, sfa, a_dst, a_rr):
    """This thread's activation tasks -> swizzled FP16 buffer (word w, shift s is
    register s of 16-byte unit u = 4 (w % 2) + s, k = 8 u)."""
    a_words = []
    a_sfs = []
    for i in range(_ACT_TASKS):
        a_words.append(lds_v4(a_raw + i * 64 * _TILE_KB))
        a_sfs.append(lds_u16(sfa + i * 8))
    for i in range(_ACT_TASKS):
        sc = decode_scales(a_sfs[i])
        dst = a_dst + i * 8 * 1024
        for w in range(4):
            vals = decode_word(a_words[i][w], sc[w // 2])
            for s in range(4):
                unit = 4 * (w % 2) + s
                sts_b32(dst + (w // 2) * (TILE_M * 128) + ((a_rr ^ unit) * 16), vals[s])


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


def consumer_mma(tidx, s_act):
    """The consumers' RS wgmma (weights in registers x FP16 activations in smem).

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
        tiler_mn=(64, TILE_M),
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
    acc = cute.make_rmem_tensor(thr_mma.partition_shape_C((TILE_N, TILE_M)), cutlass.Float32)
    tCcC = thr_mma.partition_C(cute.make_identity_tensor((TILE_N, TILE_M)))
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
    w_raw_off = w_row * _TILE_KB + chunk * 16
    w_sf_off = chunk_sf_off + (w_row % 32) * 16 + ((w_row // 32) % 4) * 4
    return chunk, chunk_sf_off, w_raw_off, w_sf_off


@cute.jit
def store_tile(acc, tCcC, c_address, m, n, coord_m, coord_n):
    """Epilogue: C[m, n] = 2^14 * acc[n, m] -> FP16, element-wise guarded for the
    M/N residues."""
    mC = cute.make_tensor(
        cute.make_ptr(cutlass.Float16, c_address, cute.AddressSpace.gmem, assumed_align=2),
        cute.make_layout((m, n), stride=(n, 1)),
    )
    gC = cute.local_tile(mC, (TILE_M, TILE_N), (coord_m, coord_n))
    residue_m = m - coord_m * TILE_M
    residue_n = n - coord_n * TILE_N
    for i in cutlass.range_constexpr(cute.size(acc)):
        row_n, col_m = tCcC[i]
        if col_m < residue_m and row_n < residue_n:
            gC[col_m, row_n] = cutlass.Float16(acc[i] * ACC_RESCALE)


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
):
    tidx, _, _ = cute.arch.thread_idx()
    warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
    bidx, _, _ = cute.arch.block_idx()
    grid_dim_x, _, _ = cute.arch.grid_dim()

    # Contiguous tile range of this CTA (same split as the sm_100a kernel).
    total_tiles = tensor_of_cta_prefix[num_groups]
    tiles_per_cta = ceil_div(total_tiles, grid_dim_x)
    tile_start = bidx * tiles_per_cta
    tile_end = tile_start + tiles_per_cta
    if tile_end > total_tiles:
        tile_end = total_tiles

    #
    # Shared memory
    #
    @cute.struct
    class SharedStorage:
        ab_mbar_ptr: cute.struct.MemRange[cutlass.Int64, NUM_STAGES * 2]
        # Raw TMA stages: FP4 bytes, row-major (rows, TILE_K / 2), no swizzle.
        sA_raw: cute.struct.Align[
            cute.struct.MemRange[cutlass.Uint8, NUM_STAGES * _A_RAW_BYTES], 1024
        ]
        sB_raw: cute.struct.Align[
            cute.struct.MemRange[cutlass.Uint8, NUM_STAGES * _B_RAW_BYTES], 1024
        ]
        # Raw scale stages: _SF_HALVES x 256 bytes = TILE_K / 64 consecutive atoms.
        sSFA_raw: cute.struct.Align[
            cute.struct.MemRange[cutlass.Uint8, NUM_STAGES * _SF_BYTES], 1024
        ]
        sSFB_raw: cute.struct.Align[
            cute.struct.MemRange[cutlass.Uint8, NUM_STAGES * _SF_BYTES], 1024
        ]
        # Decoded FP16 activations (the wgmma B operand), K-major 128B-swizzled.
        sA_dec: cute.struct.Align[
            cute.struct.MemRange[cutlass.Float16, NUM_DEC_BUFFERS * _DEC_ELEMS_A], 1024
        ]

    smem = SmemAllocator()
    storage = smem.allocate(SharedStorage)

    # Raw TMA destinations.
    # (TILE_M, TILE_K/2, STAGE)
    sA_raw = storage.sA_raw.get_tensor(
        cute.make_layout((TILE_M, _TILE_KB, NUM_STAGES), stride=(_TILE_KB, 1, _A_RAW_BYTES))
    )
    # (TILE_N, TILE_K/2, STAGE)
    sB_raw = storage.sB_raw.get_tensor(
        cute.make_layout((TILE_N, _TILE_KB, NUM_STAGES), stride=(_TILE_KB, 1, _B_RAW_BYTES))
    )
    # (256, SF_HALVES, 1, STAGE)
    sf_stage_layout = cute.make_layout(
        (256, _SF_HALVES, 1, NUM_STAGES), stride=(1, 256, _SF_BYTES, _SF_BYTES)
    )
    sSFA_raw = storage.sSFA_raw.get_tensor(sf_stage_layout)
    sSFB_raw = storage.sSFB_raw.get_tensor(sf_stage_layout)

    # Decoded activation buffers: S<3,4,3> (byte-address 128B swizzle) o (8,64) atoms.
    a_dec_layout = cute.tile_to_shape(
        warpgroup.make_smem_layout_atom(
            warpgroup.SmemLayoutAtomKind.K_SW128, cutlass.Float16
        ),
        (TILE_M, TILE_K, NUM_DEC_BUFFERS),
        order=(0, 1, 2),
    )
    # (TILE_M, TILE_K, DEC_BUF)
    sA_dec = storage.sA_dec.get_tensor(a_dec_layout.outer, swizzle=a_dec_layout.inner)

    #
    # Mainloop pipeline: producer = TMA (1 arrive + tx bytes), consumer = one
    # arrive per consumer warp.
    #
    ab_pipeline = pipeline.PipelineTmaAsync.create(
        barrier_storage=storage.ab_mbar_ptr.data_ptr(),
        num_stages=NUM_STAGES,
        producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
        consumer_group=pipeline.CooperativeGroup(
            pipeline.Agent.Thread, NUM_CONSUMER_WARPS
        ),
        tx_count=_TMA_BYTES_PER_STAGE,
        cta_layout_vmnk=cute.make_layout((1, 1, 1, 1)),
    )

    #
    # TMA partitions.  The TMA tensors come from fake host shapes; coordinates
    # past those shapes are fine because the real extents live in the
    # per-CTA tensormaps updated below.
    #
    # (TILE_M, TILE_K/2, RestM, RestK)
    gA = cute.local_tile(mA, (TILE_M, _TILE_KB), (None, None))
    # (TILE_N, TILE_K/2, RestN, RestK)
    gB = cute.local_tile(mB, (TILE_N, _TILE_KB), (None, None))
    # (256, SF_HALVES, 1, 1, RestK, RestRowBlock)
    gSFA = cute.local_tile(mSFA, (256, _SF_HALVES, 1), (None, None, None))
    gSFB = cute.local_tile(mSFB, (256, _SF_HALVES, 1), (None, None, None))
    # ((atom_v, rest_v), STAGE) / ((atom_v, rest_v), RestM, RestK)
    tAsA, tAgA = cpasync.tma_partition(
        tma_atom_a, 0, cute.make_layout(1),
        cute.group_modes(sA_raw, 0, 2), cute.group_modes(gA, 0, 2),
    )
    tBsB, tBgB = cpasync.tma_partition(
        tma_atom_b, 0, cute.make_layout(1),
        cute.group_modes(sB_raw, 0, 2), cute.group_modes(gB, 0, 2),
    )
    # ((atom_v, rest_v), STAGE) / ((atom_v, rest_v), 1, RestK, RestRowBlock)
    tAsSFA, tAgSFA = cpasync.tma_partition(
        tma_atom_sfa, 0, cute.make_layout(1),
        cute.group_modes(sSFA_raw, 0, 3), cute.group_modes(gSFA, 0, 3),
    )
    tBsSFB, tBgSFB = cpasync.tma_partition(
        tma_atom_sfb, 0, cute.make_layout(1),
        cute.group_modes(sSFB_raw, 0, 3), cute.group_modes(gSFB, 0, 3),
    )

    #
    # Producer warp: tensormaps + TMA loads.
    #
    if warp_idx == PRODUCER_WARP:
        tensormap_manager = TensorMapManager(TensorMapUpdateMode.GMEM, BYTES_PER_TENSORMAP)
        tensormap_a_gmem_ptr = tensormap_manager.get_tensormap_ptr(
            tensormaps[(bidx, 0, None)].iterator
        )
        tensormap_b_gmem_ptr = tensormap_manager.get_tensormap_ptr(
            tensormaps[(bidx, 1, None)].iterator
        )
        tensormap_sfa_gmem_ptr = tensormap_manager.get_tensormap_ptr(
            tensormaps[(bidx, 2, None)].iterator
        )
        tensormap_sfb_gmem_ptr = tensormap_manager.get_tensormap_ptr(
            tensormaps[(bidx, 3, None)].iterator
        )
        tensormap_manager.init_tensormap_from_atom(tma_atom_a, tensormap_a_gmem_ptr, PRODUCER_WARP)
        tensormap_manager.init_tensormap_from_atom(tma_atom_b, tensormap_b_gmem_ptr, PRODUCER_WARP)
        tensormap_manager.init_tensormap_from_atom(tma_atom_sfa, tensormap_sfa_gmem_ptr, PRODUCER_WARP)
        tensormap_manager.init_tensormap_from_atom(tma_atom_sfb, tensormap_sfb_gmem_ptr, PRODUCER_WARP)
        tensormap_manager.fence_tensormap_initialization()

        producer_state = pipeline.make_pipeline_state(
            pipeline.PipelineUserType.Producer, NUM_STAGES
        )
        if tile_start < tile_end:
            tile_idx = tile_start
            group_idx = find_group(tile_idx, tensor_of_cta_prefix, num_groups)
            prev_group_idx = cutlass.Int32(-1)
            cta_m = cutlass.Int32(1)
            k_tile_cnt = cutlass.Int32(0)
            while tile_idx < tile_end:
                group_idx = advance_group(tile_idx, group_idx, tensor_of_cta_prefix)
                if group_idx != prev_group_idx:
                    m = tensor_of_problem_sizes[group_idx, 0]
                    n = tensor_of_problem_sizes[group_idx, 1]
                    k = tensor_of_problem_sizes[group_idx, 2]
                    cta_m = ceil_div(m, TILE_M)
                    k_tile_cnt = ceil_div(k, TILE_K)
                    real_a = make_ab_tensor(
                        cute.make_ptr(cutlass.Uint8, tensor_of_abc_ptrs[group_idx, 0],
                                      cute.AddressSpace.gmem, assumed_align=16),
                        m, k,
                    )
                    real_b = make_ab_tensor(
                        cute.make_ptr(cutlass.Uint8, tensor_of_abc_ptrs[group_idx, 1],
                                      cute.AddressSpace.gmem, assumed_align=16),
                        n, k,
                    )
                    real_sfa = make_sf_tensor(
                        cute.make_ptr(cutlass.Uint8, tensor_of_sfasfb_ptrs[group_idx, 0],
                                      cute.AddressSpace.gmem, assumed_align=16),
                        m, k,
                    )
                    real_sfb = make_sf_tensor(
                        cute.make_ptr(cutlass.Uint8, tensor_of_sfasfb_ptrs[group_idx, 1],
                                      cute.AddressSpace.gmem, assumed_align=16),
                        n, k,
                    )
                    tensormap_manager.update_tensormap(
                        (real_a, real_b, real_sfa, real_sfb),
                        (tma_atom_a, tma_atom_b, tma_atom_sfa, tma_atom_sfb),
                        (tensormap_a_gmem_ptr, tensormap_b_gmem_ptr,
                         tensormap_sfa_gmem_ptr, tensormap_sfb_gmem_ptr),
                        PRODUCER_WARP,
                        (None, None, None, None),
                    )
                    tensormap_manager.fence_tensormap_update(tensormap_a_gmem_ptr)
                    tensormap_manager.fence_tensormap_update(tensormap_b_gmem_ptr)
                    tensormap_manager.fence_tensormap_update(tensormap_sfa_gmem_ptr)
                    tensormap_manager.fence_tensormap_update(tensormap_sfb_gmem_ptr)
                    prev_group_idx = group_idx

                cta_rest = tile_idx - tensor_of_cta_prefix[group_idx]
                coord_m = cta_rest % cta_m
                coord_n = cta_rest // cta_m
                tAgA_tile = tAgA[(None, coord_m, None)]
                tBgB_tile = tBgB[(None, coord_n, None)]
                tAgSFA_tile = tAgSFA[(None, 0, None, coord_m)]
                tBgSFB_tile = tBgSFB[(None, 0, None, coord_n)]
                desc_a = tensormap_manager.get_tensormap_ptr(
                    tensormap_a_gmem_ptr, cute.AddressSpace.generic
                )
                desc_b = tensormap_manager.get_tensormap_ptr(
                    tensormap_b_gmem_ptr, cute.AddressSpace.generic
                )
                desc_sfa = tensormap_manager.get_tensormap_ptr(
                    tensormap_sfa_gmem_ptr, cute.AddressSpace.generic
                )
                desc_sfb = tensormap_manager.get_tensormap_ptr(
                    tensormap_sfb_gmem_ptr, cute.AddressSpace.generic
                )
                for k_tile in cutlass.range(k_tile_cnt, unroll=1):
                    ab_pipeline.producer_acquire(producer_state)
                    bar = ab_pipeline.producer_get_barrier(producer_state)
                    stage = producer_state.index
                    cute.copy(tma_atom_a, tAgA_tile[(None, k_tile)], tAsA[(None, stage)],
                              tma_bar_ptr=bar, tma_desc_ptr=desc_a)
                    cute.copy(tma_atom_b, tBgB_tile[(None, k_tile)], tBsB[(None, stage)],
                              tma_bar_ptr=bar, tma_desc_ptr=desc_b)
                    cute.copy(tma_atom_sfa, tAgSFA_tile[(None, k_tile)], tAsSFA[(None, stage)],
                              tma_bar_ptr=bar, tma_desc_ptr=desc_sfa)
                    cute.copy(tma_atom_sfb, tBgSFB_tile[(None, k_tile)], tBsSFB[(None, stage)],
                              tma_bar_ptr=bar, tma_desc_ptr=desc_sfb)
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
        tiled_mma, tCrB, tCrA_sets, tCrA_regs, acc, tCcC = consumer_mma(tidx, sA_dec)
        num_k_blocks = cute.size(tCrA_sets[0], mode=[2])
        wg, consumer_bar, my_turn_bar, other_turn_bar = pingpong_barriers(warp_idx)
        consumer_state = pipeline.make_pipeline_state(
            pipeline.PipelineUserType.Consumer, NUM_STAGES
        )

        a_raw_base = storage.sA_raw.data_ptr().toint()
        b_raw_base = storage.sB_raw.data_ptr().toint()
        sfa_base = storage.sSFA_raw.data_ptr().toint()
        sfb_base = storage.sSFB_raw.data_ptr().toint()
        a_dec_base = storage.sA_dec.data_ptr().toint()
        full_bar_base = storage.ab_mbar_ptr.data_ptr().toint()

        chunk, chunk_sf_off, w_raw_off, w_sf_off = thread_offsets(tidx)
        # Activations: task i is row a_row + 64 i, bytes [16 c, 16 c + 16).
        a_row = tidx // 4
        a_raw_off = a_row * _TILE_KB + chunk * 16
        a_sf_off = chunk_sf_off + (a_row % 32) * 16 + ((a_row // 32) % 4) * 4
        # 128B swizzle: byte = (k // 64) * TILE_M * 128 + (r // 8) * 1024 + (r % 8) * 128
        #               + (((k % 64) // 8) ^ (r % 8)) * 16 + (k % 8) * 2
        a_rr = a_row % 8
        a_dec_row_off = (a_row // 8) * 1024 + a_rr * 128 + chunk * 4

        if tile_start < tile_end:
            tile_idx = tile_start
            group_idx = find_group(tile_idx, tensor_of_cta_prefix, num_groups)
            prev_group_idx = cutlass.Int32(-1)
            m = cutlass.Int32(0)
            n = cutlass.Int32(0)
            cta_m = cutlass.Int32(1)
            k_tile_cnt = cutlass.Int32(0)
            while tile_idx < tile_end:
                group_idx = advance_group(tile_idx, group_idx, tensor_of_cta_prefix)
                if group_idx != prev_group_idx:
                    m = tensor_of_problem_sizes[group_idx, 0]
                    n = tensor_of_problem_sizes[group_idx, 1]
                    k = tensor_of_problem_sizes[group_idx, 2]
                    cta_m = ceil_div(m, TILE_M)
                    k_tile_cnt = ceil_div(k, TILE_K)
                    prev_group_idx = group_idx
                cta_rest = tile_idx - tensor_of_cta_prefix[group_idx]
                coord_m = cta_rest % cta_m
                coord_n = cta_rest // cta_m

                acc.fill(0.0)
                tiled_mma.set(warpgroup.Field.ACCUMULATE, True)
                # Ping-pong.  Prologue: both warpgroups decode their halves of
                # the activations of K tile 0 into buffer 0.
                _consumer_wait(full_bar_base, consumer_state)
                _decode_act(
                    a_raw_base + consumer_state.index * _A_RAW_BYTES + a_raw_off,
                    sfa_base + consumer_state.index * _SF_BYTES + a_sf_off,
                    a_dec_base + a_dec_row_off, a_rr,
                )
                # Raw weights are loaded one K tile ahead (here K tile 0), so
                # the LDS latency is off the decode's critical path.
                w_words, w_sfs = _load_weights(
                    b_raw_base + consumer_state.index * _B_RAW_BYTES + w_raw_off,
                    sfb_base + consumer_state.index * _SF_BYTES + w_sf_off,
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
                            if t + 1 < k_tile_cnt:
                                next_state = consumer_state.clone()
                                next_state.advance()
                                _consumer_wait(full_bar_base, next_state)
                                nstage = next_state.index
                                _decode_act(
                                    a_raw_base + nstage * _A_RAW_BYTES + a_raw_off,
                                    sfa_base + nstage * _SF_BYTES + a_sf_off,
                                    a_dec_base + ((q + 1) % NUM_DEC_BUFFERS) * (_DEC_ELEMS_A * 2)
                                    + a_dec_row_off,
                                    a_rr,
                                )
                            _decode_weights(tCrA_regs[q % 2], w_words, w_sfs)
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
                            w_words, w_sfs = _load_weights(
                                b_raw_base + consumer_state.index * _B_RAW_BYTES + w_raw_off,
                                sfb_base + consumer_state.index * _SF_BYTES + w_sf_off,
                            )
                            warpgroup.wait_group(0)
                # Retire the last wgmma; the next tile's prologue overwrites
                # buffer 0, so wait for the other warpgroup too.
                warpgroup.wait_group(0)
                consumer_bar.arrive_and_wait()

                store_tile(acc, tCcC, tensor_of_abc_ptrs[group_idx, 2], m, n, coord_m, coord_n)
                tile_idx += 1


# ---------------------------------------------------------------------------
# Host
# ---------------------------------------------------------------------------


def host_operands(
    ptr_of_tensor_of_problem_sizes, ptr_of_tensor_of_abc_ptrs, ptr_of_tensor_of_sfasfb_ptrs,
    ptr_of_tensor_of_cta_prefix, ptr_of_tensor_of_tensormap, persistent_blocks, num_groups,
):
    """The kernel's arguments (all but num_groups) from the host launcher's inputs."""
    tensor_of_abc_ptrs = cute.make_tensor(
        ptr_of_tensor_of_abc_ptrs, cute.make_layout((num_groups, 3), stride=(3, 1))
    )
    tensor_of_sfasfb_ptrs = cute.make_tensor(
        ptr_of_tensor_of_sfasfb_ptrs, cute.make_layout((num_groups, 2), stride=(2, 1))
    )
    tensor_of_problem_sizes = cute.make_tensor(
        ptr_of_tensor_of_problem_sizes, cute.make_layout((num_groups, 4), stride=(4, 1))
    )
    tensor_of_cta_prefix = cute.make_tensor(
        ptr_of_tensor_of_cta_prefix, cute.make_layout((num_groups + 1,), stride=(1,))
    )
    tensor_of_tensormap = cute.make_tensor(
        ptr_of_tensor_of_tensormap,
        cute.make_layout((persistent_blocks, NUM_TENSORMAPS, 16), stride=(64, 16, 1)),
    )

    # Fake shapes for the initial TMA descriptors; the kernel rewrites shape,
    # strides and address per group in its per-CTA tensormap workspace.
    fake_rows = cutlass.Int32(128)
    fake_k = cutlass.Int32(256)
    null_u8 = cute.make_ptr(cutlass.Uint8, 0, cute.AddressSpace.gmem, assumed_align=16)
    fake_a = make_ab_tensor(null_u8, fake_rows, fake_k)
    fake_b = make_ab_tensor(null_u8, fake_rows, fake_k)
    fake_sfa = make_sf_tensor(null_u8, fake_rows, fake_k)
    fake_sfb = make_sf_tensor(null_u8, fake_rows, fake_k)

    g2s = cpasync.CopyBulkTensorTileG2SOp()
    tma_atom_a, tma_tensor_a = cpasync.make_tiled_tma_atom(
        g2s, fake_a,
        cute.make_layout((TILE_M, _TILE_KB), stride=(_TILE_KB, 1)),
        (TILE_M, _TILE_KB),
    )
    tma_atom_b, tma_tensor_b = cpasync.make_tiled_tma_atom(
        g2s, fake_b,
        cute.make_layout((TILE_N, _TILE_KB), stride=(_TILE_KB, 1)),
        (TILE_N, _TILE_KB),
    )
    sf_smem_layout = cute.make_layout((256, _SF_HALVES, 1), stride=(1, 256, _SF_BYTES))
    tma_atom_sfa, tma_tensor_sfa = cpasync.make_tiled_tma_atom(
        g2s, fake_sfa, sf_smem_layout, (256, _SF_HALVES, 1)
    )
    tma_atom_sfb, tma_tensor_sfb = cpasync.make_tiled_tma_atom(
        g2s, fake_sfb, sf_smem_layout, (256, _SF_HALVES, 1)
    )

    return (
        tma_atom_a, tma_tensor_a, tma_atom_b, tma_tensor_b,
        tma_atom_sfa, tma_tensor_sfa, tma_atom_sfb, tma_tensor_sfb,
        tensor_of_abc_ptrs, tensor_of_sfasfb_ptrs, tensor_of_tensormap,
        tensor_of_problem_sizes, tensor_of_cta_prefix,
    )


@cute.jit
def grouped_gemm_host(
    ptr_of_tensor_of_problem_sizes: cute.Pointer,
    ptr_of_tensor_of_abc_ptrs: cute.Pointer,
    ptr_of_tensor_of_sfasfb_ptrs: cute.Pointer,
    ptr_of_tensor_of_cta_prefix: cute.Pointer,
    ptr_of_tensor_of_tensormap: cute.Pointer,
    total_num_clusters: cutlass.Int32,
    persistent_blocks: cutlass.Int32,
    num_groups: cutlass.Constexpr[int],
):
    """Launch the Hopper NVFP4 grouped GEMM (same ABI shape as the sm_100a kernel)."""
    kernel(
        *host_operands(
            ptr_of_tensor_of_problem_sizes, ptr_of_tensor_of_abc_ptrs,
            ptr_of_tensor_of_sfasfb_ptrs, ptr_of_tensor_of_cta_prefix,
            ptr_of_tensor_of_tensormap, persistent_blocks, num_groups,
        ),
        num_groups,
    ).launch(
        grid=(persistent_blocks, 1, 1),
        block=[THREADS, 1, 1],
        cluster=(1, 1, 1),
        min_blocks_per_mp=1,
    )
    return


def compile(num_groups: int):
    """Compile the kernel for a fixed group count (8 or 120); returns the DSL object."""
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
        num_groups,
    )
