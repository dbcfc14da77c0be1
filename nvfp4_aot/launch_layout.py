"""Where a plan's launches, tables and workspaces lie: pure arithmetic, no driver calls.

A plan over G problem sizes runs one launch per chunk of its non-empty groups (more
groups than the largest baked variant holds are split; groups with m = 0 have no tiles
and take no place in any launch). Its one device allocation holds, in order::

    [sizes 0][prefix 0][sizes 1][prefix 1]...   per sub-launch, uploaded once at creation
    [workspace]                                 tensormap workspace of eager runs
    [graph workspace]                           the same for CUDA graph replays
    [slot 0]...[slot R-1][capture slots]        pointer tables: a ring, then one per capture

A slot holds, per sub-launch, the A/B/C pointer table (3 int64 per baked group), the
SFA/SFB table (2 int64 per baked group) and, for a variant with alpha, the table of
alpha pointers (1 int64 per baked group: the address of the group's entry in the run's
FP32 alpha array); the words of padding groups stay zero.
Every region starts at a multiple of :data:`ALIGN` bytes.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from functools import cached_property

from . import validation
from .intmath import round_up
from .manifest import Variant
from .packing import launch_grid

ALIGN = 128
_SIZE_BYTES = 16  # (m, n, k, l) int32 per group
_PREFIX_BYTES = 4  # int32 per CTA-prefix entry
_ABC_BYTES = 24  # three int64 pointers per group
_SCALE_BYTES = 16  # two int64 pointers per group
_ALPHA_BYTES = 8  # one int64 pointer per group
_ALPHA_ITEM = 4  # float32 alpha values


@dataclass(frozen=True)
class SubLaunch:
    """One kernel launch of a plan: its ``groups`` (indices into the plan's problem
    sizes, all with m >= 1) on a variant of ``num_groups`` groups."""

    groups: tuple[int, ...]
    num_groups: int  # the variant's baked group count (>= len(groups))
    tiles: tuple[int, ...]  # per real group
    cta_prefix: tuple[int, ...]  # G + 1 entries, padded with the total
    total_tiles: int
    persistent_blocks: int
    grid: tuple[int, int, int]
    # byte offsets in the plan's device buffer / in a ring slot
    sizes_offset: int
    prefix_offset: int
    abc_offset: int
    scales_offset: int
    alpha_offset: int | None  # None: the variant has no alpha


def cta_prefix(tiles: list[int], num_groups: int) -> tuple[int, ...]:
    """Prefix sum of tiles per group, padded to ``num_groups + 1`` entries with the total."""
    prefix = [0]
    for count in tiles:
        prefix.append(prefix[-1] + count)
    prefix.extend([prefix[-1]] * (num_groups + 1 - len(prefix)))
    return tuple(prefix)


def persistent_blocks(total_tiles: int, sm_count: int, blocks_per_sm: int = 1) -> int:
    """``blocks_per_sm`` CTAs per SM at most (the variant's), never more CTAs than tiles,
    at least one."""
    return max(1, min(total_tiles, sm_count * blocks_per_sm))


def split_groups(num_groups: int, baked: list[int]) -> list[tuple[int, int, int]]:
    """Chunks ``(start, stop, variant groups)`` covering ``num_groups`` groups.

    Full chunks use the largest baked variant; the rest the smallest that holds it.
    """
    baked = sorted(baked)
    largest = baked[-1]
    chunks, start = [], 0
    while start < num_groups:
        count = min(largest, num_groups - start)
        fit = next(g for g in baked if g >= count)
        chunks.append((start, start + count, fit))
        start += count
    return chunks


class SlotRing:
    """Table slots of a layout: ``ring_slots`` for eager runs, then ``capture_slots``
    for runs recorded into CUDA graphs, ``slot_bytes`` each from ``ring_offset``."""

    ring_slots: int
    capture_slots: int
    ring_offset: int
    slot_bytes: int

    @property
    def graph_slot(self) -> int:
        """The first capture slot (after the ring's)."""
        return self.ring_slots

    @property
    def slots(self) -> int:
        return self.ring_slots + self.capture_slots

    def slot_offset(self, slot: int) -> int:
        return self.ring_offset + slot * self.slot_bytes


@dataclass(frozen=True)
class LaunchLayout(SlotRing):
    """The launches of one plan and the byte layout of its device buffer and ring slots."""

    problem_sizes: tuple[tuple[int, int, int, int], ...]
    launches: tuple[SubLaunch, ...]
    variants: tuple[Variant, ...]  # one per launch
    ring_slots: int
    capture_slots: int  # runs recorded into CUDA graphs, each with a table of its own
    workspace_bytes: int  # one workspace (eager or graph), the largest sub-launch's need
    workspace_offset: int
    graph_workspace_offset: int
    ring_offset: int
    slot_bytes: int
    device_bytes: int

    @classmethod
    def build(
        cls, problem_sizes, variants: dict[int, Variant], sm_count: int, ring_slots: int,
        capture_slots: int = 8,
    ) -> LaunchLayout:  # fmt: skip
        """Lay out checked ``problem_sizes`` over one family's ``variants`` (by group count)."""
        live = [g for g, (m, _n, _k, _l) in enumerate(problem_sizes) if m > 0]
        launches, chosen, offset, slot_bytes, workspace = [], [], 0, 0, 0
        for start, stop, g in split_groups(len(live), list(variants)):
            variant = variants[g]
            tile_m, tile_n, _tile_k = variant.tile_mnk
            members = tuple(live[start:stop])
            groups = [problem_sizes[i] for i in members]
            tiles = [validation.tiles(m, n, tile_m, tile_n) for m, n, _k, _l in groups]
            prefix = cta_prefix(tiles, g)
            total = prefix[-1]
            validation.check_total_tiles(total)
            blocks = persistent_blocks(total, sm_count, variant.blocks_per_sm)
            grid = launch_grid(variant, {"persistent_blocks": blocks, "total_tiles": total})
            sizes_offset = offset
            prefix_offset = round_up(sizes_offset + g * _SIZE_BYTES, ALIGN)
            offset = round_up(prefix_offset + (g + 1) * _PREFIX_BYTES, ALIGN)
            abc_offset = slot_bytes
            scales_offset = round_up(abc_offset + g * _ABC_BYTES, ALIGN)
            slot_bytes = round_up(scales_offset + g * _SCALE_BYTES, ALIGN)
            alpha_offset = None
            if variant.alpha:
                alpha_offset = slot_bytes
                slot_bytes = round_up(alpha_offset + g * _ALPHA_BYTES, ALIGN)
            launches.append(
                SubLaunch(members, g, tuple(tiles), prefix, total, blocks, grid,
                          sizes_offset, prefix_offset, abc_offset, scales_offset, alpha_offset)
            )  # fmt: skip
            chosen.append(variant)
            # sub-launches run one after another and share the workspace
            workspace = max(workspace, variant.workspace.bytes_for(groups, blocks))
        slot_bytes = max(slot_bytes, ALIGN)  # a plan of empty groups still has a slot
        workspace = round_up(workspace, ALIGN)
        graph_workspace_offset = round_up(offset + workspace, ALIGN)
        ring_offset = round_up(graph_workspace_offset + workspace, ALIGN)
        return cls(
            problem_sizes=tuple(problem_sizes),
            launches=tuple(launches),
            variants=tuple(chosen),
            ring_slots=ring_slots,
            capture_slots=capture_slots,
            workspace_bytes=workspace,
            workspace_offset=offset,
            graph_workspace_offset=graph_workspace_offset,
            ring_offset=ring_offset,
            slot_bytes=slot_bytes,
            device_bytes=ring_offset + (ring_slots + capture_slots) * slot_bytes,
        )

    def zero_once(self) -> list[tuple[int, int]]:
        """``(offset, bytes)`` to zero before the first launch: both workspaces (eager and
        graph) when a kernel needs its workspace zeroed once."""
        if not any(v.workspace.zero_once for v in self.variants):
            return []
        start = self.workspace_offset
        return [(start, self.graph_workspace_offset + self.workspace_bytes - start)]

    def static_tables(self, base: int = 0) -> bytearray:
        """The bytes before the workspace: every sub-launch's problem sizes (padding
        groups (0, 0, 0, 0)) and CTA prefix, uploaded once (they hold no addresses, so
        ``base`` does not matter)."""
        image = bytearray(self.workspace_offset)
        for launch in self.launches:
            padded = [self.problem_sizes[i] for i in launch.groups]
            padded += [(0, 0, 0, 0)] * (launch.num_groups - len(padded))
            struct.pack_into(
                f"<{4 * launch.num_groups}i", image, launch.sizes_offset,
                *(v for row in padded for v in row),
            )  # fmt: skip
            struct.pack_into(
                f"<{len(launch.cta_prefix)}i", image, launch.prefix_offset, *launch.cta_prefix
            )
        return image

    def kernel_inputs(self, launch: SubLaunch, base: int, slot: int) -> dict[str, int]:
        """The kernel inputs of ``launch`` from ``slot``, the device buffer at ``base``."""
        slot_base = base + self.slot_offset(slot)
        graph = slot >= self.graph_slot
        alpha = {}
        if launch.alpha_offset is not None:
            alpha = {"alpha_pointers": slot_base + launch.alpha_offset}
        return alpha | {
            "problem_sizes": base + launch.sizes_offset,
            "abc_pointers": slot_base + launch.abc_offset,
            "scale_pointers": slot_base + launch.scales_offset,
            "cta_prefix": base + launch.prefix_offset,
            "tensormap_workspace": base
            + (self.graph_workspace_offset if graph else self.workspace_offset),
            "total_tiles": launch.total_tiles,
            "persistent_blocks": launch.persistent_blocks,
        }

    @cached_property
    def _scatter(self) -> tuple[tuple[int, int], ...]:
        """(flat pointer index (field * G + group), int64 word of a slot) for every
        operand of every launched group; empty groups' operands are never read."""
        count = len(self.problem_sizes)
        scatter = []
        for launch in self.launches:
            for local, g in enumerate(launch.groups):
                for f in range(3):
                    scatter.append((f * count + g, launch.abc_offset // 8 + 3 * local + f))
                for f in range(2):
                    scatter.append(((3 + f) * count + g, launch.scales_offset // 8 + 2 * local + f))
        return tuple(scatter)

    @cached_property
    def _alpha_words(self) -> tuple[tuple[int, int], ...]:
        """(byte offset of the group's alpha in the run's array, int64 word of a slot)
        for every launched group of a variant with alpha."""
        return tuple(
            (_ALPHA_ITEM * g, launch.alpha_offset // 8 + local)
            for launch in self.launches
            if launch.alpha_offset is not None
            for local, g in enumerate(launch.groups)
        )

    @property
    def alpha(self) -> bool:
        """Whether the launches take a per-group alpha (the pointer list then ends with
        the address of the run's FP32 alpha array)."""
        return any(v.alpha for v in self.variants)

    @cached_property
    def _table_format(self) -> struct.Struct:
        return struct.Struct(f"<{self.slot_bytes // 8}Q")

    def pointer_table(self, pointers) -> bytes:
        """A slot's bytes for the flat (A, B, C, SFA, SFB) x group pointer list, followed
        by the alpha array's address when the launches take alpha."""
        words = [0] * (self.slot_bytes // 8)
        for i, word in self._scatter:
            words[word] = pointers[i]
        if self._alpha_words:
            alpha = pointers[-1]
            for offset, word in self._alpha_words:
                words[word] = alpha + offset
        return self._table_format.pack(*words)
