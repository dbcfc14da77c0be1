"""The plan (nvfp4_aot.plan) against the fake driver: the uploaded sizes / prefix /
packed parameters, sub-launches past 120 groups, close, the plan cache and
``grouped_gemm``. The layout arithmetic itself: test_launch_layout.py."""

from __future__ import annotations

import numpy as np
import pytest

from nvfp4_aot import plan
from nvfp4_aot.errors import InvalidProblemError
from nvfp4_aot.packing import ParamPacker
from support import (
    SMEM,
    operands_for,
)


def test_plan_uploads_sizes_prefix_and_packs_params(make_fake, artifacts, manifest):
    fake = make_fake()
    sizes = [(96, 128, 128), (256, 512, 256), (72, 384, 256)]
    with plan.GroupedGemmPlan(sizes, artifacts=artifacts, ring_slots=3) as p:
        (launch,) = p.launches
        assert launch.tiles == (1, 8, 3)
        assert launch.cta_prefix == (0, 1, 9, 12, 12, 12, 12, 12, 12)
        assert (launch.total_tiles, launch.persistent_blocks, launch.grid) == (12, 12, (12, 1, 1))
        inputs = p.kernel_inputs(0)[0]
        uploaded_sizes = np.frombuffer(fake.read(inputs["problem_sizes"], 8 * 16), np.int32)
        assert uploaded_sizes.reshape(8, 4).tolist() == [
            [96, 128, 128, 1], [256, 512, 256, 1], [72, 384, 256, 1]] + [[0, 0, 0, 0]] * 5  # fmt: skip
        prefix = np.frombuffer(fake.read(inputs["cta_prefix"], 9 * 4), np.int32)
        assert prefix.tolist() == list(launch.cta_prefix)
        for name in ("problem_sizes", "abc_pointers", "scale_pointers", "cta_prefix"):
            assert inputs[name] % 16 == 0
        assert inputs["tensormap_workspace"] % 128 == 0
        assert p.workspace_bytes == 12 * 512
        assert [n for n in fake.names() if n in ("cuMemAlloc", "cuMemHostAlloc")] == [
            "cuMemAlloc", "cuMemHostAlloc"]  # fmt: skip

        a, b, c, sfa, sfb = operands_for([s[:3] for s in sizes])
        alloc_calls = fake.names().count("cuMemAlloc")
        p.run(a, b, c, sfa, sfb, stream=7)
        (launched,) = fake.launches
        variant = manifest.variant("sm100_nvfp4_grouped_gemm", "sm_100a", 8)
        packed = ParamPacker(variant).pack(inputs)
        assert b"".join(launched.params) == b"".join(
            bytes(packed[o : o + s]) for o, s in ((q.offset, q.size) for q in variant.params)
        )
        assert launched.grid == (12, 1, 1)
        assert launched.block == (192, 1, 1)
        assert launched.shared_bytes == SMEM
        assert launched.stream == 7
        assert [attr for attr, _ in launched.attributes] == [6, 4, 2]
        assert fake.names().count("cuMemAlloc") == alloc_calls  # nothing allocated per run

        # the copied pointer tables
        dst, data, stream = fake.copies[-1]
        assert (dst, stream) == (inputs["abc_pointers"], 7)
        table = np.frombuffer(data, np.int64)
        abc = table[: 8 * 3].reshape(8, 3)
        assert abc[:3].tolist() == [
            [x.__cuda_array_interface__["data"][0] for x in (a[g], b[g], c[g])] for g in range(3)
        ]
        assert not abc[3:].any()
        scales_at = (inputs["scale_pointers"] - inputs["abc_pointers"]) // 8
        scales = table[scales_at : scales_at + 16].reshape(8, 2)
        assert scales[:3].tolist() == [
            [x.__cuda_array_interface__["data"][0] for x in (sfa[g], sfb[g])] for g in range(3)
        ]


def test_more_than_120_groups_split_into_launches(make_fake, artifacts):
    fake = make_fake()
    sizes = [(64, 128, 256)] * 121
    with plan.GroupedGemmPlan(sizes, artifacts=artifacts) as p:
        assert [(s.groups[0], s.groups[-1] + 1, s.num_groups) for s in p.launches] == [
            (0, 120, 120),
            (120, 121, 8),
        ]
        p.run(*operands_for(sizes))
        assert [launch.grid for launch in fake.launches] == [(120, 1, 1), (1, 1, 1)]
        # both launches and the copy of both tables: one graph recorded for the slot
        assert fake.names().count("cuGraphLaunch") == 1 and len(fake.copies) == 1
        inputs = p.kernel_inputs(0)
        assert inputs[0]["tensormap_workspace"] == inputs[1]["tensormap_workspace"]


