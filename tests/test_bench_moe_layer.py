"""bench/bench_moe_layer.py's layer steps on CPU (needs torch; skipped without it): the
NVFP4 step (the ops' CPU paths: the numpy quantizer, the float64 GEMM reference) against
the BF16 torch._grouped_mm step on the same weights, and the floor's byte count. The
timings need the GPU."""

from __future__ import annotations

import sys

import pytest

from support import REPO

torch = pytest.importorskip("torch")
import cuda_stubs  # noqa: E402  (needs torch)


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(REPO / "bench"))
    try:
        import bench_moe_layer
    finally:
        sys.path.remove(str(REPO / "bench"))
    return bench_moe_layer


def test_steps_agree_within_fp4_error(bench):
    generator = torch.Generator().manual_seed(0)
    w = bench.Weights(6, 128, 64, "cpu", generator)
    assert w.w1.shape == (6, 128, 64) and w.w2_scale2.shape == (6,)
    x = torch.randn(24, 128, generator=generator).to(torch.bfloat16)
    y = bench.ours_step(x, w, 2)
    try:
        y16 = bench.torch_step(x, w, 2)
    except (RuntimeError, NotImplementedError) as exc:
        pytest.skip(f"torch._grouped_mm on CPU: {exc}")
    assert y.dtype == y16.dtype == torch.bfloat16 and y.shape == x.shape
    diff = ((y.double() - y16.double()).norm() / y16.double().norm()).item()
    assert 0.01 < diff < bench.MAX_REL_DIFF  # W4A4 error: present, and bounded


def test_floor_bytes(bench):
    counts = torch.tensor([0, 3, 4])
    fp4 = bench.floor_bytes(counts, 128, 64, 20, True)
    bf16 = bench.floor_bytes(counts, 128, 64, 20, False)
    weights = 2 * (128 * 128 + 128 * 64)  # two experts hit: gate/up (128, 128), down (128, 64)
    assert fp4 == weights // 2 + 2 * (1024 + 512) + 4 * 20 * 128
    assert bf16 == weights * 2 + 4 * 20 * 128


def test_bench_case_plumbing_on_cpu(bench, monkeypatch):
    """bench_case end to end with torch.cuda's events, graphs, streams and sleep as
    no-ops on CPU tensors: every column filled, the table rendered."""
    cuda_stubs.install(monkeypatch)
    monkeypatch.setattr(bench, "STEPS", 6)
    import bench_moe
    from bench_common import GpuHold  # bench's sys.path entry is gone: already imported

    def gpu_activities(fn):
        """The sync check's count of a step's GPU activities comes from torch.profiler's
        CUDA activity, which a CPU build of torch refuses: the step runs once, as there,
        and the rest of the check runs on the stubs."""
        fn(0)
        return 3

    monkeypatch.setattr(bench_moe, "gpu_activities", gpu_activities)

    generator = torch.Generator().manual_seed(1)
    w = bench.Weights(6, 128, 64, "cpu", generator)
    try:
        row = bench.bench_case("tiny", w, 128, 64, 2, 5, 4e12, GpuHold(), torch.device("cpu"))
    except NotImplementedError as exc:  # torch._grouped_mm on CPU
        pytest.skip(str(exc))
    for key in ("ours_graph_us", "ours_eager_us", "floor_us", "bf16_floor_us", "vs_bf16"):
        assert row[key] > 0, key
    assert row["ours_capture_mode"] == "global" and 1 <= row["experts_hit"] <= 6
    assert ("torch_graph_us" in row) != ("torch_error" in row)
    assert row["ok"], row
    table = bench.table([row, {"config": "tiny", "tokens": 9, "ok": False, "error": "boom"}])
    assert table.count("\n") == 3 and "| tiny | 5 |" in table and "FAILED: boom" in table
