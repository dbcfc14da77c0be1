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