def test_close_frees_everything(make_fake, artifacts):
    fake = make_fake()
    p = plan.GroupedGemmPlan([(128, 128, 256)], artifacts=artifacts)
    p.run(*operands_for([(128, 128, 256)]))
    p.close()
    p.close()
    assert not fake.memory and not fake.host
    assert fake.names().count("cuEventDestroy") == p.ring_slots + 1
    with pytest.raises(Exception, match="closed"):
        p.run(*operands_for([(128, 128, 256)]))


def test_get_plan_caches(make_fake, artifacts, monkeypatch):
    make_fake()
    monkeypatch.setenv("NVFP4_AOT_ARTIFACTS", str(artifacts))
    p1 = plan.get_plan([(128, 128, 256)])
    assert plan.get_plan([(128, 128, 256, 1)]) is p1
    assert plan.get_plan([(256, 128, 256)]) is not p1


def test_grouped_gemm_infers_sizes(make_fake, artifacts, monkeypatch):
    fake = make_fake()
    monkeypatch.setenv("NVFP4_AOT_ARTIFACTS", str(artifacts))
    sizes = [(96, 128, 512), (200, 256, 1024)]
    plan.grouped_gemm(*operands_for(sizes), stream=3)
    (launched,) = fake.launches
    assert launched.stream == 3
    cached = plan.get_plan(sizes)
    assert cached.problem_sizes == ((96, 128, 512, 1), (200, 256, 1024, 1))


def test_grouped_gemm_needs_sizes_for_raw_pointers(make_fake, artifacts, monkeypatch):
    make_fake()
    monkeypatch.setenv("NVFP4_AOT_ARTIFACTS", str(artifacts))
    with pytest.raises(
        InvalidProblemError, match=r"group 0: a is a raw pointer, so problem_sizes must be given"
    ):
        plan.grouped_gemm([1 << 20], [2 << 20], [3 << 20], [4 << 20], [5 << 20])
    # distinct, non-overlapping buffers (C must alias nothing)
    plan.grouped_gemm(
        [1 << 20], [2 << 20], [3 << 20], [4 << 20], [5 << 20], problem_sizes=[(128, 128, 256)]
    )


def test_empty_groups_take_no_place_and_their_operands_are_not_read(make_fake, artifacts):
    """m = 0 groups (experts that got no tokens) are left out of the launch; their
    operands may be anything, null pointers included, and are never checked."""
    fake = make_fake()
    sizes = [(0, 256, 256), (64, 256, 256), (0, 256, 256), (200, 256, 256), (0, 256, 256)]
    with plan.GroupedGemmPlan(sizes, artifacts=artifacts) as p:
        (launch,) = p.launches
        assert launch.groups == (1, 3)
        assert launch.cta_prefix[:3] == (0, 2, 6)  # no empty group between groups with tiles
        a, b, c, sfa, sfb = operands_for([(max(m, 1), n, k) for m, n, k in sizes])
        for g in (0, 2, 4):
            a[g], b[g], c[g], sfa[g], sfb[g] = 0, None, "junk", 0, 0
        p.run(a, b, c, sfa, sfb, stream=5)
        (launched,) = fake.launches
        table = np.frombuffer(fake.copies[-1][1], np.int64)
        abc = table[:24].reshape(8, 3)
        assert abc[:2].tolist() == [
            [x.__cuda_array_interface__["data"][0] for x in (a[g], b[g], c[g])] for g in (1, 3)
        ]
        assert not abc[2:].any()
        # a live group's operands are still checked
        a[1] = 0
        with pytest.raises(InvalidProblemError, match="group 1: a is a null pointer"):
            p.run(a, b, c, sfa, sfb)


def test_a_plan_of_empty_groups_launches_nothing(make_fake, artifacts):
    fake = make_fake()
    with plan.GroupedGemmPlan([(0, 128, 256)] * 3, artifacts=artifacts) as p:
        assert p.launches == ()
        p.run([0] * 3, [0] * 3, [0] * 3, [0] * 3, [0] * 3, stream=3)
        p.synchronize()
        assert fake.launches == []
