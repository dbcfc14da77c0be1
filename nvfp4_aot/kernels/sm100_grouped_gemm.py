"""NVFP4 block-scaled grouped GEMM for Blackwell (sm_100a / sm_103a), CuTe DSL.

For every group g: C_g[m, n] = sum_k A_g[m, k] * B_g[n, k] with A, B in FP4 E2M1
(K-major, two values per byte), one FP8 E4M3 scale per 16 consecutive K elements
(SFA, SFB in the blocked "to_blocked" layout), FP32 accumulation in tensor memory and
an FP16 or BF16 result, optionally times a per-group FP32 alpha. This is a port of the
seed kernel; the build step imports this module, compiles one variant per group count and
epilogue (:mod:`.epilogue`) and captures its launch ABI. The FP16 variant without alpha
is the seed's epilogue, cubin for cubin (docs/sm100_epilogue_review.md).

Structure of one CTA (192 threads, one CTA per cluster, persistent):

* warps 0-3 (128 threads), epilogue: wait for a full accumulator stage, copy it
  TMEM -> registers (``tcgen05.ld`` 32x32b x128: thread t holds row t of the
  128x128 tile), scale by the group's alpha (variants with alpha: read when the
  tiles reach a new group), convert FP32 -> FP16 or BF16 (round to nearest even,
  +-inf past the range) and store straight to global memory, with
  128-bit stores for full tiles and per-element predication on the M/N residue.
  Warp 0 also allocates and frees the tensor memory.
* warp 4, MMA: initialises the CTA's four TMA descriptors (A, B, SFA, SFB) in its
  global tensormap workspace from the host-built atoms, then per K tile copies the
  scale factors SMEM -> TMEM (``tcgen05.cp`` 4x32x128b) and issues four
  ``tcgen05.mma`` (mxf4nvf4, block scale, 128x128x64) into the current
  accumulator stage.
* warp 5, TMA: whenever its tile enters a new group it rewrites the four
  descriptors with that group's pointers and shapes (built in SMEM, copied to the
  workspace, fenced), then loads the tile's K tiles of A, B, SFA and SFB.

Pipelines: AB (``PipelineTmaUmma``, 5 stages; producer the TMA warp, transaction
bytes A+B+SFA+SFB per stage; consumer the MMA warp, released by ``tcgen05.commit``)
and ACC (``PipelineUmmaAsync``, 2 stages of 128 TMEM columns; producer the MMA warp,
consumer the 128 epilogue threads). TMEM holds 2 accumulator stages followed by the
SFA and SFB columns: 2 x 128 + 16 + 16 = 288 columns, allocated as 512 (all of it;
with about 181 KiB of SMEM per CTA only one CTA fits on an SM anyway).

Scheduler: output tiles (128x128) of all groups are numbered 0..T-1, group by group
(``cta_prefix``), M-fastest within a group: tile = cta_prefix[g] + n_tile *
ceil(m/128) + m_tile. CTA b of P = persistent_blocks processes the contiguous range
[b * ceil(T/P), min((b + 1) * ceil(T/P), T)). Each role warp finds the group of its
first tile (G = 8: a branch tree over cta_prefix[1..7]; G = 2: one compare; any other
G: a binary search) and then steps forward one group at a time.

Kernel parameters (the launch ABI the runtime fills), in order:
problem_sizes int32[G, 4] (m, n, k, l), abc_ptrs int64[G, 3] (A, B, C),
sfasfb_ptrs int64[G, 2] (SFA, SFB), cta_prefix int32[G + 1], tensormaps
int64[persistent_blocks, 4, 16] (4 x 128-byte descriptors per CTA),
total_num_clusters Int32 (host side only, unused by the kernel), persistent_blocks
Int32 (grid size and tensormap workspace extent), with alpha alpha_ptrs int64[G] (each
group's FP32 alpha address), num_groups and the C dtype (compile time).

Preconditions the kernel relies on without checking (the runtime must validate):

1. The five table pointers are 16-byte aligned (``assumed_align=16``); the tables
   are dense row-major as above; grid.x == persistent_blocks >= 1.
2. l == 1 for every group: only batch index 0 is computed and cta_prefix counts
   M x N tiles only.
3. cta_prefix[0] == 0 and cta_prefix[g + 1] == cta_prefix[g] +
   ceil(m_g / 128) * ceil(n_g / 128); T = cta_prefix[G] < 2**31.
4. Groups without tiles may only come before the first or after the last group
   with tiles (e.g. zero padding up to G): a CTA crossing a group boundary advances
   exactly one group, so an empty group between two non-empty ones is mis-scheduled.
5. Every group with tiles has k > 0 (with no K tile the accumulator is never
   cleared) and k % 32 == 0: A/B strides are declared ``cute.assume(k, 32)`` and
   the K-major row pitch k / 2 bytes must be a multiple of 16 bytes for TMA.
6. n % 32 == 0: C's row stride is declared ``cute.assume(n, 32)`` (it also keeps
   the 128-bit stores of full tiles aligned). m >= 1 is otherwise unrestricted.
7. m * k, n * k and m * n are below 2**31 (32-bit layout arithmetic).
8. A, B, C, SFA and SFB pointers are 32-byte aligned. ``make_ptr(...).align(32)``
   does not assume this, it rounds the address up to the next multiple of 32
   (``(p + 31) & ~31``): a pointer p with p % 32 != 0, a 16-byte-aligned one
   included, is silently moved 32 - p % 32 bytes on, so A, B and the scales are read
   from the wrong place and C is written late, up to 31 bytes past the end of its
   buffer (TMA itself needs only 16). A is m x k/2 bytes and B n x k/2 bytes, rows
   packed without padding; C is m x n FP16 or BF16, row-major and contiguous; C buffers of
   different groups do not overlap.
9. SFA (SFB) is blocked: ceil(m / 128) x ceil(k / 64) atoms of 512 bytes, K atom
   fastest, within an atom byte (r % 32) * 16 + (r // 32) * 4 + c for row r and
   scale column c (cuBLAS "1D block scaling factors layout"), i.e.
   ceil(m / 128) * ceil(k / 64) * 512 bytes. Padding rows are never stored, but
   padding scale columns (k % 64 == 32) multiply zero-filled A/B data and must be
   finite (write zeros, as ``to_blocked`` does), or NaN reaches valid outputs.
10. The tensormap workspace holds persistent_blocks x 512 bytes, is at least
    64-byte aligned (CUtensorMap alignment) and is written by the kernel: launches
    that may run concurrently need separate workspaces.
"""

