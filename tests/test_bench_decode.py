"""bench/bench_decode.py's plumbing on CPU (needs torch; skipped without it): one
configuration through the real MoeGemmPlan against the fake driver (committed sm_90a
artifacts, int pointers to torch CPU tensors), torch.cuda's timing stubbed. It checks the
glue — plan, routing sample, floor, spot check, graph and eager loops, baselines, table —
not the numbers, which only the GPU gives."""

from __future__ import annotations

import argparse
import sys
from types import SimpleNamespace

import pytest

from fake_driver import FakeDriver, installed
from nvfp4_aot import loader
from support import REPO, kernel_params_of

torch = pytest.importorskip("torch")
import cuda_stubs  # noqa: E402  (needs torch)


@pytest.fixture
def cpu_cuda(monkeypatch):
    """torch.cuda's events, graphs, sleep and streams as no-ops on CPU."""
    cuda_stubs.install(monkeypatch)
    monkeypatch.syspath_prepend(str(REPO / "bench"))
    yield
    for module in ("bench_decode", "bench_moe", "bench_common"):
        sys.modules.pop(module, None)


def case_args(*options, **values):
    """The arguments bench_moe.add_case_options parses (the options MoeCase reads, so a
    new one reaches these tests), with ``values`` set."""
    import bench_moe

    parser = argparse.ArgumentParser()
    bench_moe.add_case_options(parser)
    return SimpleNamespace(**vars(parser.parse_args(list(options))), **values)


def test_bench_case_runs_end_to_end(cpu_cuda):
    import bench_decode
    from bench_common import GpuHold

    committed = loader.load_manifest()
    fake = FakeDriver(capability=(9, 0), kernel_params=kernel_params_of(committed))
    with installed(fake):
        experts, n, k, tokens = 300, 128, 256, 8  # two GEMM launches (256 + 44 experts)
        weights = bench_decode.make_weights(experts, n, k, torch.device("cpu"))
        args = case_args("--pointers", seed=0, steps=12)
        row = bench_decode.bench_case(
            experts, n, k, tokens, weights, 4e12, GpuHold(), args, torch.device("cpu")
        )
        assert fake.launches
    assert row["host_probe_us"] > 0 and row["host_probe_after_us"] > 0
    assert row["gemm_launches"] == 2 and row["rows"] == 64 and row["decode"]
    assert 8 <= row["experts_hit"] <= 64 and row["mem_floor_us"] > 0
    assert row["copy_same_us"] > 0 and row["ours_over_copy"] > 0
    assert set(row["targets"]) == {"floor", "speedup_2x", "not_slower", "host"}
    table = bench_decode.markdown([row])
    assert table.count("\n") == 2 and "| 300 | 128, 256 | 8 |" in table
    summary = bench_decode.summary([row])
    assert (
        summary.startswith("1 configurations, 1 decode")
        and "1 of the rows with the host at full speed" in summary
    )


def test_bench_moe_case_shares_the_setup(cpu_cuda):
    """bench_moe.py's configuration runs through the same MoeCase (sync check stubbed:
    it needs a real GPU hold)."""
    import bench_moe
    from bench_common import GpuHold

    committed = loader.load_manifest()
    fake = FakeDriver(capability=(9, 0), kernel_params=kernel_params_of(committed))
    with installed(fake):
        experts, n, k, tokens = 8, 128, 256, 8
        weights = bench_moe.make_weights(experts, n, k, torch.device("cpu"))
        args = case_args("--pointers", seed=0, steps=12)
        bench_moe.sync_check = lambda _fn, _hold: {"stubbed": True}
        row = bench_moe.bench_case(
            "cpu", experts, n, k, tokens, weights, 4e12, GpuHold(), args, torch.device("cpu")
        )
        assert fake.launches
    assert row["rows"] == 64 and row["steps"] >= 20 and row["mem_floor_us"] > 0
    assert row["syncs"] == {"stubbed": True}
