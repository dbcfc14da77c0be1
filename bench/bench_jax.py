"""JAX integration benchmark: the FFI call's cost inside jax.jit, and a whole MoE layer,
each against ``jax.lax.ragged_dot`` on BF16 weights (issue #18).

1. Per-call cost. One jitted function makes N grouped GEMMs of a small MoE problem
   (each with its own weights, so XLA merges nothing), N = 1 and 16; per GEMM =
   (t16 - t1) / 15, i.e. what one more call adds to a compiled program: for ours the
   handler's host work (call frame, plan lookup, table, launches) or the GEMM's GPU
   time, whichever is longer; the same for ``ragged_dot`` with the same shapes, and for
   N calls of an empty Python FFI handler (with and without its thread state kept):
   the cost of the mechanism apart from our handler's work, and which thread XLA
   calls handlers on; and for N calls whose handler does only our prologue (frame,
   operands, stream, device, plan key): ours less the plan's run and driver calls. On
   a GPU ours is split further (:func:`run_split`): host time inside the plans' runs,
   waits for a ring slot, and a run's GPU time from events on XLA's stream.
2. Layer time: examples/jax_moe.py's jitted NVFP4 layer against the same layer with
   ``ragged_dot`` on the weights dequantized to BF16, at a few shapes; first-call time
   (compile + plan creation) printed too.

Times are wall time per jit call over ``--repeats`` calls dispatched asynchronously with
one block at the end. XLA_FLAGS is recorded: run it with default flags (command buffers
on) and with ``XLA_FLAGS=--xla_gpu_enable_command_buffer=`` to see what splitting XLA's
command buffers around our call costs. ``--json`` writes the rows.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import numpy as np

REPO = Path(__file__).resolve().parent.parent
LAYERS = [  # (tokens, experts, hidden, ffn, top_k)
    (128, 16, 1024, 512, 2),
    (2048, 16, 1024, 512, 2),
    (1024, 8, 2048, 1024, 2),
    (256, 64, 1024, 256, 6),
]
CALL_SHAPE = (8, 128, 256, 256)  # experts, n, k, tokens: small, so host cost shows


def timed(jax, fn, args, repeats: int) -> tuple[float, float]:
    """(first call incl. compile, steady per-call) in ms."""
    start = time.perf_counter()
    jax.block_until_ready(fn(*args))
    first = time.perf_counter() - start
    jax.block_until_ready(fn(*args))
    start = time.perf_counter()
    for _ in range(repeats):
        out = fn(*args)
    jax.block_until_ready(out)
    return first * 1e3, (time.perf_counter() - start) / repeats * 1e3


def per_call(jax, repeats: int) -> list[dict]:
    import jax.numpy as jnp

    import nvfp4_aot.jax as nj
    from nvfp4_aot.moe_data import MoeProblem

    experts, n, k, tokens = CALL_SHAPE
    rng = np.random.default_rng(0)
    problem = MoeProblem(experts, n, k, "contiguous", tokens, rng)
    routing = problem.routing(np.full(experts, tokens // experts))
    a = jax.device_put(problem.a)
    sfa, offsets = jax.device_put(routing.sfa), jax.device_put(routing.routing)
    sizes = jax.device_put(np.diff(routing.routing).astype(np.int32))
    x = jax.device_put(rng.standard_normal((tokens, k)).astype(np.float32)).astype(jnp.bfloat16)
    rows = []
    for count in (1, 16):
        bs = [
            jax.device_put(problem.b.reshape(experts, n, k // 2) ^ np.uint8(i))
            for i in range(count)
        ]
        sfbs = [jax.device_put(problem.sfb) for _ in range(count)]
        ws = [
            jax.device_put(rng.standard_normal((experts, k, n)).astype(np.float32)).astype(
                jnp.bfloat16
            )
            for _ in range(count)
        ]

        @jax.jit
        def ours(a, sfa, offsets, bs, sfbs):
            return [nj.moe_gemm(a, b, sfa, sfb, offsets) for b, sfb in zip(bs, sfbs)]

        @jax.jit
        def ragged(x, sizes, ws):
            return [jax.lax.ragged_dot(x, w, sizes) for w in ws]

        empties = _empty_calls(
            jax, [jax.device_put(np.full(8, i, np.float32)) for i in range(count)]
        )
        prologue = _prologue_call(jax, (a, sfa, offsets, bs, sfbs), (tokens, n))
        for name, fn, args in (
            ("nvfp4_aot moe_gemm (FFI)", ours, (a, sfa, offsets, bs, sfbs)),
            ("jax.lax.ragged_dot bf16", ragged, (x, sizes, ws)),
            *empties,
            prologue,
        ):
            first, steady = timed(jax, fn, args, repeats)
            rows.append({"part": "per_call", "impl": name, "gemms": count, "first_ms": first,
                         "ms_per_jit_call": steady})  # fmt: skip
        if jax.devices()[0].platform == "gpu":
            split = run_split(jax, ours, (a, sfa, offsets, bs, sfbs), repeats, nj.plans())
            rows.append({"part": "per_call", "impl": SPLIT, "gemms": count, **split})
    rows.append({"part": "per_call", "impl": "empty handler threads", "threads": sorted(_threads)})
    for name in {row["impl"] for row in rows if "ms_per_jit_call" in row}:
        one, many = (r["ms_per_jit_call"] for r in rows if r["impl"] == name)
        rows.append(
            {"part": "per_call", "impl": name, "us_per_extra_gemm": (many - one) / 15 * 1e3}
        )
    return rows


SPLIT = "nvfp4_aot moe_gemm (FFI): its plan runs"
SAMPLED_RUNS = 64  # runs whose GPU time is taken with events


def run_split(jax, fn, args, repeats: int, plans) -> dict:
    """Where ours spends a call past its prologue, over ``repeats`` calls of ``fn``:
    host µs a run inside the plans' ``run`` (table, ring slot, graph launch, events),
    the ring waits a run (the host ``RING_SLOTS`` runs ahead of the GPU waits for the
    oldest: backpressure) and µs waited, and on the GPU (events on XLA's stream around
    the first SAMPLED_RUNS runs) a run's own time and the time from one run's start to
    the next one's within a jit call (a run plus whatever XLA queued between)."""
    from nvfp4_aot import driver

    totals = {"runs": 0, "run_s": 0.0, "waits": 0, "wait_s": 0.0}
    pairs = [(driver.timing_event_create(), driver.timing_event_create())
             for _ in range(SAMPLED_RUNS)]  # fmt: skip
    recorded = []  # (start, end) event pairs, in run order

    def timed_run(run):
        def wrapped(*operands, stream, **options):
            pair = pairs[len(recorded)] if len(recorded) < len(pairs) else None
            if pair:
                driver.event_record(pair[0], stream)
            start = time.perf_counter()
            run(*operands, stream=stream, **options)
            totals["run_s"] += time.perf_counter() - start
            totals["runs"] += 1
            if pair:
                driver.event_record(pair[1], stream)
                recorded.append(pair)

        return wrapped

    def timed_wait(synchronize):
        def wrapped(event):
            start = time.perf_counter()
            synchronize(event)
            totals["wait_s"] += time.perf_counter() - start
            totals["waits"] += 1

        return wrapped

    calls = {id(plan._launcher._calls): plan._launcher._calls for plan in plans}.values()
    for plan in plans:  # instance attributes over the methods, deleted after
        plan.run = timed_run(plan.run)
    for call in calls:
        call.event_synchronize = timed_wait(call.event_synchronize)
    try:
        timed(jax, fn, args, repeats)
    finally:
        for plan in plans:
            del plan.run
        for call in calls:
            del call.event_synchronize
    driver.synchronize()
    own = [driver.event_elapsed_ms(start, end) for start, end in recorded]
    gemms = len(args[3])  # the runs of one jit call
    between = [driver.event_elapsed_ms(recorded[i][0], recorded[i + 1][0])
               for i in range(len(recorded) - 1) if (i + 1) % gemms]  # fmt: skip
    for pair in pairs:
        for event in pair:
            driver.event_destroy(event)
    runs = max(totals["runs"], 1)
    return {
        "host_us_in_run": totals["run_s"] / runs * 1e6,
        "ring_waits_per_run": totals["waits"] / runs,
        "us_waiting_per_run": totals["wait_s"] / runs * 1e6,
        "gpu_us_per_run": statistics.median(own) * 1e3 if own else None,
        "gpu_us_start_to_start": statistics.median(between) * 1e3 if between else None,
    }


