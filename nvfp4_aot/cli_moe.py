"""The MoE side of ``nvfp4-aot verify`` and ``bench``: cases, runs and reports.

A case (:class:`MoeCase`) is E experts of (n x k) weights, ``tokens`` tokens per step
each routed to ``top_k`` experts, in one layout of :mod:`nvfp4_aot.moe`; its routings
are random counts per expert of the kinds in :data:`nvfp4_aot.moe_data.ROUTING_KINDS`,
in turn. Every case gets one :class:`~nvfp4_aot.moe.MoeGemmPlan` and one CUDA graph
captured once: verify checks each routing eagerly and by a replay; bench times graph
replays (GPU) and eager runs (wall and host). :mod:`nvfp4_aot.cli` declares the options
and calls :func:`collect_moe_cases`, then :func:`verify` or :func:`bench`.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass
from functools import partial

import click
import numpy as np

from . import driver, validation
from .blocked import blocked_scale_bytes
from .cli import case_runs, document, emit_json, progress, table, timing_summary
from .device_data import (
    CapturedGraph,
    DeviceMoe,
    check_routing,
    random_alpha,
    random_bytes,
    random_scales,
)
from .errors import Nvfp4Error
from .moe_data import ROUTING_KINDS, MoeProblem, random_counts, routing_array
from .moe_layout import check_moe_problem

# defaults: tokens per step when --tokens is not given, and routings per kind
TOKENS_DEFAULT = {"verify": 64, "bench": 256}
ROUTINGS_PER_KIND = {"verify": 2, "bench": 1}
# verify keeps a float64 copy of every expert's weights on the host; refuse beyond this
VERIFY_HOST_BYTES = 4 << 30
EAGER_BATCH = 20  # eager runs between two waits for the stream


@dataclass(frozen=True)
class MoeCase:
    """One MoE problem: E experts of (n x k) weights, ``tokens`` tokens per step, each
    routed to ``top_k`` experts, in one of the two layouts of :mod:`nvfp4_aot.moe`.

    contiguous: capacity = tokens * top_k rows of A and C; masked: max_m = tokens rows
    per expert (no expert gets a token twice, so tokens is the most it can get).
    """

    experts: int
    n: int
    k: int
    layout: str
    tokens: int
    top_k: int

    @property
    def name(self) -> str:
        return f"E{self.experts}-n{self.n}-k{self.k}-{self.layout}-T{self.tokens}-top{self.top_k}"

    @property
    def capacity(self) -> int:
        return self.tokens * self.top_k if self.layout == "contiguous" else self.tokens

    @property
    def routed(self) -> int:
        """Rows one step routes (before the masked layout clamps each expert to max_m)."""
        return self.tokens * self.top_k


# cases ----------------------------------------------------------------------------------


def collect_moe_cases(command, moe, layouts, tokens, top_k, kinds, routings, shape_given):
    """(MoE cases, routing kinds, routings per case) from the options, checked before any
    GPU work; ``([], ...)`` without --moe (then no MoE option may be given)."""
    if not moe:
        given = [
            name
            for name, value in (
                ("--layout", layouts),
                ("--tokens", tokens),
                ("--top-k", top_k),
                ("--routing", kinds),
                ("--routings", routings),
            )
            if value not in (None, ())
        ]
        if given:
            raise click.UsageError(f"{given[0]} describes a MoE problem: it needs --moe E,N,K")
        return [], (), 0
    if shape_given:
        raise click.UsageError("--moe cannot be combined with --shapes, --groups-json or --shape")
    layouts = tuple(dict.fromkeys(layouts or ("contiguous",)))
    tokens = tuple(dict.fromkeys(tokens or (TOKENS_DEFAULT[command],)))
    top_k = 1 if top_k is None else top_k
    kinds = tuple(dict.fromkeys(kinds or ROUTING_KINDS))
    routings = routings or ROUTINGS_PER_KIND[command] * len(kinds)
    cases = []
    for experts, n, k in moe:
        for layout in layouts:
            for t in tokens:
                case = MoeCase(experts, n, k, layout, t, top_k)
                _check_case(command, case)
                cases.append(case)
    return cases, kinds, routings


def _check_case(command: str, case: MoeCase) -> None:
    experts, n, k = case.experts, case.n, case.k
    try:
        check_moe_problem(experts, n, k, case.layout, case.capacity)
    except Nvfp4Error as exc:
        raise click.BadParameter(f"{case.name}: {exc}", param_hint="--moe") from None
    if case.top_k > experts:
        raise click.BadParameter(
            f"{case.top_k} is more than the {experts} experts of --moe {experts},{n},{k}",
            param_hint="--top-k",
        )
    if case.routed > validation.INT32_MAX:
        raise click.BadParameter(
            f"{case.name}: {case.routed} routed rows do not fit int32", param_hint="--tokens"
        )
    host = 8 * experts * n * k
    if command == "verify" and host > VERIFY_HOST_BYTES:
        raise click.BadParameter(
            f"{case.name}: the float64 reference of the experts' weights needs "
            f"{host / 2**30:.1f} GiB of host memory (at most "
            f"{VERIFY_HOST_BYTES / 2**30:.0f} GiB); verify fewer or smaller "
            "experts (bench has no reference)",
            param_hint="--moe",
        )


def moe_counts(case: MoeCase, kinds, count: int, rng: np.random.Generator) -> list:
    """``count`` routings of ``case``: (kind, tokens per expert), the kinds in turn, each
    step routing ``tokens * top_k`` rows as the kind distributes them (moe_data)."""
    out = []
    for i in range(count):
        kind = kinds[i % len(kinds)]
        counts = random_counts(kind, case.experts, case.routed, rng)
        if case.layout == "masked":
            counts = np.minimum(counts, case.capacity)
        out.append((kind, counts))
    return out


def _touched_bytes(case: MoeCase, counts) -> int:
    """Bytes a routing must move at least: the weights and scales of the experts with
    tokens, the routed rows of A and their scales, and the rows of C written."""
    rows = int(np.sum(counts))
    active = int(np.count_nonzero(counts))
    n, k = case.n, case.k
    return active * (n * k // 2 + blocked_scale_bytes(n, k)) + rows * (k // 2 + k // 16 + 2 * n)


# runs -----------------------------------------------------------------------------------


def _each_plan(
    label, cases, kernels, routings, epilogue, device, seed, artifacts, body
) -> list[dict]:
    """Per case and kernel: one plan (of ``epilogue``) and one stream,
    ``body(case, rng, plan, stream, bar)`` -> one row per routing; the cases' JSON with
    their rows."""
    from .moe import MoeGemmPlan

    results = []
    runs = case_runs(cases, kernels)
    with progress(len(runs) * routings, label) as bar:
        for index, case, kernel in runs:
            rng = np.random.default_rng([seed, index])
            with MoeGemmPlan(case.experts, case.n, case.k, layout=case.layout,
                             capacity=case.capacity, device=device, artifacts=artifacts,
                             kernel=kernel, out_dtype=epilogue.out_dtype,
                             alpha=epilogue.alpha) as plan:  # fmt: skip
                stream = driver.stream_create()
                try:
                    rows = body(case, rng, plan, stream, bar)
                finally:
                    driver.stream_destroy(stream)
                family, variants = plan.family, [v.name for v in plan.layout.variants]
            case_json = dict(asdict(case), case=case.name, capacity=case.capacity)
            results.append(
                dict(case_json, family=family, epilogue=str(epilogue), variants=variants,
                     routings=rows)
            )  # fmt: skip
    return results


def verify(
    cases, kinds, routings, kernels, tol, epilogue, device, seed, artifacts, as_json
) -> None:
    """Each case: one plan, every routing run eagerly and by replaying one CUDA graph
    captured once; every expert compared (times its random alpha, with alpha), every other
    row of C checked for poison."""
    out_dtype = epilogue.out_dtype

    def body(case, rng, plan, stream, bar):
        problem = MoeProblem(case.experts, case.n, case.k, case.layout, case.capacity, rng)
        alpha = random_alpha(case.experts, rng) if epilogue.alpha else None
        steps = [
            (kind, problem.routing(counts))
            for kind, counts in moe_counts(case, kinds, routings, rng)
        ]
        rows = []
        with DeviceMoe.of_problem(plan.layout.operand_bytes(), problem, alpha) as data:
            data.load(steps[0][1].routing, steps[0][1].sfa)
            run = partial(plan.run, *data.operands, stream=stream, alpha=data.alpha)
            with CapturedGraph(stream, run) as graph:
                for i, (kind, routing) in enumerate(steps):
                    data.load(routing.routing, routing.sfa)
                    run()
                    driver.stream_synchronize(stream)
                    eager = check_routing(data, problem, routing, tol, out_dtype, alpha)
                    data.load()
                    graph.launch(stream)
                    driver.stream_synchronize(stream)
                    replayed = check_routing(data, problem, routing, tol, out_dtype, alpha)
                    rows.append(
                        {
                            "routing": i,
                            "kind": kind,
                            "active_experts": int((routing.counts > 0).sum()),
                            "rows": int(routing.counts.sum()),
                            "max_expert_rows": int(routing.counts.max(initial=0)),
                            "eager": eager,
                            "graph": replayed,
                            "ok": eager["ok"] and replayed["ok"],
                        }
                    )
                    bar.update(1)
        return rows

    results = _each_plan(
        "verify", cases, kernels, routings, epilogue, device, seed, artifacts, body
    )
    _verify_report(results, tol, device, seed, as_json)


def _verify_report(results, tol, device, seed, as_json) -> None:
    total = sum(len(r["routings"]) for r in results)
    failed = sum(not s["ok"] for r in results for s in r["routings"])
    if as_json:
        emit_json(
            document(device, seed, results, tol=tol, passed=failed == 0, failed_routings=failed)
        )
    else:

        def error(check):
            text = f"{check['relative_error']:.2e}"
            return text if check["stray_rows"] == 0 else f"{text} +{check['stray_rows']} rows"

        rows = [
            [
                r["case"],
                r["family"],
                s["routing"],
                s["kind"],
                s["active_experts"],
                s["rows"],
                error(s["eager"]),
                error(s["graph"]),
                "ok" if s["ok"] else "FAIL",
            ]
            for r in results
            for s in r["routings"]
        ]
        headers = ["case", "kernel", "routing", "kind", "experts", "rows", "eager err",
                   "graph err", "result"]  # fmt: skip
        click.echo(table(headers, rows))
        click.echo(
            f"{total - failed}/{total} routings within tol {tol:g}, eager and in one CUDA "
            f"graph, no row outside the routed ranges written (device {device}, seed {seed})"
        )
    if failed:
        raise click.ClickException(f"{failed} of {total} routing(s) failed verification")


def _time_graph(graph: CapturedGraph, stream: int, events, warmup: int) -> list[float]:
    """Microseconds of each of ``len(events) - 1`` replays queued back to back, from a
    CUDA event recorded between each two."""
    for _ in range(warmup):
        graph.launch(stream)
    driver.event_record(events[0], stream)
    for event in events[1:]:
        graph.launch(stream)
        driver.event_record(event, stream)
    driver.event_synchronize(events[-1])
    return [driver.event_elapsed_ms(a, b) * 1e3 for a, b in zip(events, events[1:])]


def _time_eager(run, stream: int, repeats: int, warmup: int):
    """(wall µs per run, host µs per ``run()`` call on ``stream``): runs queued from
    Python in batches, each batch timed from its first call until the stream has finished
    it, so a run's time is whichever is longer, its host work or its GPU work."""
    for _ in range(warmup):
        run()
    driver.stream_synchronize(stream)
    clock = time.perf_counter
    walls, host = [], []
    for _ in range(max(3, -(-repeats // EAGER_BATCH))):
        start = clock()
        for _ in range(EAGER_BATCH):
            before = clock()
            run()
            host.append((clock() - before) * 1e6)
        driver.stream_synchronize(stream)
        walls.append((clock() - start) * 1e6 / EAGER_BATCH)
    return walls, host


def bench(
    cases, kinds, routings, kernels, repeats, warmup, epilogue, device, seed, artifacts, as_json
):
    """Each case: one plan and one CUDA graph; per routing, the graph's GPU time and the
    eager wall and host time per run."""

    def body(case, rng, plan, stream, bar):
        steps = moe_counts(case, kinds, routings, rng)
        needs = plan.layout.operand_bytes()
        arrays = {
            "a": random_bytes(needs["a"], rng),
            "b": random_bytes(needs["b"], rng),
            "sfa": random_scales(needs["sfa"], rng),
            "sfb": random_scales(needs["sfb"], rng),
        }
        if epilogue.alpha:
            arrays["alpha"] = np.ones(case.experts, np.float32)
        rows = []
        with DeviceMoe(needs, case.n, arrays) as data:
            del arrays
            run = partial(plan.run, *data.operands, stream=stream, alpha=data.alpha)
            with CapturedGraph(stream, run) as graph:
                events = []
                try:
                    events = [driver.timing_event_create() for _ in range(repeats + 1)]
                    for kind, counts in steps:
                        data.write("routing", routing_array(case.layout, counts))
                        driver.synchronize()
                        replays = _time_graph(graph, stream, events, warmup)
                        walls, host = _time_eager(run, stream, repeats, warmup)
                        rows.append(_bench_row(case, kind, counts, replays, walls, host))
                        bar.update(1)
                finally:
                    driver.stream_synchronize(stream)
                    for event in events:
                        driver.event_destroy(event)
        return rows

    results = _each_plan("bench", cases, kernels, routings, epilogue, device, seed, artifacts, body)
    _bench_report(results, repeats, warmup, device, seed, as_json)


def _bench_row(case: MoeCase, kind: str, counts, graph_us, wall_us, host_us) -> dict:
    timing = timing_summary(graph_us)
    wall, host = statistics.median(wall_us), statistics.median(host_us)
    rows = int(np.sum(counts))
    flops = 2 * rows * case.n * case.k
    moved = _touched_bytes(case, counts)
    median = timing["median_us"]
    return dict(
        kind=kind,
        active_experts=int(np.count_nonzero(counts)),
        rows=rows,
        max_expert_rows=int(np.max(counts, initial=0)),
        **{f"graph_{key}": value for key, value in timing.items()},
        eager_wall_us=wall,
        eager_over_graph=wall / median if median > 0 else None,
        host_us_per_run=host,
        host_p90_us=timing_summary(host_us)["p90_us"],
        tflops=flops / (median * 1e-6) / 1e12 if median > 0 else 0.0,
        gbps=moved / (median * 1e-6) / 1e9 if median > 0 else 0.0,
        flops=flops,
        bytes=moved,
    )


def _bench_report(results, repeats, warmup, device, seed, as_json) -> None:
    if as_json:
        emit_json(document(device, seed, results, repeats=repeats, warmup=warmup))
        return
    headers = ["case", "kernel", "kind", "experts", "rows", "graph us", "p10 us", "p90 us",
               "eager us", "eager/graph", "host us", "TFLOP/s", "GB/s"]  # fmt: skip
    rows = [
        [
            r["case"],
            r["family"],
            s["kind"],
            s["active_experts"],
            s["rows"],
            f"{s['graph_median_us']:.2f}",
            f"{s['graph_p10_us']:.2f}",
            f"{s['graph_p90_us']:.2f}",
            f"{s['eager_wall_us']:.2f}",
            "-" if s["eager_over_graph"] is None else f"{s['eager_over_graph']:.2f}",
            f"{s['host_us_per_run']:.2f}",
            f"{s['tflops']:.1f}",
            f"{s['gbps']:.0f}",
        ]
        for r in results
        for s in r["routings"]
    ]
    click.echo(table(headers, rows))
