"""The kernel family per problem (nvfp4_aot.selection): the measured rule and the
plan's choice on sm_90a artifacts that hold both families."""

from __future__ import annotations

import json

import pytest

from nvfp4_aot import plan
from nvfp4_aot.errors import InvalidProblemError
from nvfp4_aot.selection import expected_rows
from support import (
    A16,
    A16_EXTRA,
    DECODE,
    DECODE32,
    DECODE32_EXTRA,
    DECODE_EXTRA,
    FAMILY,
    REPO,
    installed_h200,
    write_synthetic,
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


# ---------------------------------------------------------------------------------------
# the decode family (16-row activation tiles): chosen by the rows a group is expected to hold


def _synthetic_sm90(tmp_path_factory, name, extras):
    directory = tmp_path_factory.mktemp(name)
    write_synthetic(directory, [("sm_90a", g, extra) for extra in extras for g in (8, 120)])
    return directory


@pytest.fixture(scope="module")
def decode_artifacts(tmp_path_factory):
    """sm_90a with all four families, as the committed artifacts have them."""
    return _synthetic_sm90(
        tmp_path_factory, "decode", ({}, A16_EXTRA, DECODE_EXTRA, DECODE32_EXTRA)
    )


@pytest.fixture(scope="module")
def decode16_artifacts(tmp_path_factory):
    """sm_90a without the 32-row tiles: the 16-row ones take up to their own 16 rows."""
    return _synthetic_sm90(tmp_path_factory, "decode16", ({}, A16_EXTRA, DECODE_EXTRA))


@pytest.fixture
def decode_fake(decode_artifacts):
    with installed_h200(decode_artifacts) as fake:
        yield fake


def test_expected_rows_weights_groups_by_their_weights():
    assert expected_rows([(16, 4096, 7168)] * 3) == 16
    # a narrow group counts for little beside a wide one
    assert expected_rows([(100, 128, 128), (4, 4096, 4096)]) == pytest.approx(
        (100 * 128 * 128 + 4 * 4096 * 4096) / (128 * 128 + 4096 * 4096)
    )
    assert expected_rows([]) == 0


TILE_ROWS = {DECODE: 16, DECODE32: 32}


def test_grouped_plan_takes_decode_tiles_for_few_rows(decode_fake, decode_artifacts):
    cases = [
        ([(12, 4096, 7168)] * 8, DECODE),  # up to the 16-row tiles' handover
        ([(1, 1536, 2048), (7, 1536, 2048), (0, 1536, 2048)], DECODE),
        ([(13, 4096, 7168)] * 8, DECODE32),  # past it: 32-row tiles
        ([(16, 4096, 7168)] * 8, DECODE32),
        ([(32, 1536, 2048)] * 8, DECODE32),
        ([(33, 4096, 7168)] * 8, A16),  # past 32 rows: the 128-row families' rule
        ([(64, 2048, 768)] * 8, FAMILY["sm_90a"]),
    ]
    for sizes, family in cases:
        with plan.GroupedGemmPlan(sizes, artifacts=decode_artifacts) as p:
            assert p.family == family, sizes
            tile_m = TILE_ROWS.get(family, 128)
            tiles = sum(-(-m // tile_m) * -(-n // 128) for m, n, _k in sizes)
            per_sm = 2 if family in TILE_ROWS else 1
            assert p.layout.launches[0].persistent_blocks == min(tiles, 132 * per_sm)
    with plan.GroupedGemmPlan(
        [(1, 1536, 2048)], artifacts=decode_artifacts, kernel=FAMILY["sm_90a"]
    ) as p:
        assert p.family == FAMILY["sm_90a"]  # a forced family wins


def test_without_32_row_tiles_16_row_ones_take_their_own_rows(decode16_artifacts):
    with installed_h200(decode16_artifacts):
        for rows, family in ((16, DECODE), (17, A16)):
            with plan.GroupedGemmPlan([(rows, 4096, 7168)] * 8, artifacts=decode16_artifacts) as p:
                assert p.family == family, rows


@pytest.fixture
def committed_fake():
    """The committed artifacts (every family and the routing kernel) on a fake H200."""
    with installed_h200() as fake:
        yield fake


def test_moe_plan_takes_decode_tiles_by_expected_rows(committed_fake):
    from nvfp4_aot.moe import MoeGemmPlan

    def family(**kwargs):
        with MoeGemmPlan(**kwargs) as p:
            if p.family in TILE_ROWS:  # the grid is two CTAs per SM, the bound permitting
                assert all(c.persistent_blocks == min(c.tiles_bound, 264) for c in p.layout.chunks)
            return p.family

    decode_step = dict(experts=128, n=1536, k=2048)  # 8 tokens x top-8: 64 rows, 0.5 each
    assert family(**decode_step, capacity=64) == DECODE
    assert family(**decode_step, capacity=128 * 12) == DECODE  # 12 per expert
    assert family(**decode_step, capacity=128 * 16) == DECODE32
    assert family(**decode_step, capacity=128 * 32) == DECODE32
    assert family(**decode_step, capacity=128 * 33) == FAMILY["sm_90a"]
    # the caller's hint overrides capacity / experts
    assert family(**decode_step, capacity=16384, rows_per_expert=4) == DECODE
    assert family(**decode_step, capacity=64, rows_per_expert=20) == DECODE32
    assert family(**decode_step, capacity=64, rows_per_expert=100) == FAMILY["sm_90a"]
    # masked: max_m is the estimate
    assert family(**decode_step, capacity=16, layout="masked") == DECODE32
    assert family(**decode_step, capacity=8, layout="masked") == DECODE
    assert family(**decode_step, capacity=64, layout="masked") == FAMILY["sm_90a"]
    assert family(**decode_step, capacity=64, kernel=A16) == A16
    for bad in (-1, "4", True, float("nan")):
        with pytest.raises(InvalidProblemError, match="rows_per_expert must be a number"):
            MoeGemmPlan(**decode_step, capacity=64, rows_per_expert=bad)
