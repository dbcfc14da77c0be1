"""The kernel workspace: sized for every sub-launch and zeroed for the decode-once
family, descriptors only for the per-CTA family; the manifest's workspace field."""

from __future__ import annotations

import json

import pytest

from nvfp4_aot import plan
from nvfp4_aot.errors import ArtifactError
from nvfp4_aot.intmath import round_up
from nvfp4_aot.manifest import Manifest, Workspace
from support import (
    A16,
    A16_EXTRA,
    A16_WORKSPACE,
    FAMILY,
    operands_for,
    write_synthetic,
)


def test_decode_once_workspace_is_sized_for_every_sub_launch_and_zeroed(
    hopper_fake, hopper_artifacts
):
    """121 groups: two sub-launches of different grids share one workspace, which holds
    the larger one's descriptors + FP16 scratch; both workspaces (eager, graph) start
    zeroed (the kernel's grid-barrier counter) before anything can launch."""
    hopper_fake.alloc_fill = 0xA5
    sizes = [(40, 256, 224)] * 120 + [(300, 4096, 4128)]
    with plan.GroupedGemmPlan(sizes, artifacts=hopper_artifacts, kernel=A16) as p:
        first, second = p.launches
        assert (first.persistent_blocks, second.persistent_blocks) == (132, 96)
        need_first = 132 * 512 + 120 * 40 * 256 * 2  # k 224 pads to 256
        need_second = 96 * 512 + 300 * 4224 * 2  # k 4128 pads to 4224
        assert need_second > need_first
        assert p.workspace_bytes == round_up(need_second, 128)
        names = hopper_fake.names()
        assert names.index("cuMemsetD8") < names.index("cuCtxSynchronize")
        inputs = p.kernel_inputs(0)
        for workspace in (inputs[0]["tensormap_workspace"],
                          p.kernel_inputs(p.graph_slot)[0]["tensormap_workspace"]):  # fmt: skip
            assert hopper_fake.read(workspace, p.workspace_bytes) == bytes(p.workspace_bytes)
        assert inputs[0]["tensormap_workspace"] == inputs[1]["tensormap_workspace"]
        p.run(*operands_for(sizes))
        assert [dict(launch.attributes)[2].cooperative for launch in hopper_fake.launches] == [1, 1]


def test_per_cta_family_workspace_is_descriptors_only(hopper_fake, hopper_artifacts):
    hopper_fake.alloc_fill = 0xA5
    sizes = [(128, 4096, 512)] * 3
    with plan.GroupedGemmPlan(sizes, artifacts=hopper_artifacts, kernel=FAMILY["sm_90a"]) as p:
        assert p.workspace_bytes == 96 * 512
        assert "cuMemsetD8" not in hopper_fake.names()


def test_workspace_field_round_trips_and_is_checked(tmp_path):
    manifest = write_synthetic(tmp_path / "a", [("sm_90a", 8, A16_EXTRA), ("sm_90a", 120)])
    again = Manifest.from_json(manifest.to_json())
    assert again.variants[0].workspace == A16_WORKSPACE
    assert again.variants[1].workspace == Workspace()
    assert (
        A16_WORKSPACE.bytes_for([(3, 64, 130, 1), (1, 8, 128)], 2) == 2 * 512 + (3 * 256 + 128) * 2
    )
    raw = json.loads(manifest.to_json())
    raw["variants"][0]["workspace"]["zero_once"] = 1
    with pytest.raises(ArtifactError, match=r"variants\[0\]\.workspace\.zero_once: expected bool"):
        Manifest.from_json(json.dumps(raw))
    raw["variants"][0]["workspace"] = {"activation_k_multiple": 0}
    with pytest.raises(ArtifactError, match="activation_k_multiple must be >= 1"):
        Manifest.from_json(json.dumps(raw))
