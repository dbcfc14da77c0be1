"""Smoke test of the JAX integration on a GPU, printing every stage (issue #18).

Run on the GPU machine from the repo root::

    XLA_PYTHON_CLIENT_PREALLOCATE=false timeout 120 python3 bench/jax_smoke.py

The parent runs three child processes (each with its own timeout, so a hang shows which
stage it reached) and prints their output:

* ``default``     XLA's default flags: command buffers (CUDA graphs) on; our handler is
                  registered without the command-buffer trait, so it runs between them
* ``no-cmdbuf``   XLA_FLAGS=--xla_gpu_enable_command_buffer= (command buffers off)
* ``cmdbuf-trait`` experiment: the handler declares the command-buffer trait, so XLA may
                  capture it; shows whether captured runs stay right

Each child registers the handler, runs one contiguous and one masked MoE GEMM inside
``jax.jit`` against the float64 reference (routed rows), then the same compiled
function with new routings, a bad routing (must raise a JAX error, not hang), and
times calls. ``--child MODE`` runs one child in this process.
"""

from __future__ import annotations

import faulthandler
import functools
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MODES = {
    "default": {},
    "no-cmdbuf": {"XLA_FLAGS": "--xla_gpu_enable_command_buffer="},
    "cmdbuf-trait": {"NVFP4_AOT_SMOKE_TRAIT": "1"},
}
CHILD_TIMEOUT = 36  # three children fit the lead's timeout 120


