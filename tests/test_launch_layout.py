"""The launch layout (nvfp4_aot.launch_layout): pure arithmetic, no driver, no fake."""

from __future__ import annotations

import struct

import pytest

from nvfp4_aot import loader, validation
from nvfp4_aot.intmath import round_up
from nvfp4_aot.launch_layout import (
    ALIGN,
    LaunchLayout,
    cta_prefix,
    persistent_blocks,
    split_groups,
)
from nvfp4_aot.manifest import Workspace


@pytest.mark.parametrize(
    "groups, expected",
    [(1, [(0, 1, 8)]), (8, [(0, 8, 8)]), (9, [(0, 9, 120)]), (120, [(0, 120, 120)]),
     (121, [(0, 120, 120), (120, 121, 8)]),
     (250, [(0, 120, 120), (120, 240, 120), (240, 250, 120)])],
)  # fmt: skip
def test_split_groups(groups, expected):
    assert split_groups(groups, [120, 8]) == expected


def test_split_with_a_single_variant():
    assert split_groups(17, [8]) == [(0, 8, 8), (8, 16, 8), (16, 17, 8)]


def test_cta_prefix_and_persistent_blocks_by_hand():
    assert cta_prefix([1, 8, 3], 8) == (0, 1, 9, 12, 12, 12, 12, 12, 12)
    assert persistent_blocks(12, 132) == 12
    assert persistent_blocks(2048, 132) == 132
    assert persistent_blocks(0, 132) == 1
    # a family that runs two CTAs per SM: twice the SMs, still never more than the tiles
    assert persistent_blocks(2048, 132, 2) == 264
    assert persistent_blocks(200, 132, 2) == 200


def _variants(manifest, family="sm100_nvfp4_grouped_gemm", arch="sm_100a"):
    return {v.num_groups: v for v in manifest.variants if (v.family, v.arch) == (family, arch)}


def _layout(manifest, sizes, sm_count=132, ring_slots=3, **kw):
    return LaunchLayout.build(validation.problem_sizes(sizes), _variants(manifest, **kw),
                              sm_count, ring_slots)  # fmt: skip


def test_regions_are_aligned_ordered_and_disjoint(manifest):
    layout = _layout(manifest, [(64, 128, 256)] * 130)
    assert [(s.groups[0], s.groups[-1] + 1, s.num_groups) for s in layout.launches] == [
        (0, 120, 120), (120, 130, 120)]  # fmt: skip
    regions = []
    for launch in layout.launches:
        g = launch.num_groups
        regions.append((launch.sizes_offset, 16 * g))
        regions.append((launch.prefix_offset, 4 * (g + 1)))
    regions.append((layout.workspace_offset, layout.workspace_bytes))
    regions.append((layout.graph_workspace_offset, layout.workspace_bytes))
    for slot in range(layout.slots):
        regions.append((layout.slot_offset(slot), layout.slot_bytes))
    for start, _size in regions:
        assert start % ALIGN == 0
    for (a, size_a), (b, _size_b) in zip(regions, regions[1:]):
        assert a + size_a <= b, "regions overlap or are out of order"
    last, size = regions[-1]
    assert last + size == layout.device_bytes
    assert layout.graph_slot == layout.ring_slots == 3 and layout.slots == 3 + layout.capture_slots


def test_grid_and_workspace_come_from_the_variant(manifest):
    layout = _layout(manifest, [(96, 128, 128), (256, 512, 256), (72, 384, 256)], sm_count=10)
    (launch,) = layout.launches
    assert launch.total_tiles == 12 and launch.persistent_blocks == 10
    assert launch.grid == (10, 1, 1)  # the manifest's grid reads persistent_blocks
    assert layout.workspace_bytes == 10 * Workspace().bytes_per_block
    assert layout.zero_once() == []


def test_static_tables_hold_sizes_and_prefix(manifest):
    sizes = [(96, 128, 128), (256, 512, 256), (72, 384, 256)]
    layout = _layout(manifest, sizes)
    image = layout.static_tables()
    (launch,) = layout.launches
    rows = struct.unpack_from("<32i", image, launch.sizes_offset)
    assert [rows[i : i + 4] for i in range(0, 32, 4)] == [
        (*s, 1) for s in sizes] + [(0, 0, 0, 0)] * 5  # fmt: skip
    assert struct.unpack_from("<9i", image, launch.prefix_offset) == launch.cta_prefix
    assert len(image) == layout.workspace_offset


def test_pointer_table_scatters_every_field_of_every_group(manifest):
    layout = _layout(manifest, [(64, 128, 256)] * 121)
    count = 121
    flat = [(f + 1) << 40 | g << 8 for f in range(5) for g in range(count)]
    table = layout.pointer_table(flat)
    assert len(table) == layout.slot_bytes
    words = struct.unpack(f"<{layout.slot_bytes // 8}Q", table)
    for launch in layout.launches:
        for local, g in enumerate(launch.groups):
            abc = launch.abc_offset // 8 + 3 * local
            scales = launch.scales_offset // 8 + 2 * local
            assert words[abc : abc + 3] == tuple(flat[f * count + g] for f in range(3))
            assert words[scales : scales + 2] == tuple(flat[f * count + g] for f in (3, 4))
    assert sum(1 for w in words if w) == 5 * count  # padding groups stay zero


def test_kernel_inputs_point_into_the_slot_and_the_right_workspace(manifest):
    layout = _layout(manifest, [(64, 128, 256)] * 3)
    (launch,) = layout.launches
    base = 1 << 32
    eager = layout.kernel_inputs(launch, base, 1)
    graph = layout.kernel_inputs(launch, base, layout.graph_slot)
    assert eager["abc_pointers"] == base + layout.slot_offset(1) + launch.abc_offset
    assert eager["scale_pointers"] == base + layout.slot_offset(1) + launch.scales_offset
    assert eager["tensormap_workspace"] == base + layout.workspace_offset
    assert graph["tensormap_workspace"] == base + layout.graph_workspace_offset
    assert eager["problem_sizes"] == graph["problem_sizes"] == base + launch.sizes_offset
    assert (eager["total_tiles"], eager["persistent_blocks"]) == (3, 3)


def test_decode_once_workspaces_are_sized_per_sub_launch_and_zeroed_once():
    manifest = loader.load_manifest()  # the committed artifacts: both sm_90a families
    a16 = {"family": "sm90_nvfp4_grouped_gemm_a16", "arch": "sm_90a"}
    sizes = [(300, 256, 512)] * 120 + [(1000, 256, 1024)]
    layout = _layout(manifest, sizes, sm_count=132, **a16)
    first, second = layout.launches
    workspace = layout.variants[0].workspace
    need = max(
        workspace.bytes_for(validation.problem_sizes(sizes[:120]), first.persistent_blocks),
        workspace.bytes_for(validation.problem_sizes(sizes[120:]), second.persistent_blocks),
    )
    assert layout.workspace_bytes == round_up(need, ALIGN)
    (zeroed,) = layout.zero_once()
    assert zeroed == (layout.workspace_offset,
                      layout.graph_workspace_offset + layout.workspace_bytes - layout.workspace_offset)  # fmt: skip
