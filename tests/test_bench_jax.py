"""bench/bench_jax.py's empty FFI handlers on JAX's CPU backend (needs jax; skipped
without it): each jitted function makes one call a given array, every call reaches its
handler, and the thread XLA called it on is recorded."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from support import REPO

jax = pytest.importorskip("jax")
sys.path.insert(0, str(REPO / "bench"))
import bench_jax  # noqa: E402


def test_empty_handlers_are_called_once_a_call_and_record_the_thread():
    with jax.default_device(jax.devices("cpu")[0]):
        xs = [jax.device_put(np.full(8, i, np.float32)) for i in range(3)]
        calls = bench_jax._empty_calls(jax, xs, platform="cpu")
        assert [name for name, _, _ in calls] == [
            "empty Python FFI handler",
            "empty Python FFI handler, thread state kept",
        ]
        bench_jax._threads.clear()
        for name, function, args in calls:
            before = bench_jax._calls[name]
            outputs = jax.block_until_ready(function(*args))
            assert [o.shape for o in outputs] == [(8,)] * 3
            assert bench_jax._calls[name] - before == 3, name
        # a program this cheap runs on the caller's thread in XLA's CPU client
        assert bench_jax._threads == {"caller (main)"}


def test_the_prologue_call_reads_moe_gemm_operands():
    """The prologue target takes moe_gemm's operands as per_call passes them and runs
    our handler's prologue to its end once a call (a call it could not read would raise
    before the count)."""
    from nvfp4_aot.moe_data import MoeProblem

    experts, n, k, tokens = 4, 64, 128, 32
    problem = MoeProblem(experts, n, k, "contiguous", tokens, np.random.default_rng(0))
    routing = problem.routing(np.full(experts, tokens // experts))
    with jax.default_device(jax.devices("cpu")[0]):
        put = jax.device_put
        bs = [put(problem.b.reshape(experts, n, k // 2)) for _ in range(2)]
        args = (put(problem.a), put(routing.sfa), put(routing.routing), bs,
                [put(problem.sfb)] * 2)  # fmt: skip
        label, function, args = bench_jax._prologue_call(jax, args, (tokens, n), "cpu")
        before = bench_jax._calls[label]
        outputs = jax.block_until_ready(function(*args))
    assert [o.shape for o in outputs] == [(tokens, n)] * 2
    assert bench_jax._calls[label] - before == 2


class _Plan:
    """What run_split wraps: a plan's run (here a few driver calls on its stream, the
    ring wait of every second run) and its launcher's calls."""

    def __init__(self, calls, fake):
        self._launcher = type("Launcher", (), {"_calls": calls})()
        self._fake = fake
        self.runs = 0

    def run(self, *operands, stream):
        from nvfp4_aot import driver

        self.runs += 1
        if self.runs % 2 == 0:
            self._launcher._calls.event_synchronize(driver.event_create())
        for _ in range(3):
            driver.event_query(driver.event_create())


def test_run_split_times_the_plans_runs_and_ring_waits_and_restores_them(make_fake):
    """Every run is counted with its host time, the ring waits inside them counted, the
    events around them give a run's GPU time and start to start within a jit call (the
    fake clock: a microsecond a driver call), and the wrapped methods are the plans'
    own again afterwards."""
    from nvfp4_aot import driver

    fake = make_fake(capability=(9, 0))
    calls = driver.BindingsCalls()
    plans = [_Plan(calls, fake), _Plan(calls, fake)]

    def fn(_a, _sfa, _offsets, bs):  # a "jit call": a run a b, as XLA calls the handler
        for i in range(len(bs)):
            plans[i % 2].run(0, 1, stream=7)
        return np.zeros(1)

    fake_jax = type("Jax", (), {"block_until_ready": staticmethod(lambda x: x)})
    split = bench_jax.run_split(fake_jax, fn, (None, None, None, [0] * 4), 5, plans)
    runs = (1 + 1 + 5) * 4  # timed(): the first call, one more, then the repeats
    assert sum(p.runs for p in plans) == runs
    assert split["ring_waits_per_run"] == pytest.approx(0.5)
    assert split["host_us_in_run"] > 0 and split["us_waiting_per_run"] > 0
    # the fake clock between a run's two records: its six calls (event_create +
    # event_query, three times), two more with a wait, and the end record itself; start
    # to start one more (the next run's start record)
    assert 7 <= split["gpu_us_per_run"] <= 9
    assert 8 <= split["gpu_us_start_to_start"] <= 10
    assert all("run" not in vars(p) for p in plans)
    assert "event_synchronize" not in vars(calls)