import cutlass
import cutlass.utils.blackwell_helpers as sm100_utils
import cutlass.utils.blockscaled_layout as blockscaled_utils
from cutlass import cute, pipeline
from cutlass.cute.nvgpu import cpasync, tcgen05
from cutlass.cute.runtime import make_ptr
from cutlass.memory import SmemAllocator, TmemAllocator
from cutlass.tensor_utils import TensorMapManager, TensorMapUpdateMode

from .epilogue import C_DTYPES, alpha_table, load_alpha
from .group_search import ceil_div, cta_tile_range, find_group

FAMILY = "sm100_nvfp4_grouped_gemm"
ARCHS = ("sm_100a", "sm_103a")
TILE_M = 128
TILE_N = 128
TILE_K = 256
THREADS = 192

# Kernel configuration
BYTES_PER_TENSORMAP = 128
NUM_TENSORMAPS = 4  # A, B, SFA, SFB
MMA_TILER_MNK = (TILE_M, TILE_N, TILE_K)
MMA_INST_SHAPE_K = 64
AB_DTYPE = cutlass.Float4E2M1FN
SF_DTYPE = cutlass.Float8E4M3FN
SF_VEC_SIZE = 16
EPILOGUE_WARP_COUNT = 4  # warps 0..3
MMA_WARP_ID = 4
TMA_WARP_ID = 5
# Stage numbers of shared memory and tmem
NUM_ACC_STAGE = 2
NUM_AB_STAGE = 5


def _round_tmem_alloc_cols(required_cols: int) -> int:
    """TMEM allocations are a power of two of at least 32 columns (32..512)."""
    need = max(1, int(required_cols))
    for cols in (32, 64, 128, 256, 512):
        if need <= cols:
            return cols
    return 512