_threads: set[str] = set()  # which threads XLA ran the empty handlers on
_empty_handlers: dict[str, object] = {}  # target name -> ctypes handler (kept alive)
_calls: dict[str, int] = {}  # executions of each empty handler (label -> count)


def _register(jax, name: str, platform: str, label: str, execute) -> None:
    """Target ``name`` served by ``execute``, registered once a process (its executions
    counted under ``label``)."""
    from nvfp4_aot.jax import handler

    if name not in _empty_handlers:
        _calls.setdefault(label, 0)
        _empty_handlers[name] = handler.register_target(jax, name, platform, execute)


def _empty_calls(jax, xs, platform: str = "CUDA") -> list[tuple]:
    """(label, jitted function, args) of one call an array of ``xs`` to each of two FFI
    targets whose handlers only read the call frame: one as ctypes leaves the thread,
    one keeping the thread's Python state (``handler.keep_thread_state``, as our targets
    do). What XLA's custom call, ctypes, the GIL and a thread state cost a call, apart
    from our handler's work; the thread that ran them is recorded (the caller's or one of
    XLA's) and the executions counted."""
    import threading

    from nvfp4_aot.jax import handler, xla_ffi

    def empty(keep: bool, label: str):
        def execute(address):
            if keep:
                handler.keep_thread_state()
            frame = xla_ffi.read_frame(address)
            if not xla_ffi.answer_metadata(frame, address, 0):
                main = threading.get_ident() == threading.main_thread().ident
                _threads.add("caller (main)" if main else "another thread")
                _calls[label] += 1

        return execute

    calls = []
    for target, keep in (("nvfp4_bench_empty", False), ("nvfp4_bench_empty_kept", True)):
        label = "empty Python FFI handler" + (", thread state kept" if keep else "")
        name = f"{target}_{platform.lower()}"
        _register(jax, name, platform, label, empty(keep, label))
        call = jax.ffi.ffi_call(name, jax.ShapeDtypeStruct(xs[0].shape, xs[0].dtype))
        calls.append((label, jax.jit(lambda xs, call=call: [call(x) for x in xs]), (xs,)))
    return calls


