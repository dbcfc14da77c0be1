"""A MoE GEMM launch's group tables computed by each of its CTAs (no routing kernel).

The routing setup kernel (:mod:`.moe_routing`) turns the device token counts into the
tables a grouped GEMM reads (sizes, pointers, CTA prefix) in global memory, and the GEMM
waits for it; in a 1-token decode step that kernel and the wait for it are ~2.3 µs of a
12-16 µs run (H200, session 17: ``docs/h200/session17/call11/``). A *routed* GEMM variant
(:mod:`.sm90_grouped_gemm` with plan and run words in place of the tables) has every
CTA read the counts itself and build the same tables in shared memory: one round of
loads and three CTA scans, then the kernel runs as with the tables, through the objects
below, which the kernel indexes exactly as it indexes the global tables
(``sizes[g, 0]``, ``abc[g, 2]``, ...): groups are the experts with tokens, in expert
order, then empty groups whose prefix entry is the total, as the routing kernel writes
them. The words (plan header, run slot) are the routing kernel's
(:mod:`nvfp4_aot.moe_layout`); the experts are placed and their counts clamped by the
routing kernel's own code (:func:`.moe_routing.place_experts`), so no routing makes the
GEMM read or write outside the plan's operands. Inlined into the kernel at trace time.
"""

import cutlass
import cutlass.cute as cute

from ..moe_layout import (
    P_A_ROW_BYTES,
    P_B_EXPERT_BYTES,
    P_C_ROW_BYTES,
    P_CAPACITY,
    P_EXPERTS,
    P_K,
    P_LAYOUT,
    P_N,
    P_SFA_UNIT_BYTES,
    P_SFB_EXPERT_BYTES,
    R_A,
    R_ALPHA,
    R_B,
    R_C,
    R_ROUTING,
    R_SFA,
    R_SFB,
)
from .moe_routing import LAYOUT_CONTIGUOUS, place_experts


def routed_storage(num_groups: int, warps: int):
    """The shared-memory struct of a CTA's group tables (5 KB at 256 groups)."""

    @cute.struct
    class RoutedStorage:
        prefix: cute.struct.MemRange[cutlass.Int32, num_groups + 1]
        rows: cute.struct.MemRange[cutlass.Int32, num_groups]
        first_row: cute.struct.MemRange[cutlass.Int32, num_groups]
        sfa_unit: cute.struct.MemRange[cutlass.Int32, num_groups]
        expert: cute.struct.MemRange[cutlass.Int32, num_groups]
        warp_totals: cute.struct.MemRange[cutlass.Int32, warps]

    return RoutedStorage


class RoutedGroups:
    """The tables of one routing in shared memory, and the plan and run words."""

    def __init__(self, storage, plan, run, num_groups: int, warps: int):
        self.plan = plan
        self.run = run
        self.num_groups = num_groups
        self.prefix = storage.prefix.get_tensor(cute.make_layout(num_groups + 1))
        self.rows = storage.rows.get_tensor(cute.make_layout(num_groups))
        self.first_row = storage.first_row.get_tensor(cute.make_layout(num_groups))
        self.sfa_unit = storage.sfa_unit.get_tensor(cute.make_layout(num_groups))
        self.expert = storage.expert.get_tensor(cute.make_layout(num_groups))
        self.warp_totals = storage.warp_totals.get_tensor(cute.make_layout(warps))

    # the views the kernel indexes as it indexes the global tables ------------------------

    @property
    def sizes(self):
        return _Sizes(self)

    @property
    def abc(self):
        return _Abc(self)

    @property
    def scales(self):
        return _Scales(self)

    @property
    def alphas(self):
        return _Alphas(self)

    def offset(self, base_word: int, index, bytes_word: int):
        """run[base_word] + index * plan[bytes_word]: an operand's address for a group."""
        return self.run[base_word] + cutlass.Int64(index) * self.plan[bytes_word]


