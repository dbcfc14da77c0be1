"""NVFP4 block-scaled grouped GEMM for Hopper (sm_90a), written in CuTe DSL.

Hopper has no FP4 tensor cores, so every FP4 element is decoded on chip together
with its FP8 E4M3 block scale into an FP16 value and multiplied with wgmma
(FP16 x FP16 -> FP32).  The decode is exact: FP4 E2M1 x E4M3 has at most 6
significant bits and lies in [2^-10, 2688], well inside FP16's normal range, and
the wgmma products of two such values are exact in FP32.  So the result equals
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

Kernel structure (one CTA per SM, persistent):
  warps 0-7  two consumer warpgroups.  Per K tile they decode the raw FP4 bytes +
             scales of the pipeline stage into a 128B-swizzled K-major FP16 tile
             (double buffered), then issue wgmma; warpgroup w owns tile rows
             [64w, 64w + 64).  Decode of K tile t overlaps the wgmma of tile t-1.
  warp 8     producer: per-CTA tensormaps (A, B, SFA, SFB) updated in global
             memory whenever the group changes, TMA loads into a NUM_STAGES-deep
             mbarrier pipeline.
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

FAMILY = "sm90_nvfp4_grouped_gemm"
ARCHS = ("sm_90a",)

# CTA tile (M x N x K in FP4 elements).
TILE_M = 128
TILE_N = 128
TILE_K = 128
NUM_STAGES = 4  # raw (FP4 + scale) TMA pipeline depth
NUM_DEC_BUFFERS = 2  # decoded FP16 operand buffers (fixed: see the consumer loop)

NUM_CONSUMER_WARPS = 8  # two warpgroups, 64 tile rows each
PRODUCER_WARP = NUM_CONSUMER_WARPS
NUM_CONSUMER_THREADS = NUM_CONSUMER_WARPS * 32
THREADS = NUM_CONSUMER_THREADS + 32

SF_VEC = 16  # FP4 elements per scale
BYTES_PER_TENSORMAP = 128
NUM_TENSORMAPS = 4  # A, B, SFA, SFB (workspace row is [4, 16] int64)

# Derived sizes (bytes unless noted).
_TILE_KB = TILE_K // 2  # FP4 bytes per tile row
_SF_HALVES = TILE_K // 32  # 256-byte halves of 512-byte scale atoms per K tile
_A_RAW_BYTES = TILE_M * _TILE_KB
_B_RAW_BYTES = TILE_N * _TILE_KB
_SF_BYTES = _SF_HALVES * 256
_DEC_ELEMS_A = TILE_M * TILE_K
_DEC_ELEMS_B = TILE_N * TILE_K
_TMA_BYTES_PER_STAGE = _A_RAW_BYTES + _B_RAW_BYTES + 2 * _SF_BYTES
_CHUNKS_PER_ROW = TILE_K // SF_VEC  # 16-element scale groups per tile row
_ROWS_PER_PASS = NUM_CONSUMER_THREADS // _CHUNKS_PER_ROW

assert TILE_M == 128 and TILE_N == 128, "one 128-row scale block per tile"
assert TILE_K % 64 == 0 and TILE_K <= 256
assert TILE_M % _ROWS_PER_PASS == 0 and TILE_N % _ROWS_PER_PASS == 0


def ceil_div(a, b):
    return (a + b - 1) // b


# ---------------------------------------------------------------------------
# Device helpers
# ---------------------------------------------------------------------------

# Decode one 16-element scale group: 8 FP4 bytes ($0, loaded by load_group) and
# one E4M3 scale ($1) -> 16 FP16 values stored as two 16-byte vectors at shared
# addresses $2 and $3.
#
# FP4 nibble (s e1 e0 m) -> E4M3 byte s000 e1e0m00 has value fp4 * 2^-6 (the
# E2M1 subnormal 0.5 maps onto the E4M3 subnormal 2^-7, so the map is linear);
# cvt.rn.f16x2.e4m3x2 turns two such bytes into exact FP16s, and one multiply by
# scale * 2^6 (exact, <= 28672) gives the exact product.  The order of the 16
# values in the output is a fixed permutation of the K positions inside the
# group; A and B use the same one, so the dot product is unchanged.
_DECODE16_PTX = """{
.reg .b32 w0, w1, sc, c64, t0, t1, e0, e1, e2, e3;
.reg .b32 o0, o1, o2, o3, o4, o5, o6, o7;
.reg .b16 h0, h1, h2, h3, h4, h5, h6, h7, hs, hx;
mov.b64 {w0, w1}, $0;
prmt.b32 sc, $1, $1, 0x0000;
mov.b32 {hs, hx}, sc;
cvt.rn.f16x2.e4m3x2 sc, hs;
mov.b32 c64, 0x54005400;
mul.rn.f16x2 sc, sc, c64;
shl.b32 t0, w0, 4;
and.b32 t0, t0, 0x80808080;
shl.b32 t1, w0, 2;
and.b32 t1, t1, 0x1C1C1C1C;
or.b32 e0, t0, t1;
and.b32 t0, w0, 0x80808080;
shr.b32 t1, w0, 2;
and.b32 t1, t1, 0x1C1C1C1C;
or.b32 e1, t0, t1;
shl.b32 t0, w1, 4;
and.b32 t0, t0, 0x80808080;
shl.b32 t1, w1, 2;
and.b32 t1, t1, 0x1C1C1C1C;
or.b32 e2, t0, t1;
and.b32 t0, w1, 0x80808080;
shr.b32 t1, w1, 2;
and.b32 t1, t1, 0x1C1C1C1C;
or.b32 e3, t0, t1;
mov.b32 {h0, h1}, e0;
mov.b32 {h2, h3}, e1;
mov.b32 {h4, h5}, e2;
mov.b32 {h6, h7}, e3;
cvt.rn.f16x2.e4m3x2 o0, h0;
cvt.rn.f16x2.e4m3x2 o1, h1;
cvt.rn.f16x2.e4m3x2 o2, h2;
cvt.rn.f16x2.e4m3x2 o3, h3;
cvt.rn.f16x2.e4m3x2 o4, h4;
cvt.rn.f16x2.e4m3x2 o5, h5;
cvt.rn.f16x2.e4m3x2 o6, h6;
cvt.rn.f16x2.e4m3x2 o7, h7;
mul.rn.f16x2 o0, o0, sc;
mul.rn.f16x2 o1, o1, sc;
mul.rn.f16x2 o2, o2, sc;
mul.rn.f16x2 o3, o3, sc;
mul.rn.f16x2 o4, o4, sc;
mul.rn.f16x2 o5, o5, sc;
mul.rn.f16x2 o6, o6, sc;
mul.rn.f16x2 o7, o7, sc;
st.shared.v4.b32 [$2], {o0, o1, o2, o3};
st.shared.v4.b32 [$3], {o4, o5, o6, o7};
}"""


# Alternative decode without per-element conversions: PRMT looks the FP16 high
# byte of each FP4 magnitude up in an 8-entry table (all eight E2M1 magnitudes
# have a zero FP16 low byte), the sign bit is ORed in, then one multiply by the
# (exact) FP16 scale.  More integer instructions than the cvt variant but no
# F2FP per element; which one is faster on H200 is to be measured.
_DECODE16_PRMT_PTX = """{
.reg .b32 w0, w1, wp, sc, tlo, thi, s0, s1, x;
.reg .b32 o0, o1, o2, o3, o4, o5, o6, o7;
.reg .b16 hs, hx;
mov.b64 {w0, w1}, $0;
prmt.b32 sc, $1, $1, 0x0000;
mov.b32 {hs, hx}, sc;
cvt.rn.f16x2.e4m3x2 sc, hs;
mov.b32 tlo, 0x3E3C3800;
mov.b32 thi, 0x46444240;
prmt.b32 wp, w0, w0, 0x3120;
shl.b32 s0, wp, 4;
and.b32 s0, s0, 0x7070;
prmt.b32 o0, tlo, thi, s0;
shl.b32 x, w0, 12;
and.b32 x, x, 0x80008000;
or.b32 o0, o0, x;
and.b32 s0, wp, 0x7070;
prmt.b32 o1, tlo, thi, s0;
shl.b32 x, w0, 8;
and.b32 x, x, 0x80008000;
or.b32 o1, o1, x;
shr.b32 s0, wp, 12;
and.b32 s0, s0, 0x7070;
prmt.b32 o2, tlo, thi, s0;
shl.b32 x, w0, 4;
and.b32 x, x, 0x80008000;
or.b32 o2, o2, x;
shr.b32 s0, wp, 16;
and.b32 s0, s0, 0x7070;
prmt.b32 o3, tlo, thi, s0;
and.b32 x, w0, 0x80008000;
or.b32 o3, o3, x;
prmt.b32 wp, w1, w1, 0x3120;
shl.b32 s1, wp, 4;
and.b32 s1, s1, 0x7070;
prmt.b32 o4, tlo, thi, s1;
shl.b32 x, w1, 12;
and.b32 x, x, 0x80008000;
or.b32 o4, o4, x;
and.b32 s1, wp, 0x7070;
prmt.b32 o5, tlo, thi, s1;
shl.b32 x, w1, 8;
and.b32 x, x, 0x80008000;
or.b32 o5, o5, x;
shr.b32 s1, wp, 12;
and.b32 s1, s1, 0x7070;
prmt.b32 o6, tlo, thi, s1;
shl.b32 x, w1, 4;
and.b32 x, x, 0x80008000;
or.b32 o6, o6, x;
shr.b32 s1, wp, 16;
and.b32 s1, s1, 0x7070;
prmt.b32 o7, tlo, thi, s1;
and.b32 x, w1, 0x80008000;
or.b32 o7, o7, x;
mul.rn.f16x2 o0, o0, sc;
mul.rn.f16x2 o1, o1, sc;
mul.rn.f16x2 o2, o2, sc;
mul.rn.f16x2 o3, o3, sc;
mul.rn.f16x2 o4, o4, sc;
mul.rn.f16x2 o5, o5, sc;
mul.rn.f16x2 o6, o6, sc;
mul.rn.f16x2 o7, o7, sc;
st.shared.v4.b32 [$2], {o0, o1, o2, o3};
st.shared.v4.b32 [$3], {o4, o5, o6, o7};
}"""

# Which decode the kernel uses ("cvt" or "prmt"); read when the kernel is traced.
DECODE_VARIANT = "cvt"
_DECODE_PTX = {"cvt": _DECODE16_PTX, "prmt": _DECODE16_PRMT_PTX}


@dsl_user_op
def load_group(raw_addr: cutlass.Int32, sf_addr: cutlass.Int32, *, loc=None, ip=None):
    """Load one scale group from shared memory: (8 FP4 bytes as Int64, scale byte as Int32).

    Kept apart from the decode so that all loads of a K tile can be issued first.
    """
    raw = llvm.inline_asm(
        cutlass.Int64.mlir_type,
        [cutlass.Int32(raw_addr).ir_value(loc=loc, ip=ip)],
        "ld.shared.b64 $0, [$1];",
        "=l,r,~{memory}",
        has_side_effects=True,
        is_align_stack=False,
        asm_dialect=llvm.AsmDialect.AD_ATT,
        loc=loc,
        ip=ip,
    )
    sf = llvm.inline_asm(
        cutlass.Int32.mlir_type,
        [cutlass.Int32(sf_addr).ir_value(loc=loc, ip=ip)],
        "ld.shared.u8 $0, [$1];",
        "=r,r,~{memory}",
        has_side_effects=True,
        is_align_stack=False,
        asm_dialect=llvm.AsmDialect.AD_ATT,
        loc=loc,
        ip=ip,
    )
    return cutlass.Int64(raw), cutlass.Int32(sf)


@dsl_user_op
def decode_group_store(
    raw: cutlass.Int64,
    sf: cutlass.Int32,
    dst0_addr: cutlass.Int32,
    dst1_addr: cutlass.Int32,
    *,
    loc=None,
    ip=None,
) -> None:
    """Decode one scale group and store it (see _DECODE16_PTX)."""
    llvm.inline_asm(
        None,
        [
            cutlass.Int64(raw).ir_value(loc=loc, ip=ip),
            cutlass.Int32(sf).ir_value(loc=loc, ip=ip),
            cutlass.Int32(dst0_addr).ir_value(loc=loc, ip=ip),
            cutlass.Int32(dst1_addr).ir_value(loc=loc, ip=ip),
        ],
        _DECODE_PTX[DECODE_VARIANT],
        "l,r,r,r,~{memory}",
        has_side_effects=True,
        is_align_stack=False,
        asm_dialect=llvm.AsmDialect.AD_ATT,
        loc=loc,
        ip=ip,
    )


@cute.jit
def find_group(
    tensor_of_cta_prefix: cute.Tensor,
    tile_idx: cutlass.Int32,
    num_groups: cutlass.Constexpr[int],
) -> cutlass.Int32:
    """Group owning tile_idx: branch tree for 8 groups, binary search otherwise.

    Returns the last group g with prefix[g] <= tile_idx < prefix[g + 1], so
    groups with zero tiles are skipped.
    """
    group_idx = cutlass.Int32(0)
    if cutlass.const_expr(num_groups == 8):
        p1 = tensor_of_cta_prefix[1]
        p2 = tensor_of_cta_prefix[2]
        p3 = tensor_of_cta_prefix[3]
        p4 = tensor_of_cta_prefix[4]
        p5 = tensor_of_cta_prefix[5]
        p6 = tensor_of_cta_prefix[6]
        p7 = tensor_of_cta_prefix[7]
        if tile_idx < p4:
            if tile_idx < p2:
                if tile_idx < p1:
                    group_idx = cutlass.Int32(0)
                else:
                    group_idx = cutlass.Int32(1)
            else:
                if tile_idx < p3:
                    group_idx = cutlass.Int32(2)
                else:
                    group_idx = cutlass.Int32(3)
        else:
            if tile_idx < p6:
                if tile_idx < p5:
                    group_idx = cutlass.Int32(4)
                else:
                    group_idx = cutlass.Int32(5)
            else:
                if tile_idx < p7:
                    group_idx = cutlass.Int32(6)
                else:
                    group_idx = cutlass.Int32(7)
    else:
        left = cutlass.Int32(0)
        right = cutlass.Int32(num_groups)
        while left < right:
            mid = (left + right) // 2
            if tensor_of_cta_prefix[mid + 1] <= tile_idx:
                left = mid + 1
            else:
                right = mid
        group_idx = left
    return group_idx


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
        # Decoded FP16 operands, K-major 128B-swizzled wgmma layout.
        sA_dec: cute.struct.Align[
            cute.struct.MemRange[cutlass.Float16, NUM_DEC_BUFFERS * _DEC_ELEMS_A], 1024
        ]
        sB_dec: cute.struct.Align[
            cute.struct.MemRange[cutlass.Float16, NUM_DEC_BUFFERS * _DEC_ELEMS_B], 1024
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

    # Decoded operand buffers: S<3,4,3> (byte-address 128B swizzle) o (8,64) atoms.
    a_dec_layout = cute.tile_to_shape(
        warpgroup.make_smem_layout_atom(
            warpgroup.SmemLayoutAtomKind.K_SW128, cutlass.Float16
        ),
        (TILE_M, TILE_K, NUM_DEC_BUFFERS),
        order=(0, 1, 2),
    )
    b_dec_layout = cute.tile_to_shape(
        warpgroup.make_smem_layout_atom(
            warpgroup.SmemLayoutAtomKind.K_SW128, cutlass.Float16
        ),
        (TILE_N, TILE_K, NUM_DEC_BUFFERS),
        order=(0, 1, 2),
    )
    # (TILE_M, TILE_K, DEC_BUF)
    sA_dec = storage.sA_dec.get_tensor(a_dec_layout.outer, swizzle=a_dec_layout.inner)
    # (TILE_N, TILE_K, DEC_BUF)
    sB_dec = storage.sB_dec.get_tensor(b_dec_layout.outer, swizzle=b_dec_layout.inner)

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
            group_idx = find_group(tensor_of_cta_prefix, tile_idx, num_groups)
            prev_group_idx = cutlass.Int32(-1)
            cta_m = cutlass.Int32(1)
            k_tile_cnt = cutlass.Int32(0)
            while tile_idx < tile_end:
                # Skip groups that end before this tile (also zero-tile groups).
                while tile_idx >= tensor_of_cta_prefix[group_idx + 1]:
                    group_idx = group_idx + 1
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
    # Consumer warpgroups: decode FP4 -> FP16, wgmma, epilogue.
    #
    if warp_idx < NUM_CONSUMER_WARPS:
        tiled_mma = sm90_utils.make_trivial_tiled_mma(
            cutlass.Float16,
            cutlass.Float16,
            cute.nvgpu.OperandMajorMode.K,
            cute.nvgpu.OperandMajorMode.K,
            cutlass.Float32,
            (TILE_M // 64, 1, 1),
            tiler_mn=(64, TILE_N),
        )
        thr_mma = tiled_mma.get_slice(tidx)
        # (MMA, MMA_M, MMA_K, DEC_BUF)
        tCsA = thr_mma.partition_A(sA_dec)
        tCsB = thr_mma.partition_B(sB_dec)
        tCrA = tiled_mma.make_fragment_A(tCsA)
        tCrB = tiled_mma.make_fragment_B(tCsB)
        num_k_blocks = cute.size(tCrA, mode=[2])
        # (MMA, MMA_M, MMA_N)
        acc = cute.make_rmem_tensor(
            thr_mma.partition_shape_C((TILE_M, TILE_N)), cutlass.Float32
        )
        # Tile-relative (row, col) of every accumulator element.
        tCcC = thr_mma.partition_C(cute.make_identity_tensor((TILE_M, TILE_N)))

        consumer_bar = pipeline.NamedBarrier(barrier_id=1, num_threads=NUM_CONSUMER_THREADS)
        consumer_state = pipeline.make_pipeline_state(
            pipeline.PipelineUserType.Consumer, NUM_STAGES
        )

        # Decode work split: thread t handles scale group g = t % 8 of rows
        # t // 8 + 32 * i.  Shared-memory byte addresses (all loop invariant
        # except for the stage / buffer offsets).
        dec_g = tidx % _CHUNKS_PER_ROW
        dec_r0 = tidx // _CHUNKS_PER_ROW
        a_raw_base = storage.sA_raw.data_ptr().toint()
        b_raw_base = storage.sB_raw.data_ptr().toint()
        sfa_base = storage.sSFA_raw.data_ptr().toint()
        sfb_base = storage.sSFB_raw.data_ptr().toint()
        a_dec_base = storage.sA_dec.data_ptr().toint()
        b_dec_base = storage.sB_dec.data_ptr().toint()
        raw_off = dec_r0 * _TILE_KB + dec_g * 8
        # blocked layout: byte = (g // 4) * 512 + (r % 32) * 16 + ((r // 32) % 4) * 4 + g % 4
        sf_off = (dec_g // 4) * 512 + (dec_r0 % 32) * 16 + (dec_g % 4)
        # 128B swizzle: byte = (k // 64) * rows * 128 + (r // 8) * 1024 + (r % 8) * 128
        #               + (((k % 64) // 8) ^ (r % 8)) * 16 ; k = 16 g (+ 8)
        rr = dec_r0 % 8
        unit0 = ((dec_g % 4) * 2) ^ rr
        unit1 = ((dec_g % 4) * 2 + 1) ^ rr
        dec_row_off = (dec_r0 // 8) * 1024 + rr * 128
        a_dec_off = (dec_g // 4) * (TILE_M * 128) + dec_row_off
        b_dec_off = (dec_g // 4) * (TILE_N * 128) + dec_row_off

        dec_buf = cutlass.Int32(0)
        if tile_start < tile_end:
            tile_idx = tile_start
            group_idx = find_group(tensor_of_cta_prefix, tile_idx, num_groups)
            prev_group_idx = cutlass.Int32(-1)
            m = cutlass.Int32(0)
            n = cutlass.Int32(0)
            cta_m = cutlass.Int32(1)
            k_tile_cnt = cutlass.Int32(0)
            while tile_idx < tile_end:
                while tile_idx >= tensor_of_cta_prefix[group_idx + 1]:
                    group_idx = group_idx + 1
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
                for _k_tile in cutlass.range(k_tile_cnt, unroll=1):
                    ab_pipeline.consumer_wait(consumer_state)
                    stage = consumer_state.index
                    # Decode raw stage -> decoded buffer dec_buf.  The buffer was
                    # last read by the wgmma two K tiles ago, which every consumer
                    # thread waited for before the previous barrier.
                    a_raw = a_raw_base + stage * _A_RAW_BYTES + raw_off
                    b_raw = b_raw_base + stage * _B_RAW_BYTES + raw_off
                    sfa = sfa_base + stage * _SF_BYTES + sf_off
                    sfb = sfb_base + stage * _SF_BYTES + sf_off
                    a_dst = a_dec_base + dec_buf * (_DEC_ELEMS_A * 2) + a_dec_off
                    b_dst = b_dec_base + dec_buf * (_DEC_ELEMS_B * 2) + b_dec_off
                    # Rows r0 + 32 i: raw +32 i rows, scales +4 i bytes
                    # ((r // 32) % 4 column of the atom), decoded +4 KB i.
                    a_groups = []
                    b_groups = []
                    for i in cutlass.range_constexpr(TILE_M // _ROWS_PER_PASS):
                        a_groups.append(
                            load_group(a_raw + i * _ROWS_PER_PASS * _TILE_KB, sfa + i * 4)
                        )
                    for i in cutlass.range_constexpr(TILE_N // _ROWS_PER_PASS):
                        b_groups.append(
                            load_group(b_raw + i * _ROWS_PER_PASS * _TILE_KB, sfb + i * 4)
                        )
                    for i in cutlass.range_constexpr(TILE_M // _ROWS_PER_PASS):
                        dst = a_dst + i * (_ROWS_PER_PASS // 8) * 1024
                        decode_group_store(
                            a_groups[i][0], a_groups[i][1], dst + unit0 * 16, dst + unit1 * 16
                        )
                    for i in cutlass.range_constexpr(TILE_N // _ROWS_PER_PASS):
                        dst = b_dst + i * (_ROWS_PER_PASS // 8) * 1024
                        decode_group_store(
                            b_groups[i][0], b_groups[i][1], dst + unit0 * 16, dst + unit1 * 16
                        )
                    ab_pipeline.consumer_release(consumer_state)
                    consumer_state.advance()
                    # Make the generic-proxy stores visible to wgmma (async proxy),
                    # retire our previous wgmma, then sync both warpgroups.
                    cute.arch.fence_proxy("async.shared", space="cta")
                    warpgroup.wait_group(0)
                    consumer_bar.arrive_and_wait()
                    warpgroup.fence()
                    for kb in cutlass.range_constexpr(num_k_blocks):
                        cute.gemm(
                            tiled_mma,
                            acc,
                            tCrA[(None, None, kb, dec_buf)],
                            tCrB[(None, None, kb, dec_buf)],
                            acc,
                        )
                    warpgroup.commit_group()
                    dec_buf = dec_buf ^ 1
                warpgroup.wait_group(0)

                #
                # Epilogue: FP32 -> FP16, element-wise guarded for M/N residues.
                #
                mC = cute.make_tensor(
                    cute.make_ptr(cutlass.Float16, tensor_of_abc_ptrs[group_idx, 2],
                                  cute.AddressSpace.gmem, assumed_align=2),
                    cute.make_layout((m, n), stride=(n, 1)),
                )
                gC = cute.local_tile(mC, (TILE_M, TILE_N), (coord_m, coord_n))
                residue_m = m - coord_m * TILE_M
                residue_n = n - coord_n * TILE_N
                for i in cutlass.range_constexpr(cute.size(acc)):
                    row, col = tCcC[i]
                    if row < residue_m and col < residue_n:
                        gC[row, col] = cutlass.Float16(acc[i])
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
    num_groups: cutlass.Constexpr[int],
):
    """Launch the Hopper NVFP4 grouped GEMM (same ABI shape as the sm_100a kernel)."""
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

    kernel(
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