PROLOGUE = "our handler's prologue only (no plan run)"


def _prologue_call(jax, args, c_shape, platform: str = "CUDA") -> tuple:
    """(label, jitted function, args) making the moe_gemm calls of ``args`` (a, sfa,
    offsets, bs, sfbs as :func:`per_call` passes them) to a target whose handler does
    what ours does before the plan runs (the call frame, the operands, XLA's stream
    (CUDA only: XLA's CPU backend has none), the device, the plan's key) and returns:
    the FFI call's cost less the plan's run and its driver calls."""

    import jax.numpy as jnp

    from nvfp4_aot.jax import handler, xla_ffi

    def execute(address):
        frame = xla_ffi.read_frame(address)
        if xla_ffi.answer_metadata(frame, address, 0):
            return
        layout, ops, alpha, c, _with_out = handler._decode(frame)
        if platform == "CUDA":
            handler.execution_stream(frame)
        device = handler.device_of(frame, ops[1].data)
        handler._plan_key(device, layout, ops, c, alpha is not None)
        _calls[PROLOGUE] += 1

    name = f"nvfp4_bench_prologue_{platform.lower()}"
    _register(jax, name, platform, PROLOGUE, execute)
    call = jax.ffi.ffi_call(name, jax.ShapeDtypeStruct(c_shape, jnp.float16))

    def calls(a, sfa, offsets, bs, sfbs):
        return [call(a, b, sfa, sfb, offsets) for b, sfb in zip(bs, sfbs)]

    return PROLOGUE, jax.jit(calls), args


def layers(jax, repeats: int) -> list[dict]:
    sys.path.insert(0, str(REPO / "examples"))
    import jax_moe

    rows = []
    for tokens, experts, hidden, ffn, top_k in LAYERS:
        rng = np.random.default_rng(tokens + experts)
        weights = jax_moe.Weights(jax, rng, experts, hidden, ffn)
        ours = jax_moe.make_forward(jax, weights, top_k)
        theirs = jax_moe.make_bf16_forward(jax, weights, top_k)
        x = jax.device_put(rng.standard_normal((tokens, hidden)).astype(np.float32))
        bias = jax.device_put(np.zeros(experts, np.float32))
        y, trace = ours(x, bias)
        ok = jax_moe.check(
            weights, y, trace, f"T={tokens} E={experts} h={hidden} f={ffn} k={top_k}"
        )
        shape = {"tokens": tokens, "experts": experts, "hidden": hidden, "ffn": ffn, "top_k": top_k}
        for name, fn in (("nvfp4_aot layer", ours), ("ragged_dot bf16 layer", theirs)):
            first, steady = timed(jax, fn, (x, bias), repeats)
            rows.append({"part": "layer", "impl": name, **shape, "first_ms": first,
                         "ms_per_call": steady, "checked_ok": ok if "nvfp4" in name else None})  # fmt: skip
    return rows


def _print_rows(rows) -> None:
    for row in rows:
        cells = (f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items())
        print("  " + ", ".join(cells), flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=100)
    parser.add_argument("--json", type=Path, help="write the rows here")
    parser.add_argument("--skip-layers", action="store_true")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(REPO))
    import jax

    flags = os.environ.get("XLA_FLAGS", "")
    print(f"jax {jax.__version__}, {jax.devices()[0].device_kind}, XLA_FLAGS={flags!r}", flush=True)
    rows = per_call(jax, args.repeats)
    _print_rows(rows)
    if not args.skip_layers:
        layer_rows = layers(jax, args.repeats)
        _print_rows(layer_rows)
        rows += layer_rows
    from nvfp4_aot.jax import handler

    summary = {"jax": jax.__version__, "device": jax.devices()[0].device_kind,
               "xla_flags": flags, "handler_executions": handler.executions(),
               "plans": [repr(p) for p in handler.plans()], "rows": rows}  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1))
    bad = [r for r in rows if r.get("checked_ok") is False]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
