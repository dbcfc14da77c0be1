"""A prefix sum over one CTA's threads (the MoE routing setup and the quantizer use it
to place each expert's rows and scale segments). Inlined into each kernel at trace time."""

import cutlass
import cutlass.cute as cute


@cute.jit
def block_scan(value: cutlass.Int32, s_warp: cute.Tensor, tidx: cutlass.Int32):
    """(exclusive prefix, total) of ``value`` over the CTA's threads, in thread order;
    ``s_warp`` holds one Int32 per warp of the CTA (shared memory)."""
    lane = tidx % 32
    warp = tidx // 32
    inclusive = value
    for d in cutlass.range_constexpr(5):
        other = cute.arch.shuffle_sync_up(inclusive, 1 << d, mask_and_clamp=0)
        if lane >= (1 << d):
            inclusive = inclusive + other
    if lane == 31:
        s_warp[warp] = inclusive
    cute.arch.barrier()
    before = cutlass.Int32(0)
    total = cutlass.Int32(0)
    for w in cutlass.range_constexpr(cute.size(s_warp)):
        partial = s_warp[w]
        if w < warp:
            before = before + partial
        total = total + partial
    cute.arch.barrier()  # s_warp is reused by the next scan
    return before + inclusive - value, total