@cute.kernel
def grouped_gemm_kernel(
    tiled_mma: cute.TiledMma,
    tma_atom_a: cute.CopyAtom,
    mA_mkl: cute.Tensor,
    tma_atom_b: cute.CopyAtom,
    mB_nkl: cute.Tensor,
    tma_atom_sfa: cute.CopyAtom,
    mSFA_mkl: cute.Tensor,
    tma_atom_sfb: cute.CopyAtom,
    mSFB_nkl: cute.Tensor,
    abc_ptrs: cute.Tensor,
    sfasfb_ptrs: cute.Tensor,
    tensormaps: cute.Tensor,
    problem_sizes: cute.Tensor,
    a_smem_layout_staged: cute.ComposedLayout,
    b_smem_layout_staged: cute.ComposedLayout,
    sfa_smem_layout_staged: cute.Layout,
    sfb_smem_layout_staged: cute.Layout,
    cta_prefix: cute.Tensor,
    num_groups: cutlass.Constexpr[int],
    num_tma_load_bytes: cutlass.Constexpr[int],
    c_dtype: cutlass.Constexpr,
    alpha_ptrs: cute.Tensor | None,
):
    """Persistent grouped GEMM; see the module docstring for roles and layouts."""
    warp_idx = cute.arch.warp_idx()
    warp_idx = cute.arch.make_warp_uniform(warp_idx)
    tidx, _, _ = cute.arch.thread_idx()
    is_epilogue_warp = warp_idx < EPILOGUE_WARP_COUNT
    is_mma_warp = warp_idx == MMA_WARP_ID
    is_tma_warp = warp_idx == TMA_WARP_ID

    #
    # Persistent grouped scheduler: a contiguous range of tiles per CTA.
    #
    bidx, _, _ = cute.arch.block_idx()
    grid_dim_x, _, _ = cute.arch.grid_dim()
    tile_start, tile_end = cta_tile_range(bidx, grid_dim_x, cta_prefix, num_groups)

    #
    # Define shared storage for kernel
    #
    size_tensormap_in_i64 = NUM_TENSORMAPS * BYTES_PER_TENSORMAP // 8

    @cute.struct
    class SharedStorage:
        tensormap_buffer: cute.struct.MemRange[cutlass.Int64, size_tensormap_in_i64]
        ab_mbar_ptr: cute.struct.MemRange[cutlass.Int64, NUM_AB_STAGE * 2]
        acc_mbar_ptr: cute.struct.MemRange[cutlass.Int64, NUM_ACC_STAGE * 2]
        tmem_holding_buf: cutlass.Int32

    smem = SmemAllocator()
    storage = smem.allocate(SharedStorage)

    # SMEM staging for the four descriptors the TMA warp rewrites.
    tensormap_smem_ptr = storage.tensormap_buffer.data_ptr()
    tensormap_a_smem_ptr = tensormap_smem_ptr
    tensormap_b_smem_ptr = tensormap_a_smem_ptr + BYTES_PER_TENSORMAP // 8
    tensormap_sfa_smem_ptr = tensormap_b_smem_ptr + BYTES_PER_TENSORMAP // 8
    tensormap_sfb_smem_ptr = tensormap_sfa_smem_ptr + BYTES_PER_TENSORMAP // 8
    # Setup smem tensor for A, B, SFA, SFB
    # (MMA, MMA_M, MMA_K, STAGE)
    sA = smem.allocate_tensor(
        element_type=AB_DTYPE,
        layout=a_smem_layout_staged.outer,
        byte_alignment=128,
        swizzle=a_smem_layout_staged.inner,
    )
    # (MMA, MMA_N, MMA_K, STAGE)
    sB = smem.allocate_tensor(
        element_type=AB_DTYPE,
        layout=b_smem_layout_staged.outer,
        byte_alignment=128,
        swizzle=b_smem_layout_staged.inner,
    )
    # (MMA, MMA_M, MMA_K, STAGE)
    sSFA = smem.allocate_tensor(
        element_type=SF_DTYPE,
        layout=sfa_smem_layout_staged,
        byte_alignment=128,
    )
    # (MMA, MMA_N, MMA_K, STAGE)
    sSFB = smem.allocate_tensor(
        element_type=SF_DTYPE,
        layout=sfb_smem_layout_staged,
        byte_alignment=128,
    )

    # Initialize mainloop ab_pipeline, acc_pipeline and their states.
    # AB: TMA warp (one thread, transaction bytes) -> MMA warp (tcgen05.commit).
    ab_pipeline_producer_group = pipeline.CooperativeGroup(pipeline.Agent.Thread)
    ab_pipeline_consumer_group = pipeline.CooperativeGroup(pipeline.Agent.Thread, 1)
    ab_producer, ab_consumer = pipeline.PipelineTmaUmma.create(
        barrier_storage=storage.ab_mbar_ptr.data_ptr(),
        num_stages=NUM_AB_STAGE,
        producer_group=ab_pipeline_producer_group,
        consumer_group=ab_pipeline_consumer_group,
        tx_count=num_tma_load_bytes,
    ).make_participants()
    # ACC: MMA warp (tcgen05.commit) -> 128 epilogue threads.
    acc_producer, acc_consumer = pipeline.PipelineUmmaAsync.create(
        barrier_storage=storage.acc_mbar_ptr.data_ptr(),
        num_stages=NUM_ACC_STAGE,
        producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
        consumer_group=pipeline.CooperativeGroup(
            pipeline.Agent.Thread,
            EPILOGUE_WARP_COUNT * 32,
        ),
    ).make_participants()

    #
    # Local_tile partition global tensors
    #
    # (bM, bK, RestM, RestK, RestL)
    gA_mkl = cute.local_tile(
        mA_mkl, cute.slice_(MMA_TILER_MNK, (None, 0, None)), (None, None, None)
    )
    # (bN, bK, RestN, RestK, RestL)
    gB_nkl = cute.local_tile(
        mB_nkl, cute.slice_(MMA_TILER_MNK, (0, None, None)), (None, None, None)
    )
    # (bM, bK, RestM, RestK, RestL)
    gSFA_mkl = cute.local_tile(
        mSFA_mkl, cute.slice_(MMA_TILER_MNK, (None, 0, None)), (None, None, None)
    )
    # (bN, bK, RestN, RestK, RestL)
    gSFB_nkl = cute.local_tile(
        mSFB_nkl, cute.slice_(MMA_TILER_MNK, (0, None, None)), (None, None, None)
    )
    #
    # Partition global tensor for TiledMMA_A/B/C
    #
    # The MMA partition domain is 128 threads. For 192-thread CTAs, remap the
    # extra two warps into the valid 0..127 slice range.
    mma_part_slice_idx = tidx
    if mma_part_slice_idx >= EPILOGUE_WARP_COUNT * 32:
        mma_part_slice_idx = mma_part_slice_idx - EPILOGUE_WARP_COUNT * 32
    thr_mma = tiled_mma.get_slice(mma_part_slice_idx)
    # (MMA, MMA_M, MMA_K, RestM, RestK, RestL)
    tCgA = thr_mma.partition_A(gA_mkl)
    # (MMA, MMA_N, MMA_K, RestN, RestK, RestL)
    tCgB = thr_mma.partition_B(gB_nkl)
    # (MMA, MMA_M, MMA_K, RestM, RestK, RestL)
    tCgSFA = thr_mma.partition_A(gSFA_mkl)
    # (MMA, MMA_N, MMA_K, RestN, RestK, RestL)
    tCgSFB = thr_mma.partition_B(gSFB_nkl)
    # Update tma descriptor with the correct shapes and strides
    tensormap_manager = TensorMapManager(TensorMapUpdateMode.GMEM, BYTES_PER_TENSORMAP)
    # Use one descriptor workspace per CTA (indexed by blockIdx.x) and update it
    # as each persistent tile is assigned to this CTA.
    tensormap_workspace_idx = bidx
    tensormap_a_gmem_ptr = tensormap_manager.get_tensormap_ptr(
        tensormaps[(tensormap_workspace_idx, 0, None)].iterator
    )
    tensormap_b_gmem_ptr = tensormap_manager.get_tensormap_ptr(
        tensormaps[(tensormap_workspace_idx, 1, None)].iterator
    )
    tensormap_sfa_gmem_ptr = tensormap_manager.get_tensormap_ptr(
        tensormaps[(tensormap_workspace_idx, 2, None)].iterator
    )
    tensormap_sfb_gmem_ptr = tensormap_manager.get_tensormap_ptr(
        tensormaps[(tensormap_workspace_idx, 3, None)].iterator
    )
    tensormap_init_barrier = pipeline.NamedBarrier(
        barrier_id=2,
        num_threads=64,
    )

    # Match reference initialization flow: one warp (MMA) initializes the CTA's
    # GMEM descriptors, then the TMA warp performs dynamic updates for persistent
    # tiles.
    if is_tma_warp or is_mma_warp:
        if is_mma_warp:
            tensormap_manager.init_tensormap_from_atom(
                tma_atom_a, tensormap_a_gmem_ptr, MMA_WARP_ID
            )
            tensormap_manager.init_tensormap_from_atom(
                tma_atom_b, tensormap_b_gmem_ptr, MMA_WARP_ID
            )
            tensormap_manager.init_tensormap_from_atom(
                tma_atom_sfa, tensormap_sfa_gmem_ptr, MMA_WARP_ID
            )
            tensormap_manager.init_tensormap_from_atom(
                tma_atom_sfb, tensormap_sfb_gmem_ptr, MMA_WARP_ID
            )
        tensormap_init_barrier.arrive_and_wait()

    #
    # Partition global/shared tensor for TMA load A/B/SFA/SFB
    #
    # TMA Partition_S/D for A
    # ((atom_v, rest_v), STAGE)
    # ((atom_v, rest_v), RestM, RestK, RestL)
    tAsA, tAgA = cpasync.tma_partition(
        tma_atom_a,
        0,
        cute.make_layout(1),
        cute.group_modes(sA, 0, 3),
        cute.group_modes(tCgA, 0, 3),
    )
    # TMA Partition_S/D for B
    # ((atom_v, rest_v), STAGE)
    # ((atom_v, rest_v), RestN, RestK, RestL)
    tBsB, tBgB = cpasync.tma_partition(
        tma_atom_b,
        0,
        cute.make_layout(1),
        cute.group_modes(sB, 0, 3),
        cute.group_modes(tCgB, 0, 3),
    )
    #  TMA Partition_S/D for SFA
    # ((atom_v, rest_v), STAGE)
    # ((atom_v, rest_v), RestM, RestK, RestL)
    tAsSFA, tAgSFA = cpasync.tma_partition(
        tma_atom_sfa,
        0,
        cute.make_layout(1),
        cute.group_modes(sSFA, 0, 3),
        cute.group_modes(tCgSFA, 0, 3),
    )
    tAsSFA = cute.filter_zeros(tAsSFA)
    tAgSFA = cute.filter_zeros(tAgSFA)
    # TMA Partition_S/D for SFB
    # ((atom_v, rest_v), STAGE)
    # ((atom_v, rest_v), RestN, RestK, RestL)
    tBsSFB, tBgSFB = cpasync.tma_partition(
        tma_atom_sfb,
        0,
        cute.make_layout(1),
        cute.group_modes(sSFB, 0, 3),
        cute.group_modes(tCgSFB, 0, 3),
    )
    tBsSFB = cute.filter_zeros(tBsSFB)
    tBgSFB = cute.filter_zeros(tBgSFB)

    #
    # Partition shared/tensor memory tensor for TiledMMA_A/B/C
    #
    # (MMA, MMA_M, MMA_K, STAGE)
    tCrA = tiled_mma.make_fragment_A(sA)
    # (MMA, MMA_N, MMA_K, STAGE)
    tCrB = tiled_mma.make_fragment_B(sB)
    # (MMA, MMA_M, MMA_N)
    acc_shape = tiled_mma.partition_shape_C(MMA_TILER_MNK[:2])
    # (MMA, MMA_M, MMA_N)
    tCtAcc_fake = tiled_mma.make_fragment_C(acc_shape)

    # Build SFA/SFB TMEM layouts before allocation so footprint can be computed.
    tCtSFA_layout = blockscaled_utils.make_tmem_layout_sfa(
        tiled_mma,
        MMA_TILER_MNK,
        SF_VEC_SIZE,
        cute.slice_(sfa_smem_layout_staged, (None, None, None, 0)),
    )
    tCtSFB_layout = blockscaled_utils.make_tmem_layout_sfb(
        tiled_mma,
        MMA_TILER_MNK,
        SF_VEC_SIZE,
        cute.slice_(sfb_smem_layout_staged, (None, None, None, 0)),
    )

    tCtSFA_fake = cute.make_tensor(
        cute.make_ptr(SF_DTYPE, 0, cute.AddressSpace.gmem, assumed_align=16),
        tCtSFA_layout,
    )
    tCtSFB_fake = cute.make_tensor(
        cute.make_ptr(SF_DTYPE, 0, cute.AddressSpace.gmem, assumed_align=16),
        tCtSFB_layout,
    )
    # TMEM columns: [acc stage 0 | acc stage 1 | SFA | SFB], rounded to a power of 2.
    acc_cols = tcgen05.find_tmem_tensor_col_offset(tCtAcc_fake)
    sfa_cols = tcgen05.find_tmem_tensor_col_offset(tCtSFA_fake)
    sfb_cols = tcgen05.find_tmem_tensor_col_offset(tCtSFB_fake)
    total_tmem_cols = acc_cols * NUM_ACC_STAGE + sfa_cols + sfb_cols
    alloc_tmem_cols = _round_tmem_alloc_cols(total_tmem_cols)

    #
    # Alloc tensor memory buffer (warp 0 allocates; all but the TMA warp wait)
    #
    tmem_alloc_barrier = pipeline.NamedBarrier(
        barrier_id=1,
        num_threads=THREADS - 32,
    )
    tmem = TmemAllocator(
        storage.tmem_holding_buf.ptr,
        barrier_for_retrieve=tmem_alloc_barrier,
    )
    tmem.allocate(alloc_tmem_cols)
    if not is_tma_warp:
        tmem.wait_for_alloc()
    acc_tmem_base_ptr = tmem.retrieve_ptr(cutlass.Float32)
    tCtAcc_stage0 = cute.make_tensor(acc_tmem_base_ptr, tCtAcc_fake.layout)

    #
    # Make SFA/SFB tmem tensor
    #
    # Get SFA tmem ptr
    sfa_tmem_ptr = cute.recast_ptr(
        acc_tmem_base_ptr + acc_cols * NUM_ACC_STAGE,
        dtype=SF_DTYPE,
    )
    tCtSFA = cute.make_tensor(sfa_tmem_ptr, tCtSFA_layout)
    # Get SFB tmem ptr
    sfb_tmem_ptr = cute.recast_ptr(
        acc_tmem_base_ptr + acc_cols * NUM_ACC_STAGE + sfa_cols,
        dtype=SF_DTYPE,
    )
    tCtSFB = cute.make_tensor(sfb_tmem_ptr, tCtSFB_layout)

    #
    # Partition for S2T copy of SFA/SFB
    #
    # Make S2T CopyAtom
    copy_atom_s2t = cute.make_copy_atom(
        tcgen05.Cp4x32x128bOp(tcgen05.CtaGroup.ONE),
        SF_DTYPE,
    )
    # (MMA, MMA_MN, MMA_K, STAGE)
    tCsSFA_compact = cute.filter_zeros(sSFA)
    tCtSFA_compact = cute.filter_zeros(tCtSFA)
    tiled_copy_s2t_sfa = tcgen05.make_s2t_copy(copy_atom_s2t, tCtSFA_compact)
    thr_copy_s2t_sfa = tiled_copy_s2t_sfa.get_slice(0)
    # ((ATOM_V, REST_V), Rest_Tiler, MMA_MN, MMA_K, STAGE)
    tCsSFA_compact_s2t_ = thr_copy_s2t_sfa.partition_S(tCsSFA_compact)
    # ((ATOM_V, REST_V), Rest_Tiler, MMA_MN, MMA_K, STAGE)
    tCsSFA_compact_s2t = tcgen05.get_s2t_smem_desc_tensor(tiled_copy_s2t_sfa, tCsSFA_compact_s2t_)
    # ((ATOM_V, REST_V), Rest_Tiler, MMA_MN, MMA_K)
    tCtSFA_compact_s2t = thr_copy_s2t_sfa.partition_D(tCtSFA_compact)

    # (MMA, MMA_MN, MMA_K, STAGE)
    tCsSFB_compact = cute.filter_zeros(sSFB)
    # (MMA, MMA_MN, MMA_K)
    tCtSFB_compact = cute.filter_zeros(tCtSFB)
    tiled_copy_s2t_sfb = tcgen05.make_s2t_copy(copy_atom_s2t, tCtSFB_compact)
    thr_copy_s2t_sfb = tiled_copy_s2t_sfb.get_slice(0)
    # ((ATOM_V, REST_V), Rest_Tiler, MMA_MN, MMA_K, STAGE)
    tCsSFB_compact_s2t_ = thr_copy_s2t_sfb.partition_S(tCsSFB_compact)
    # ((ATOM_V, REST_V), Rest_Tiler, MMA_MN, MMA_K, STAGE)
    tCsSFB_compact_s2t = tcgen05.get_s2t_smem_desc_tensor(tiled_copy_s2t_sfb, tCsSFB_compact_s2t_)
    # ((ATOM_V, REST_V), Rest_Tiler, MMA_MN, MMA_K)
    tCtSFB_compact_s2t = thr_copy_s2t_sfb.partition_D(tCtSFB_compact)

    num_kblocks = cute.size(tCrA, mode=[2])

    #
    # Persistent producer loop (TMA warp)
    #
    if is_tma_warp and tile_start < tile_end:
        tile_idx = tile_start
        prev_group_idx = cutlass.Int32(-1)
        cta_m = cutlass.Int32(0)
        k_tile_cnt = cutlass.Int32(0)
        group_idx = find_group(tile_idx, cta_prefix, num_groups)
        group_end = cta_prefix[group_idx + 1]
        while tile_idx < tile_end:
            if tile_idx >= group_end:
                group_idx = group_idx + 1
                group_end = cta_prefix[group_idx + 1]
            if group_idx != prev_group_idx:
                m = problem_sizes[group_idx, 0]
                n = problem_sizes[group_idx, 1]
                k = problem_sizes[group_idx, 2]
                l = problem_sizes[group_idx, 3]  # noqa: E741
                cta_m = ceil_div(m, MMA_TILER_MNK[0])
                # cute.ceil_div traces to other IR than ceil_div: kept, so the cubin stays.
                k_tile_cnt = cute.ceil_div(k, MMA_TILER_MNK[2])

                # This group's real tensors: A/B K-major (m|n, k, l), scale
                # factors in the blocked layout tiled to the same shape.
                mA_mkl_iter = cute.make_ptr(
                    AB_DTYPE, abc_ptrs[group_idx, 0], cute.AddressSpace.gmem
                ).align(32)
                mB_nkl_iter = cute.make_ptr(
                    AB_DTYPE, abc_ptrs[group_idx, 1], cute.AddressSpace.gmem
                ).align(32)
                sfa_mkl_iter = cute.make_ptr(
                    SF_DTYPE, sfasfb_ptrs[group_idx, 0], cute.AddressSpace.gmem
                ).align(32)
                sfb_nkl_iter = cute.make_ptr(
                    SF_DTYPE, sfasfb_ptrs[group_idx, 1], cute.AddressSpace.gmem
                ).align(32)
                mA_mkl_layout = cute.make_layout(
                    (m, k, l),
                    stride=(cute.assume(k, 32), 1, cute.assume(m * k, 32)),
                )
                mB_nkl_layout = cute.make_layout(
                    (n, k, l),
                    stride=(cute.assume(k, 32), 1, cute.assume(n * k, 32)),
                )
                sfa_layout = blockscaled_utils.tile_atom_to_shape_SF(
                    mA_mkl_layout.shape, SF_VEC_SIZE
                )
                sfb_layout = blockscaled_utils.tile_atom_to_shape_SF(
                    mB_nkl_layout.shape, SF_VEC_SIZE
                )
                real_tensor_a = cute.make_tensor(mA_mkl_iter, mA_mkl_layout)
                real_tensor_b = cute.make_tensor(mB_nkl_iter, mB_nkl_layout)
                real_tensor_sfa = cute.make_tensor(sfa_mkl_iter, sfa_layout)
                real_tensor_sfb = cute.make_tensor(sfb_nkl_iter, sfb_layout)

                # Rewrite the four descriptors (staged in SMEM) and fence them
                # before the next TMA load uses them.
                tensormap_manager.update_tensormap(
                    (
                        real_tensor_a,
                        real_tensor_b,
                        real_tensor_sfa,
                        real_tensor_sfb,
                    ),
                    (tma_atom_a, tma_atom_b, tma_atom_sfa, tma_atom_sfb),
                    (
                        tensormap_a_gmem_ptr,
                        tensormap_b_gmem_ptr,
                        tensormap_sfa_gmem_ptr,
                        tensormap_sfb_gmem_ptr,
                    ),
                    TMA_WARP_ID,
                    (
                        tensormap_a_smem_ptr,
                        tensormap_b_smem_ptr,
                        tensormap_sfa_smem_ptr,
                        tensormap_sfb_smem_ptr,
                    ),
                )
                tensormap_manager.fence_tensormap_update(tensormap_a_gmem_ptr)
                tensormap_manager.fence_tensormap_update(tensormap_b_gmem_ptr)
                tensormap_manager.fence_tensormap_update(tensormap_sfa_gmem_ptr)
                tensormap_manager.fence_tensormap_update(tensormap_sfb_gmem_ptr)
                prev_group_idx = group_idx

            # Tile coordinates within the group, M-fastest.
            cta_rest = tile_idx - cta_prefix[group_idx]
            coord_y = cta_rest // cta_m
            coord_x = cta_rest % cta_m

            tAgA_tile = tAgA[(None, coord_x, None, 0)]
            tBgB_tile = tBgB[(None, coord_y, None, 0)]
            tAgSFA_tile = tAgSFA[(None, coord_x, None, 0)]
            tBgSFB_tile = tBgSFB[(None, coord_y, None, 0)]
            for k_tile in range(k_tile_cnt):
                ab_empty = ab_producer.acquire_and_advance()
                cute.copy(
                    tma_atom_a,
                    tAgA_tile[(None, k_tile)],
                    tAsA[(None, ab_empty.index)],
                    tma_bar_ptr=ab_empty.barrier,
                    tma_desc_ptr=tensormap_manager.get_tensormap_ptr(
                        tensormap_a_gmem_ptr,
                        cute.AddressSpace.generic,
                    ),
                )
                cute.copy(
                    tma_atom_b,
                    tBgB_tile[(None, k_tile)],
                    tBsB[(None, ab_empty.index)],
                    tma_bar_ptr=ab_empty.barrier,
                    tma_desc_ptr=tensormap_manager.get_tensormap_ptr(
                        tensormap_b_gmem_ptr,
                        cute.AddressSpace.generic,
                    ),
                )
                cute.copy(
                    tma_atom_sfa,
                    tAgSFA_tile[(None, k_tile)],
                    tAsSFA[(None, ab_empty.index)],
                    tma_bar_ptr=ab_empty.barrier,
                    tma_desc_ptr=tensormap_manager.get_tensormap_ptr(
                        tensormap_sfa_gmem_ptr,
                        cute.AddressSpace.generic,
                    ),
                )
                cute.copy(
                    tma_atom_sfb,
                    tBgSFB_tile[(None, k_tile)],
                    tBsSFB[(None, ab_empty.index)],
                    tma_bar_ptr=ab_empty.barrier,
                    tma_desc_ptr=tensormap_manager.get_tensormap_ptr(
                        tensormap_sfb_gmem_ptr,
                        cute.AddressSpace.generic,
                    ),
                )
            tile_idx += 1

    #
    # Persistent consumer loop (MMA warp)
    #
    if is_mma_warp and tile_start < tile_end:
        tile_idx = tile_start
        prev_group_idx = cutlass.Int32(-1)
        k_tile_cnt = cutlass.Int32(0)
        group_idx = find_group(tile_idx, cta_prefix, num_groups)
        group_end = cta_prefix[group_idx + 1]
        while tile_idx < tile_end:
            if tile_idx >= group_end:
                group_idx = group_idx + 1
                group_end = cta_prefix[group_idx + 1]
            if group_idx != prev_group_idx:
                k = problem_sizes[group_idx, 2]
                k_tile_cnt = cute.ceil_div(k, MMA_TILER_MNK[2])
                prev_group_idx = group_idx

            acc_empty = acc_producer.acquire_and_advance()
            stage_idx = acc_empty.index
            if cutlass.const_expr(NUM_ACC_STAGE == 1):
                tCtAcc = tCtAcc_stage0
            else:
                tCtAcc = cute.make_tensor(
                    acc_tmem_base_ptr + stage_idx * acc_cols,
                    tCtAcc_fake.layout,
                )

            # The first MMA of a tile overwrites the accumulator stage.
            tiled_mma.set(tcgen05.Field.ACCUMULATE, False)
            accumulate_enabled = False
            for _k_tile in range(k_tile_cnt):
                ab_full = ab_consumer.wait_and_advance()
                # Scale factors of this stage: SMEM -> TMEM.
                s2t_stage_coord = (None, None, None, None, ab_full.index)
                tCsSFA_compact_s2t_staged = tCsSFA_compact_s2t[s2t_stage_coord]
                tCsSFB_compact_s2t_staged = tCsSFB_compact_s2t[s2t_stage_coord]
                cute.copy(
                    tiled_copy_s2t_sfa,
                    tCsSFA_compact_s2t_staged,
                    tCtSFA_compact_s2t,
                )
                cute.copy(
                    tiled_copy_s2t_sfb,
                    tCsSFB_compact_s2t_staged,
                    tCtSFB_compact_s2t,
                )

                for kblock_idx in cutlass.range(num_kblocks, unroll_full=True):
                    kblock_coord = (
                        None,
                        None,
                        kblock_idx,
                        ab_full.index,
                    )
                    sf_kblock_coord = (None, None, kblock_idx)
                    tiled_mma.set(
                        tcgen05.Field.SFA,
                        tCtSFA[sf_kblock_coord].iterator,
                    )
                    tiled_mma.set(
                        tcgen05.Field.SFB,
                        tCtSFB[sf_kblock_coord].iterator,
                    )
                    cute.gemm(
                        tiled_mma,
                        tCtAcc,
                        tCrA[kblock_coord],
                        tCrB[kblock_coord],
                        tCtAcc,
                    )
                    if not accumulate_enabled:
                        tiled_mma.set(tcgen05.Field.ACCUMULATE, True)
                        accumulate_enabled = True
                ab_full.release()
            acc_empty.commit()
            tile_idx += 1

    #
    # Persistent epilogue loop (epilogue warps)
    #
    op = tcgen05.Ld32x32bOp(tcgen05.Repetition.x128, tcgen05.Pack.NONE)
    copy_atom_t2r = cute.make_copy_atom(op, cutlass.Float32)
    epilogue_slice_idx = tidx
    if not is_epilogue_warp:
        epilogue_slice_idx = 0
    simt_atom_128 = cute.make_copy_atom(
        cute.nvgpu.CopyUniversalOp(), c_dtype, num_bits_per_copy=128
    )
    simt_atom = cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), c_dtype, num_bits_per_copy=16)
    thread_row = tidx
    if cutlass.const_expr(NUM_ACC_STAGE == 1):
        tiled_copy_t2r_stage0 = tcgen05.make_tmem_copy(copy_atom_t2r, tCtAcc_stage0[None, 0, 0])
        thr_copy_t2r_stage0 = tiled_copy_t2r_stage0.get_slice(epilogue_slice_idx)
        tDtAcc_stage0 = thr_copy_t2r_stage0.partition_S(tCtAcc_stage0[None, 0, 0])

    if is_epilogue_warp and tile_start < tile_end:
        tile_idx = tile_start
        prev_group_idx = cutlass.Int32(-1)
        m = cutlass.Int32(0)
        n = cutlass.Int32(0)
        l = cutlass.Int32(0)  # noqa: E741
        cta_m = cutlass.Int32(0)
        alpha = cutlass.Float32(1.0)
        group_idx = find_group(tile_idx, cta_prefix, num_groups)
        group_end = cta_prefix[group_idx + 1]
        while tile_idx < tile_end:
            acc_full = acc_consumer.wait_and_advance()
            stage_idx = acc_full.index
            if tile_idx >= group_end:
                group_idx = group_idx + 1
                group_end = cta_prefix[group_idx + 1]
            if group_idx != prev_group_idx:
                m = problem_sizes[group_idx, 0]
                n = problem_sizes[group_idx, 1]
                l = problem_sizes[group_idx, 3]  # noqa: E741
                cta_m = ceil_div(m, MMA_TILER_MNK[0])
                if cutlass.const_expr(alpha_ptrs is not None):
                    alpha = load_alpha(alpha_ptrs, group_idx)
                prev_group_idx = group_idx
            cta_rest = tile_idx - cta_prefix[group_idx]
            coord_y = cta_rest // cta_m
            coord_x = cta_rest % cta_m

            if cutlass.const_expr(NUM_ACC_STAGE == 1):
                tiled_copy_t2r = tiled_copy_t2r_stage0
                thr_copy_t2r = thr_copy_t2r_stage0
                tDtAcc = tDtAcc_stage0
            else:
                tCtAcc = cute.make_tensor(
                    acc_tmem_base_ptr + stage_idx * acc_cols,
                    tCtAcc_fake.layout,
                )
                tiled_copy_t2r = tcgen05.make_tmem_copy(copy_atom_t2r, tCtAcc[None, 0, 0])
                thr_copy_t2r = tiled_copy_t2r.get_slice(epilogue_slice_idx)
                tDtAcc = thr_copy_t2r.partition_S(tCtAcc[None, 0, 0])

            # C (m, n, l), row-major FP16.
            mC_mnl_iter = cute.make_ptr(
                c_dtype, abc_ptrs[group_idx, 2], cute.AddressSpace.gmem
            ).align(32)
            mC_mnl_layout = cute.make_layout(
                (m, n, l),
                stride=(cute.assume(n, 32), 1, cute.assume(m * n, 32)),
            )
            mC_mnl = cute.make_tensor(mC_mnl_iter, mC_mnl_layout)
            gC_mnl = cute.local_tile(
                mC_mnl,
                cute.slice_(MMA_TILER_MNK, (None, None, 0)),
                (coord_x, coord_y, 0),
            )
            tCgC = thr_mma.partition_C(gC_mnl)
            tDgC = thr_copy_t2r.partition_D(tCgC[None, 0, 0])
            tDrAcc = cute.make_rmem_tensor(tDgC.shape, cutlass.Float32)
            tDrC = cute.make_rmem_tensor(tDgC.shape, c_dtype)

            residue_m = mC_mnl.shape[0] - cutlass.Int32(coord_x) * MMA_TILER_MNK[0]
            residue_n = mC_mnl.shape[1] - cutlass.Int32(coord_y) * MMA_TILER_MNK[1]
            full_m_tile = residue_m >= MMA_TILER_MNK[0]
            full_n_tile = residue_n >= MMA_TILER_MNK[1]
            row_valid = thread_row < residue_m
            has_output_row = full_m_tile or row_valid

            # TMEM -> registers (thread t holds row t), FP32 -> FP16, -> GMEM.
            cute.copy(tiled_copy_t2r, tDtAcc, tDrAcc)
            if has_output_row:
                if cutlass.const_expr(alpha_ptrs is not None):
                    tDrC.store((tDrAcc.load() * alpha).to(c_dtype))
                else:
                    tDrC.store(tDrAcc.load().to(c_dtype))

            if has_output_row and full_n_tile:
                cute.copy(simt_atom_128, cute.flatten(tDrC), cute.flatten(tDgC))
            elif has_output_row:
                tDpC = cute.make_rmem_tensor(tDrC.shape, cutlass.Boolean)
                for i in cutlass.range(cute.size(tDrC.shape), unroll_full=True):
                    tDpC[i] = i < residue_n
                cute.copy(
                    simt_atom,
                    cute.flatten(tDrC),
                    cute.flatten(tDgC),
                    pred=cute.flatten(tDpC),
                )
            acc_full.release()
            tile_idx += 1

    tmem.relinquish_alloc_permit()
    # Deallocate TMEM
    cute.arch.barrier()
    tmem.free(acc_tmem_base_ptr)


