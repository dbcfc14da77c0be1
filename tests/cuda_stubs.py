"""torch.cuda's events, graphs, streams and sleep as no-ops on CPU, so that the GPU
benchmarks' plumbing can run in a CPU test (test_bench_*.py). Needs torch."""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import torch


class Event:
    def __init__(self, enable_timing=False):
        pass

    def record(self, *_args):
        pass

    def elapsed_time(self, _other):
        return 0.01

    def query(self):
        return True

    def synchronize(self):
        pass


class Graph:
    def replay(self):
        pass

    def reset(self):
        pass


@contextlib.contextmanager
def capture(_graph, **_kwargs):
    yield  # the body runs once, eagerly


def install(monkeypatch) -> None:
    """Put the stubs in place for one test (``monkeypatch`` restores torch.cuda)."""
    stream = SimpleNamespace(cuda_stream=0, query=lambda: True, wait_stream=lambda _s: None)
    for name, value in {
        "Event": Event, "CUDAGraph": Graph, "graph": capture, "Stream": lambda: stream,
        "stream": lambda _s: contextlib.nullcontext(), "synchronize": lambda *_a: None,
        "_sleep": lambda _cycles: None, "current_stream": lambda *_a: stream,
        "set_sync_debug_mode": lambda _mode: None,
    }.items():  # fmt: skip
        monkeypatch.setattr(torch.cuda, name, value, raising=False)
