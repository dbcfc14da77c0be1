"""Session 26 call 5: where our FFI call's host time goes, by function. The jitted
16-GEMM function of bench_jax.py's per-call part runs under cProfile (the handler's
ctypes callbacks run on the calling thread, so they are profiled with it), command
buffers as set by XLA_FLAGS; prints the functions by own time and by cumulative time,
per call of the handler."""

import cProfile
import os
import pstats
import sys
import time
from pathlib import Path

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
ROOT = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import jax  # noqa: E402
import numpy as np  # noqa: E402

import nvfp4_aot.jax as nj  # noqa: E402
from nvfp4_aot.jax import handler  # noqa: E402
from nvfp4_aot.moe_data import MoeProblem  # noqa: E402

experts, n, k, tokens = 8, 128, 256, 256
rng = np.random.default_rng(0)
problem = MoeProblem(experts, n, k, "contiguous", tokens, rng)
routing = problem.routing(np.full(experts, tokens // experts))
a = jax.device_put(problem.a)
sfa, offsets = jax.device_put(routing.sfa), jax.device_put(routing.routing)
bs = [jax.device_put(problem.b.reshape(experts, n, k // 2) ^ np.uint8(i)) for i in range(16)]
sfbs = [jax.device_put(problem.sfb) for _ in range(16)]


@jax.jit
def ours(a, sfa, offsets, bs, sfbs):
    return [nj.moe_gemm(a, b, sfa, sfb, offsets) for b, sfb in zip(bs, sfbs)]


for _ in range(20):
    out = ours(a, sfa, offsets, bs, sfbs)
jax.block_until_ready(out)
repeats = 200
before = handler.executions()
start = time.perf_counter()
for _ in range(repeats):
    out = ours(a, sfa, offsets, bs, sfbs)
jax.block_until_ready(out)
plain = (time.perf_counter() - start) / repeats
calls = handler.executions() - before
print(
    f"XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}: {plain * 1e6:.0f} µs a jit call of 16 "
    f"GEMMs without the profiler ({calls / repeats:.0f} handler calls each)"
)
profile = cProfile.Profile()
before = handler.executions()
profile.enable()
for _ in range(repeats):
    out = ours(a, sfa, offsets, bs, sfbs)
jax.block_until_ready(out)
profile.disable()
calls = handler.executions() - before
print(f"profiled: {calls} handler calls")
stats = pstats.Stats(profile)
stats.sort_stats("tottime").print_stats(30)
stats.sort_stats("cumulative").print_stats(30)
