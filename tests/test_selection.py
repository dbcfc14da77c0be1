"""The kernel family per problem (nvfp4_aot.selection): the measured rule and the
plan's choice on sm_90a artifacts that hold both families."""

from __future__ import annotations

import json

import pytest

from nvfp4_aot import plan
from nvfp4_aot.errors import InvalidProblemError
from support import (
    A16,
    FAMILY,
    REPO,
)


def _benchmark_sizes():
    cases = json.loads((REPO / "tests" / "data" / "shapes.json").read_text())["benchmarks"]
    return [list(zip(c["m"], c["n"], c["k"])) for c in cases]


def test_family_rule_on_the_measured_benchmarks():
    """H200 (docs/hopper_kernel_notes.md): decoding once was faster on benchmarks 0 and 1
    (groups 4096 / 7168 wide, k 7168 / 2048), slower on 2 (3072 wide) and 3 (k 1536)."""
    from nvfp4_aot.selection import activations_once_pays

    assert [activations_once_pays(sizes, 128) for sizes in _benchmark_sizes()] == [
        True, True, False, False]  # fmt: skip
    assert activations_once_pays([(128, 4096, 2048)] * 8, 128)
    assert not activations_once_pays([(512, 2048, 7168)] * 8, 128)  # narrow groups
    assert not activations_once_pays([(512, 4096, 1024)] * 8, 128)
    # the tile width comes from the family: half-width tiles double the N tiles
    assert activations_once_pays([(128, 2048, 2048)] * 8, 64)  # short K


def test_plan_picks_the_family_per_problem(hopper_fake, hopper_artifacts):
    wide, _wide2, narrow, _short = _benchmark_sizes()
    with plan.GroupedGemmPlan(wide, artifacts=hopper_artifacts) as p:
        assert p.family == A16
        assert {launch.name for launch in p.variants} == {f"{A16}.sm_90a.g8"}
    with plan.GroupedGemmPlan(narrow, artifacts=hopper_artifacts) as p:
        assert p.family == "sm90_nvfp4_grouped_gemm"
    with plan.GroupedGemmPlan(wide, artifacts=hopper_artifacts, kernel=FAMILY["sm_90a"]) as p:
        assert p.family == FAMILY["sm_90a"]
    with pytest.raises(InvalidProblemError, match=f"kernel 'nope' is not baked.*{A16}"):
        plan.GroupedGemmPlan(wide, artifacts=hopper_artifacts, kernel="nope")
    with pytest.raises(InvalidProblemError, match="sm100_nvfp4_grouped_gemm' is not baked"):
        plan.GroupedGemmPlan(wide, artifacts=hopper_artifacts, kernel="sm100_nvfp4_grouped_gemm")