class _View:
    """A table the kernel indexes, computed from the groups' shared memory and words."""

    def __init__(self, groups: RoutedGroups):
        self.groups = groups


class _Sizes(_View):
    """sizes[g, j]: (m, n, k, 1) of group g."""

    def __getitem__(self, index):
        g, j = index
        if j == 0:
            return self.groups.rows[g]
        if j == 3:
            return cutlass.Int32(1)
        return cutlass.Int32(self.groups.plan[P_N if j == 1 else P_K])


class _Abc(_View):
    """abc[g, j]: the addresses of group g's A, B and C."""

    def __getitem__(self, index):
        g, j = index
        groups = self.groups
        if j == 0:
            return groups.offset(R_A, groups.first_row[g], P_A_ROW_BYTES)
        if j == 1:
            return groups.offset(R_B, groups.expert[g], P_B_EXPERT_BYTES)
        return groups.offset(R_C, groups.first_row[g], P_C_ROW_BYTES)


class _Scales(_View):
    """scales[g, j]: the addresses of group g's SFA and SFB."""

    def __getitem__(self, index):
        g, j = index
        groups = self.groups
        if j == 0:
            return groups.offset(R_SFA, groups.sfa_unit[g], P_SFA_UNIT_BYTES)
        return groups.offset(R_SFB, groups.expert[g], P_SFB_EXPERT_BYTES)


class _Alphas(_View):
    """alphas[g]: the address of group g's FP32 alpha."""

    def __getitem__(self, g):
        return self.groups.run[R_ALPHA] + cutlass.Int64(self.groups.expert[g]) * 4


@cute.jit
def route(groups: RoutedGroups, tile_m: cutlass.Constexpr[int], tile_n: cutlass.Constexpr[int],
          tidx):  # fmt: skip
    """Fill ``groups``' tables from the device counts (every thread of the CTA; one thread
    an expert, so the CTA has more threads than groups), once the kernel before this one
    has finished (programmatic stream serialization: it may write the counts). Expert e
    of the contiguous layout has its activation scales at row sum_{j<e} round_up(m_j,
    128) of the blocked SFA; of the masked layout at expert e's block (the plan's
    P_SFA_UNIT_BYTES says which unit a group's ``sfa_unit`` counts)."""
    cute.arch.griddepcontrol_wait()
    plan, run = groups.plan, groups.run
    experts = cutlass.min(cutlass.Int32(plan[P_EXPERTS]), groups.num_groups)
    layout = cutlass.Int32(plan[P_LAYOUT])
    capacity = cutlass.Int32(plan[P_CAPACITY])
    n = cutlass.Int32(plan[P_N])
    routing = cute.make_tensor(
        cute.make_ptr(cutlass.Int32, run[R_ROUTING], cute.AddressSpace.gmem, assumed_align=4),
        cute.make_layout(experts + 1),
    )
    first, rows, active, slot, used, tile_before, total_tiles, sf_row = place_experts(
        tidx, tidx < experts, routing, layout, capacity, n, tile_m, tile_n,
        groups.warp_totals, tidx,
    )  # fmt: skip
    # (the tables as locals: a DSL `if` cannot carry the Python object)
    s_rows, s_first, s_expert, s_prefix, s_sfa = (
        groups.rows,
        groups.first_row,
        groups.expert,
        groups.prefix,
        groups.sfa_unit,
    )
    if active == 1:
        s_rows[slot] = rows
        s_first[slot] = first
        s_expert[slot] = tidx
        s_prefix[slot] = tile_before
        if layout == LAYOUT_CONTIGUOUS:
            s_sfa[slot] = sf_row
        else:
            s_sfa[slot] = tidx
    # groups past the experts with tokens: no tiles, their prefix entry the total
    if tidx >= used and tidx <= groups.num_groups:
        s_prefix[tidx] = total_tiles
    cute.arch.barrier()
