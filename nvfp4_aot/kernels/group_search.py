"""The persistent schedulers' tile arithmetic and group search, shared by all the kernels.

Tiles of all groups are numbered consecutively; ``cta_prefix[g]`` is the first tile of
group g and ``cta_prefix[num_groups]`` the total. Inlined into each kernel at trace time.
"""

import cutlass
import cutlass.cute as cute


def ceil_div(a, b):
    """ceil(a / b) for a >= 0, b > 0: Python ints at trace time or DSL integers in a kernel
    (the same ``(a + b - 1) // b`` ops either way, so the traced IR does not depend on it)."""
    return (a + b - 1) // b


@cute.jit
def cta_tile_range(
    bidx: cutlass.Int32,
    grid_dim_x: cutlass.Int32,
    cta_prefix: cute.Tensor,
    num_groups: cutlass.Constexpr[int],
):
    """[tile_start, tile_end) of CTA ``bidx`` of ``grid_dim_x``: each CTA takes the next
    ceil(T / P) consecutive tiles, the last ones fewer (T = cta_prefix[num_groups])."""
    total_tiles = cta_prefix[num_groups]
    tiles_per_cta = ceil_div(total_tiles, grid_dim_x)
    tile_start = bidx * tiles_per_cta
    tile_end = tile_start + tiles_per_cta
    if tile_end > total_tiles:
        tile_end = total_tiles
    return tile_start, tile_end


@cute.jit
def find_group(
    tile_idx: cutlass.Int32,
    cta_prefix: cute.Tensor,
    num_groups: cutlass.Constexpr[int],
) -> cutlass.Int32:
    """Group g holding tile_idx: the smallest g with tile_idx < cta_prefix[g + 1]."""
    group_idx = cutlass.Int32(0)
    if cutlass.const_expr(num_groups == 2):
        p1 = cta_prefix[1]
        if tile_idx >= p1:
            group_idx = cutlass.Int32(1)
    elif cutlass.const_expr(num_groups == 8):
        # Branch tree: 7 independent loads, 3 compares.
        p1 = cta_prefix[1]
        p2 = cta_prefix[2]
        p3 = cta_prefix[3]
        p4 = cta_prefix[4]
        p5 = cta_prefix[5]
        p6 = cta_prefix[6]
        p7 = cta_prefix[7]
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
        right = num_groups
        while left < right:
            mid = (left + right) // 2
            if cta_prefix[mid + 1] <= tile_idx:
                left = mid + 1
            else:
                right = mid
        group_idx = left
    return group_idx


@cute.jit
def advance_group(
    tile_idx: cutlass.Int32, group_idx: cutlass.Int32, cta_prefix: cute.Tensor
) -> cutlass.Int32:
    """From ``group_idx`` on, the group holding ``tile_idx``: a CTA's tiles ascend, so
    it only steps past groups that end before the tile (zero-tile groups included)."""
    while tile_idx >= cta_prefix[group_idx + 1]:
        group_idx = group_idx + 1
    return group_idx


@cute.jit
def warp_tile_range(
    bidx: cutlass.Int32,
    grid_dim_x: cutlass.Int32,
    cta_prefix: cute.Tensor,
    num_groups: cutlass.Constexpr[int],
):
    """(tile_start, tile_end, group of tile_start): ``cta_tile_range`` and ``find_group``
    computed by a whole warp from one round of independent loads (lane l reads
    cta_prefix[g + 1] for g = l, l + 32, ...). The group of a tile is the number of groups
    that end at or before it; the total is the last group's end. ``find_group``'s binary
    search over 120 or 256 groups is a chain of 7-8 dependent loads that every CTA waits
    for before its first TMA load."""
    lane = cute.arch.lane_idx()
    chunks = ceil_div(num_groups, 32)
    ends = []
    for i in cutlass.range_constexpr(chunks):
        if cutlass.const_expr(32 * (i + 1) <= num_groups):
            end = cta_prefix[32 * i + lane + 1]
        else:  # lanes past the last group: an end no tile reaches
            end = cutlass.Int32(0x7FFFFFFF)
            if 32 * i + lane < num_groups:
                end = cta_prefix[32 * i + lane + 1]
        ends.append(end)
    total = cute.arch.shuffle_sync(ends[chunks - 1], (num_groups - 1) % 32)
    tiles_per_cta = ceil_div(total, grid_dim_x)
    tile_start = bidx * tiles_per_cta
    tile_end = tile_start + tiles_per_cta
    if tile_end > total:
        tile_end = total
    group_idx = cutlass.Int32(0)
    for i in cutlass.range_constexpr(chunks):
        group_idx = group_idx + cute.arch.popc(cute.arch.vote_ballot_sync(ends[i] <= tile_start))
    return tile_start, tile_end, group_idx