@cute.jit
def launch_grouped_gemm(
    problem_sizes_ptr: cute.Pointer,
    abc_ptrs_ptr: cute.Pointer,
    sfasfb_ptrs_ptr: cute.Pointer,
    cta_prefix_ptr: cute.Pointer,
    tensormap_ptr: cute.Pointer,
    total_num_clusters: cutlass.Int32,
    persistent_blocks: cutlass.Int32,
    alpha_ptrs_ptr: cute.Pointer | None,
    num_groups: cutlass.Constexpr[int],
    c_dtype: cutlass.Constexpr,
):
    """Build the TMA atoms and SMEM layouts and launch ``persistent_blocks`` CTAs.

    ``total_num_clusters`` is part of the launch signature but unused here.
    """
    abc_ptrs = cute.make_tensor(abc_ptrs_ptr, cute.make_layout((num_groups, 3), stride=(3, 1)))
    sfasfb_ptrs = cute.make_tensor(
        sfasfb_ptrs_ptr, cute.make_layout((num_groups, 2), stride=(2, 1))
    )
    problem_sizes = cute.make_tensor(
        problem_sizes_ptr, cute.make_layout((num_groups, 4), stride=(4, 1))
    )
    cta_prefix = cute.make_tensor(cta_prefix_ptr, cute.make_layout((num_groups + 1), stride=(1)))
    tensormaps = cute.make_tensor(
        tensormap_ptr,
        cute.make_layout((persistent_blocks, 4, 16), stride=(64, 16, 1)),
    )

    # Use fake shape for initial Tma descriptor and atom setup
    # The real Tma desc and atom will be updated during kernel execution.
    min_a_shape = (
        cutlass.Int32(64),
        cutlass.Int32(64),
        cutlass.Int32(64),
        cutlass.Int32(1),
    )
    min_b_shape = (
        cutlass.Int32(64),
        cutlass.Int32(64),
        cutlass.Int32(64),
        cutlass.Int32(1),
    )
    initial_a = cute.make_tensor(
        cute.make_ptr(AB_DTYPE, 0, cute.AddressSpace.gmem, assumed_align=16),
        cute.make_layout(
            (min_a_shape[0], cute.assume(min_a_shape[2], 32), min_a_shape[3]),
            stride=(
                cute.assume(min_a_shape[2], 32),
                1,
                cute.assume(min_a_shape[0] * min_a_shape[2], 32),
            ),
        ),
    )
    initial_b = cute.make_tensor(
        cute.make_ptr(AB_DTYPE, 0, cute.AddressSpace.gmem, assumed_align=16),
        cute.make_layout(
            (min_b_shape[1], cute.assume(min_b_shape[2], 32), min_b_shape[3]),
            stride=(
                cute.assume(min_b_shape[2], 32),
                1,
                cute.assume(min_b_shape[1] * min_b_shape[2], 32),
            ),
        ),
    )

    # Setup sfa/sfb tensor by filling A/B tensor to scale factor atom layout
    # ((Atom_M, Rest_M),(Atom_K, Rest_K),RestL)
    sfa_layout = blockscaled_utils.tile_atom_to_shape_SF(initial_a.shape, SF_VEC_SIZE)
    # ((Atom_N, Rest_N),(Atom_K, Rest_K),RestL)
    sfb_layout = blockscaled_utils.tile_atom_to_shape_SF(initial_b.shape, SF_VEC_SIZE)
    # Create initial SFA and SFB tensors with fake shape and null pointer.
    initial_sfa = cute.make_tensor(
        cute.make_ptr(SF_DTYPE, 0, cute.AddressSpace.gmem, assumed_align=16),
        sfa_layout,
    )
    initial_sfb = cute.make_tensor(
        cute.make_ptr(SF_DTYPE, 0, cute.AddressSpace.gmem, assumed_align=16),
        sfb_layout,
    )

    # Select MMA operation
    mma_op = tcgen05.MmaMXF4NVF4Op(
        SF_DTYPE,
        (MMA_TILER_MNK[0], MMA_TILER_MNK[1], MMA_INST_SHAPE_K),
        tcgen05.CtaGroup.ONE,
        tcgen05.OperandSource.SMEM,
    )
    tiled_mma = cute.make_tiled_mma(mma_op)

    cluster_layout_vmnk = cute.tiled_divide(
        cute.make_layout((1, 1, 1)),
        (tiled_mma.thr_id.shape,),
    )

    # Compute A/B/SFA/SFB/C shared memory layout
    a_smem_layout_staged = sm100_utils.make_smem_layout_a(
        tiled_mma,
        MMA_TILER_MNK,
        AB_DTYPE,
        NUM_AB_STAGE,
    )
    b_smem_layout_staged = sm100_utils.make_smem_layout_b(
        tiled_mma,
        MMA_TILER_MNK,
        AB_DTYPE,
        NUM_AB_STAGE,
    )
    sfa_smem_layout_staged = blockscaled_utils.make_smem_layout_sfa(
        tiled_mma,
        MMA_TILER_MNK,
        SF_VEC_SIZE,
        NUM_AB_STAGE,
    )
    sfb_smem_layout_staged = blockscaled_utils.make_smem_layout_sfb(
        tiled_mma,
        MMA_TILER_MNK,
        SF_VEC_SIZE,
        NUM_AB_STAGE,
    )
    atom_thr_size = cute.size(tiled_mma.thr_id.shape)

    # Setup TMA for A
    a_smem_layout = cute.slice_(a_smem_layout_staged, (None, None, None, 0))
    tma_atom_a, tma_tensor_a = cute.nvgpu.make_tiled_tma_atom_A(
        cpasync.CopyBulkTensorTileG2SOp(tcgen05.CtaGroup.ONE),
        initial_a,
        a_smem_layout,
        MMA_TILER_MNK,
        tiled_mma,
        cluster_layout_vmnk.shape,
    )
    # Setup TMA for B
    b_smem_layout = cute.slice_(b_smem_layout_staged, (None, None, None, 0))
    tma_atom_b, tma_tensor_b = cute.nvgpu.make_tiled_tma_atom_B(
        cpasync.CopyBulkTensorTileG2SOp(tcgen05.CtaGroup.ONE),
        initial_b,
        b_smem_layout,
        MMA_TILER_MNK,
        tiled_mma,
        cluster_layout_vmnk.shape,
    )
    # Setup TMA for SFA
    sfa_smem_layout = cute.slice_(sfa_smem_layout_staged, (None, None, None, 0))
    tma_atom_sfa, tma_tensor_sfa = cute.nvgpu.make_tiled_tma_atom_A(
        cpasync.CopyBulkTensorTileG2SOp(tcgen05.CtaGroup.ONE),
        initial_sfa,
        sfa_smem_layout,
        MMA_TILER_MNK,
        tiled_mma,
        cluster_layout_vmnk.shape,
        internal_type=cutlass.Int16,
    )
    # Setup TMA for SFB
    sfb_smem_layout = cute.slice_(sfb_smem_layout_staged, (None, None, None, 0))
    tma_atom_sfb, tma_tensor_sfb = cute.nvgpu.make_tiled_tma_atom_B(
        cpasync.CopyBulkTensorTileG2SOp(tcgen05.CtaGroup.ONE),
        initial_sfb,
        sfb_smem_layout,
        MMA_TILER_MNK,
        tiled_mma,
        cluster_layout_vmnk.shape,
        internal_type=cutlass.Int16,
    )

    # Compute TMA load bytes
    a_copy_size = cute.size_in_bytes(AB_DTYPE, a_smem_layout)
    b_copy_size = cute.size_in_bytes(AB_DTYPE, b_smem_layout)
    sfa_copy_size = cute.size_in_bytes(SF_DTYPE, sfa_smem_layout)
    sfb_copy_size = cute.size_in_bytes(SF_DTYPE, sfb_smem_layout)
    num_tma_load_bytes = (a_copy_size + b_copy_size + sfa_copy_size + sfb_copy_size) * atom_thr_size

    # Persistent grouped launch: fewer CTAs than total tiles, each CTA loops tiles.
    grid = (persistent_blocks, 1, 1)

    grouped_gemm_kernel(
        tiled_mma,
        # TMA atoms and placeholder tensors (64x64 shapes, null pointers); every
        # CTA rewrites the descriptors per group in its tensormap workspace.
        tma_atom_a,
        tma_tensor_a,
        tma_atom_b,
        tma_tensor_b,
        tma_atom_sfa,
        tma_tensor_sfa,
        tma_atom_sfb,
        tma_tensor_sfb,
        # Per-group tables and per-CTA descriptor workspace.
        abc_ptrs,
        sfasfb_ptrs,
        tensormaps,
        problem_sizes,
        # Staged shared memory layouts (stage is the last mode).
        a_smem_layout_staged,
        b_smem_layout_staged,
        sfa_smem_layout_staged,
        sfb_smem_layout_staged,
        # Scheduler: prefix sums over per-group tile counts.
        cta_prefix,
        num_groups,
        # Transaction bytes per AB stage (mbarrier expect-tx).
        num_tma_load_bytes,
        # Epilogue: C's dtype and the per-group alpha table (None: no alpha).
        c_dtype,
        alpha_table(alpha_ptrs_ptr, num_groups),
    ).launch(
        grid=grid,
        block=[THREADS, 1, 1],
        cluster=(1, 1, 1),
        min_blocks_per_mp=1,
    )