def stage(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def child(mode: str) -> int:
    faulthandler.enable()  # a crash inside the handler prints every thread's stack
    faulthandler.dump_traceback_later(CHILD_TIMEOUT - 3, exit=False)  # a hang shows where
    stage(
        f"child {mode}: python {sys.version.split()[0]}, XLA_FLAGS={os.environ.get('XLA_FLAGS')!r}"
    )
    import numpy as np

    stage("importing jax")
    import jax
    import jax.numpy as jnp

    stage(f"jax {jax.__version__}, backend {jax.default_backend()}, devices {jax.devices()}")
    dev = jax.devices()[0]
    stage(
        f"device 0: {dev.device_kind}, local_hardware_id {getattr(dev, 'local_hardware_id', '?')}"
    )

    import nvfp4_aot.jax as nj
    from nvfp4_aot.jax import handler
    from nvfp4_aot.moe_data import MoeProblem, random_counts

    trait = os.environ.get("NVFP4_AOT_SMOKE_TRAIT") == "1"
    stage(f"registering the FFI target {nj.TARGET} (command-buffer trait: {trait})")
    nj.register(command_buffer=trait)
    stage("registered")

    failures = 0
    rng = np.random.default_rng(1)
    for layout, experts, n, k, capacity in (
        ("contiguous", 8, 256, 512, 1024),
        ("masked", 8, 256, 512, 128),
    ):
        stage(f"{layout}: E={experts} n={n} k={k} capacity={capacity}: building operands")
        p = MoeProblem(experts, n, k, layout, capacity, rng)
        a = p.a if layout == "contiguous" else p.a.reshape(experts, capacity, k // 2)
        b = jax.device_put(p.b.reshape(experts, n, k // 2))
        a = jax.device_put(a)
        sfb = jax.device_put(p.sfb)
        mask = jax.device_put(np.zeros(1, np.int32))

        @jax.jit
        def step(a, b, sfa, sfb, routing, mask, layout=layout):
            # fusions before and after the call, so that XLA has command buffers to form
            routing = routing + mask[0]
            c = nj.moe_gemm(a, b, sfa, sfb, routing, layout=layout)
            c32 = c.astype(jnp.float32)
            return c, jnp.sum(jnp.where(jnp.isfinite(c32), c32, 0) * 0.5, axis=-1)

        if trait and jax.default_backend() == "gpu":  # no plan can be made during a capture
            r0 = p.routing(np.zeros(experts, np.int64))
            stage(
                f"{layout}: preparing the plan ahead: {nj.prepare(a, b, r0.sfa, sfb, r0.routing, layout=layout)}"
            )

        @functools.partial(jax.jit, donate_argnums=5)
        def step_out(a, b, sfa, sfb, routing, out, layout=layout):
            return nj.moe_gemm(a, b, sfa, sfb, routing, layout=layout, out=out)

        total = capacity if layout == "contiguous" else experts * capacity
        kinds = ("uniform", "skewed", "one_expert", "empty", "sparse", "uniform")
        for i, kind in enumerate(kinds):
            counts = random_counts(kind, experts, total, rng)
            if layout == "masked":
                counts = np.minimum(counts, capacity)
            r = p.routing(counts)
            stage(f"{layout} call {i} ({kind}, {int(np.sum(r.counts))} rows): running")
            try:
                c, _sums = step(a, b, jax.device_put(r.sfa), sfb, jax.device_put(r.routing), mask)
                c = np.asarray(jax.block_until_ready(c)).reshape(-1, n).astype(np.float64)
            except Exception:  # noqa: BLE001 - print and go on: the smoke shows every stage
                failures += 1
                stage(f"{layout} call {i}: FAILED\n{traceback.format_exc()}")
                continue
            worst, unrouted = 0.0, np.ones(c.shape[0], bool)
            for e in range(experts):
                start, stop = r.row_ranges[e]
                unrouted[start:stop] = False
                if stop > start:
                    ref = p.reference(r, e)
                    scale = max(float(np.abs(ref).max()), 1e-30)
                    worst = max(worst, float(np.abs(c[start:stop] - ref).max()) / scale)
            poison = (
                np.full(c.shape, 0xFFFF, np.uint16)
                .view(np.float16)
                .reshape((-1, capacity, n) if layout == "masked" else (-1, n))
            )
            try:
                kept = step_out(
                    a,
                    b,
                    jax.device_put(r.sfa),
                    sfb,
                    jax.device_put(r.routing),
                    jax.device_put(poison),
                )
                kept = np.asarray(kept).reshape(-1, n)
                same_routed = bool(np.array_equal(kept[~unrouted], c[~unrouted].astype(np.float16)))
                poison_kept = bool((kept[unrouted].view(np.uint16) == 0xFFFF).all())
            except Exception:  # noqa: BLE001
                stage(f"{layout} call {i} with out=: FAILED\n{traceback.format_exc()}")
                same_routed = poison_kept = False
            ok = worst <= 1e-3 and same_routed and poison_kept
            failures += not ok
            stage(
                f"{layout} call {i} with out= (poisoned, donated): routed rows as without: "
                f"{same_routed}; unrouted rows still poison: {poison_kept}"
            )
            rows = c[unrouted]
            stage(
                f"{layout} call {i}: worst relative error {worst:.2e} ({'ok' if ok else 'WRONG'}); "
                f"{int(unrouted.sum())} unrouted rows: {int(np.isnan(rows).any(axis=1).sum())} "
                f"with NaN, {int((rows == 0).all(axis=1).sum())} all zero"
            )
        stage(
            f"{layout}: handler executions so far {handler.executions()}, XLA FFI API "
            f"{handler.api_info()}, plans {handler.plans()}"
        )

        stage(f"{layout}: a bad routing must raise a JAX error")
        bad = (
            np.arange(experts + 1, dtype=np.int32)[::-1].copy() if layout == "contiguous" else None
        )
        if bad is not None:
            try:
                c, _ = step(a, b, jax.device_put(r.sfa), sfb, jax.device_put(bad), mask)
                jax.block_until_ready(c)
                stage(f"{layout}: bad routing ran (the GPU kernels clamp it; no error expected)")
            except Exception as exc:  # noqa: BLE001
                stage(f"{layout}: bad routing raised {type(exc).__name__}: {str(exc)[:200]}")

        stage(f"{layout}: timing 200 calls of the jitted step")
        sfa_d, routing_d = jax.device_put(r.sfa), jax.device_put(r.routing)
        jax.block_until_ready(step(a, b, sfa_d, sfb, routing_d, mask))
        start = time.perf_counter()
        for _ in range(200):
            out = step(a, b, sfa_d, sfb, routing_d, mask)
        jax.block_until_ready(out)
        stage(f"{layout}: {(time.perf_counter() - start) / 200 * 1e6:.1f} us per call (host+GPU)")

    stage("trace-time error: wrong routing shape")
    try:
        nj.moe_gemm(a, b, sfb, sfb, jnp.zeros(3, jnp.int32), layout="masked")
        stage("no error: WRONG")
        failures += 1
    except Exception as exc:  # noqa: BLE001
        stage(f"raised {type(exc).__name__}: {exc}")

    if trait:
        stage(f"captured executions (handler called during capture): {handler.captured_calls()}")
    stage(f"child {mode}: {'PASS' if failures == 0 else f'{failures} FAILURES'}")
    faulthandler.cancel_dump_traceback_later()
    return 1 if failures else 0


KEY_LINES = (
    "jax ",
    "XLA FFI API",
    "us per call",
    "FAILED",
    "WRONG",
    "Error",
    "raised",
    "captured",
    "PASS",
    "FAILURES",
    "poison: False",
    "Fatal",
    "Timeout",
)


def parent() -> int:
    codes, digests = {}, {}
    for mode, extra in MODES.items():
        print(f"\n===== {mode} {extra} =====", flush=True)
        env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1", **extra)
        env.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
        try:
            result = subprocess.run(
                [sys.executable, __file__, "--child", mode], env=env, cwd=REPO,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                timeout=CHILD_TIMEOUT,
            )  # fmt: skip
            output, codes[mode] = result.stdout, result.returncode
        except subprocess.TimeoutExpired as exc:
            output = exc.stdout if isinstance(exc.stdout, str) else (exc.stdout or b"").decode()
            codes[mode] = "TIMEOUT"
        print(output.rstrip(), flush=True)
        print(f"===== {mode}: exit {codes[mode]}", flush=True)
        digests[mode] = [line for line in output.splitlines() if any(k in line for k in KEY_LINES)]
    print("\n===== digest (the lines that matter, per mode)", flush=True)
    for mode, lines in digests.items():
        print(f"--- {mode}: exit {codes[mode]}")
        print("\n".join(lines[:40]), flush=True)
    print("\nsummary:", codes, flush=True)
    return 0 if all(code == 0 for code in codes.values()) else 1


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        sys.path.insert(0, str(REPO))
        sys.exit(child(sys.argv[2]))
    sys.exit(parent())
