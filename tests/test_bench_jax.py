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