def compile(num_groups: int, out_dtype: str = "float16", alpha: bool = False):
    """Compile ``launch_grouped_gemm`` for ``num_groups`` groups and return it.

    Pointers are null and both Int32 scalars are 1: neither is baked into the
    compiled code. The target is taken from ``CUTE_DSL_ARCH``. ``out_dtype`` and
    ``alpha`` choose the epilogue (:mod:`.epilogue`).
    """

    def null_ptr(dtype):
        return make_ptr(dtype, 0, cute.AddressSpace.gmem, assumed_align=16)

    return cute.compile(
        launch_grouped_gemm,
        null_ptr(cutlass.Int32),  # problem_sizes int32[G, 4]
        null_ptr(cutlass.Int64),  # abc_ptrs int64[G, 3]
        null_ptr(cutlass.Int64),  # sfasfb_ptrs int64[G, 2]
        null_ptr(cutlass.Int32),  # cta_prefix int32[G + 1]
        null_ptr(cutlass.Int64),  # tensormaps int64[persistent_blocks, 4, 16]
        cutlass.Int32(1),  # total_num_clusters
        cutlass.Int32(1),  # persistent_blocks
        null_ptr(cutlass.Int64) if alpha else None,  # alpha_pointers int64[G]
        num_groups,
        C_DTYPES[out_dtype],
    )
