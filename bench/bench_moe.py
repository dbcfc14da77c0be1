#!/usr/bin/env python3
"""MoE benchmark on the GPU: a decode/prefill loop with a new routing every step.

Each step routes on the GPU with torch, with no host sync: router logits = h @ W + bias
(h from a pool of random hidden states, bias from a pool with uniform and Zipf-skewed
experts, so consecutive steps route differently), top-8 expert ids, tokens per expert
(scatter_add) and offsets (cumsum, int32) into one device buffer. Then one MoE grouped
GEMM in the contiguous layout, capacity = tokens * top_k rows:

  ours        nvfp4_aot.moe.MoeGemmPlan.run: FP4 x FP4 with E4M3 block scales -> FP16,
              the routing read on the GPU by its setup kernel
  grouped_mm  torch._grouped_mm(A, W^T, offs=offsets[1:]) with the same device offsets, on
              BF16 weights dequantized from ours ahead of time and BF16 activations

Columns (medians over the steps; configurations (E=128, n=1536, k=2048) and (E=32, n=4096,
k=7168), top-8, tokens 1 .. 4096; activations and weights are random valid codes):

  ours graph    GPU µs of ours replayed from one CUDA graph captured once, an event pair
                around each replay; the next step's router runs between replays, outside
                the pair (the GEMM's own GPU time, routing setup kernel included)
  ours eager    wall µs per step of ours launched from Python, runs queued back to back
                until the GPU has finished them, all host work included; each step reads
                another routing made on the GPU (a pool of 8 router outputs)
  eager/graph   ours eager / ours graph (target <= 1.10)
  host/run      µs of the run() call alone (target <= 15)
  step eager    wall µs per step of router + ours, eager (torch's host work included)
  torch step    wall µs per step of router + torch._grouped_mm, eager
  grouped_mm    GPU µs of torch._grouped_mm replayed from a graph, timed as ours graph
  mem floor     bytes a step must move (weights and scales of the experts with tokens,
                the routed rows of A and their scales, the rows of C) / copy bandwidth
                measured in this run
  dense bf16    one cuBLAS BF16 GEMM of the same FLOPs, (tokens * top_k) x n x k, from a
                graph: the tensor cores with no grouping and no FP4 decode
  syncs         "0" when router + ours ran eagerly under
                torch.cuda.set_sync_debug_mode("error") behind a 250 ms GPU hold and the
                host queued every step before the hold ended (so no call, torch's or
                ours, waited for the GPU)
  rel err       ours against torch dequantized math (float32) for up to 4 experts of one
                routing: the correctness spot check of each configuration

Event pairs around single replays are queued behind a GPU hold (torch.cuda._sleep) longer
than the host needs to queue them, so they time the GPU, not waits for the host.

    PYTHONPATH=. python bench/bench_moe.py [--quick] [--json out.json] [--kernel FAMILY]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import (  # noqa: E402
    GpuHold,
    blocked_bytes,
    copy_bandwidth,
    dequantize,
    finite_or_inf,
    random_scales,
    time_graph,
    time_graph_steps,
    time_steps,
)

from nvfp4_aot.moe import MoeGemmPlan  # noqa: E402
from nvfp4_aot.moe_layout import scale_offsets  # noqa: E402

CONFIGS = {  # name: (experts, n, k)
    "E128-n1536-k2048": (128, 1536, 2048),
    "E32-n4096-k7168": (32, 4096, 7168),
}
TOKENS = (1, 16, 64, 256, 1024, 4096)
TOP_K = 8
ROUTER_DIM = 128
HIDDEN_POOL = 16  # hidden states x bias rows: HIDDEN_POOL ** 2 different routings
EAGER_POOL = 8  # routings ours eager cycles through (<= the plan's ring slots)
SAMPLE = 64  # routings read back to the host for the floor and the experts hit
STEP_BUDGET_MS = 1500  # GPU time one measurement may take; fewer steps beyond it
# 250 ms: a slow host's 16 eager layer steps took 56 ms (session 17 call 22)
SYNC_STEPS, SYNC_HOLD_MS = 16, 250.0
# GPU activities (kernels, copies) the driver queues behind a held GPU before a launch
# blocks the host, whoever launches: torch's own BF16 layer blocks with 1,344 queued and
# ours with 1,296, neither with 944-992 (session 17 call 21, session 18 call 1); the sync
# check queues fewer steps where a step launches more, so that a full queue does not
# read as a wait of ours
LAUNCH_QUEUE = 900


class Router:
    """Router -> top-k expert ids -> tokens per expert -> int32 offsets[E + 1], all on the
    GPU into fixed buffers (five kernels, no host sync). Step i uses hidden state
    i % HIDDEN_POOL and bias row (i // HIDDEN_POOL) % HIDDEN_POOL; half the bias rows are
    zero (uniform routing), half Zipf-like (skewed, experts permuted per row)."""

    def __init__(self, experts: int, tokens: int, device, generator: torch.Generator):
        self.hidden = torch.randn(
            HIDDEN_POOL, tokens, ROUTER_DIM, device=device, generator=generator
        )
        self.weight = torch.randn(ROUTER_DIM, experts, device=device, generator=generator)
        self.weight /= ROUTER_DIM**0.5
        rank = torch.arange(1, experts + 1, device=device, dtype=torch.float32)
        bias = torch.zeros(HIDDEN_POOL, experts, device=device)
        for row in range(1, HIDDEN_POOL, 2):
            strength = 0.5 + row / HIDDEN_POOL  # 1.2-ish Zipf exponents, varying
            order = torch.randperm(experts, device=device, generator=generator)
            bias[row] = -strength * torch.log(rank)[order]
        self.bias = bias
        self.logits = torch.empty(tokens, experts, device=device)
        self.values = torch.empty(tokens, TOP_K, device=device)
        self.ids = torch.empty(tokens, TOP_K, dtype=torch.int64, device=device)
        self.ones = torch.ones(tokens * TOP_K, dtype=torch.int32, device=device)
        self.counts = torch.zeros(experts, dtype=torch.int32, device=device)
        self.offsets = torch.zeros(experts + 1, dtype=torch.int32, device=device)
        self.ends = self.offsets[1:]  # torch._grouped_mm's offs: cumulative row ends

    def __call__(self, step: int) -> None:
        h = self.hidden[step % HIDDEN_POOL]
        bias = self.bias[(step // HIDDEN_POOL) % HIDDEN_POOL]
        torch.addmm(bias, h, self.weight, out=self.logits)
        torch.topk(self.logits, TOP_K, dim=-1, sorted=False, out=(self.values, self.ids))
        self.counts.zero_()
        self.counts.scatter_add_(0, self.ids.view(-1), self.ones)
        torch.cumsum(self.counts, 0, dtype=torch.int32, out=self.ends)


def eager_wall(fn, steps: int, batches: int = 4):
    """(wall µs per step of each batch, host µs of each fn call): fn(i) queued back to back
    from Python, each batch timed from its first call until the GPU has finished it."""
    for i in range(3):
        fn(i)
    torch.cuda.synchronize()
    per = max(1, steps // batches)
    clock = time.perf_counter
    walls, host, i = [], [], 0
    for _ in range(batches):
        start = clock()
        for _ in range(per):
            before = clock()
            fn(i)
            host.append((clock() - before) * 1e6)
            i += 1
        torch.cuda.synchronize()
        walls.append((clock() - start) * 1e6 / per)
    return walls, host


def gpu_activities(fn) -> int:
    """Kernels and copies one ``fn(0)`` puts on the GPU (torch.profiler: CUPTI sees the
    driver-API launches of ours too)."""
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn(0)
        torch.cuda.synchronize()
    return sum(e.device_type == torch.autograd.DeviceType.CUDA for e in prof.events())


def sync_check(fn, hold: GpuHold) -> dict:
    """Queue SYNC_STEPS steps (fewer if they would launch more than LAUNCH_QUEUE GPU
    activities, at least 2) behind a GPU hold under torch's sync debug mode "error": a
    torch sync raises; a wait in any other call (ours) makes the host outlast the hold."""
    activities = gpu_activities(fn)
    steps = max(2, min(SYNC_STEPS, LAUNCH_QUEUE // max(activities, 1)))
    torch.cuda.synchronize()
    hold(SYNC_HOLD_MS)
    error = None
    start = time.perf_counter()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for i in range(steps):
            fn(i)
    except RuntimeError as exc:
        error = str(exc).splitlines()[0][:160]
    finally:
        torch.cuda.set_sync_debug_mode("default")
    host_ms = (time.perf_counter() - start) * 1e3
    pending = not torch.cuda.current_stream().query()  # still held: nothing waited
    torch.cuda.synchronize()
    ok = error is None and pending and host_ms < SYNC_HOLD_MS
    return {"ok": ok, "torch_error": error, "host_ms": host_ms, "gpu_still_held": pending,
            "steps": steps, "activities_per_step": activities}  # fmt: skip


def spot_check(plan_run, a, sfa, weights16, routing: torch.Tensor, c, k: int) -> dict:
    """Ours for one routing against float32 math on the dequantized operands, for the two
    largest experts and up to two more with tokens."""
    plan_run(routing)
    torch.cuda.synchronize()
    offsets = routing.cpu().numpy().astype(np.int64)
    counts = np.diff(offsets)
    first_rows = scale_offsets(counts)
    active = [int(e) for e in np.argsort(-counts, kind="stable") if counts[e] > 0]
    chosen = active[:2] + active[2:][-2:]
    worst, experts = 0.0, []
    for e in chosen:
        start, stop = int(offsets[e]), int(offsets[e + 1])
        m = stop - start
        a16 = dequantize(a[start:stop], sfa, m, k, first_row=first_rows[e])
        ref = a16.float() @ weights16[e].float().T
        out = c[start:stop].float()
        error = ((out - ref).norm() / ref.norm()).item()
        worst = max(worst, finite_or_inf(error))
        experts.append({"expert": e, "rows": m, "relative_error": error})
    return {"relative_error": worst, "experts": experts}


def touched_bytes(counts: np.ndarray, n: int, k: int) -> int:
    rows, active = int(counts.sum()), int(np.count_nonzero(counts))
    return active * (n * k // 2 + blocked_bytes(n, k)) + rows * (k // 2 + k // 16 + 2 * n)


def add_case_options(parser) -> None:
    """The options :class:`MoeCase` reads (``args.kernel``, ``args.routing_kernel``,
    ``args.pointers``; bench_decode.py takes them too)."""
    parser.add_argument("--kernel", help="force this GEMM kernel family")
    parser.add_argument("--routing-kernel", action="store_true",
                        help="run the routing kernel before the GEMM (MoeGemmPlan(routed=False)), "
                             "not the family's routed GEMM, which routes itself")  # fmt: skip
    parser.add_argument("--pointers", action="store_true",
                        help="pass int device pointers to run() instead of torch tensors")  # fmt: skip


class MoeCase:
    """One benchmark configuration's plan and device data (shared with bench_decode.py):
    ours (contiguous, capacity = tokens * TOP_K) and the BF16 operands of the baselines,
    the router, and SAMPLE routings made on the GPU (read back once for the statistics;
    the first EAGER_POOL kept for ours eager). ``args.pointers``: hand ours int pointers
    instead of tensors."""

    def __init__(self, experts, n, k, tokens, weights, args, device):
        b, sfb, self.weights16 = weights
        self.rows = rows = tokens * TOP_K
        generator = torch.Generator(device=device).manual_seed(args.seed * 1000 + tokens)
        self.plan = MoeGemmPlan(experts, n, k, layout="contiguous", capacity=rows,
                                device=device.index or 0, kernel=args.kernel,
                                routed=False if args.routing_kernel else None)  # fmt: skip
        needs = self.plan.layout.operand_bytes()
        self.a = torch.randint(0, 256, (rows, k // 2), dtype=torch.uint8, device=device)
        self.sfa = random_scales(needs["sfa"], device)
        self.c = torch.empty(rows, n, dtype=torch.float16, device=device)
        self.tensors = (self.a, b, self.c, self.sfa, sfb)
        self.a16 = torch.randn(rows, k, dtype=torch.bfloat16, device=device, generator=generator)
        self.weights16_t = self.weights16.transpose(-2, -1)  # (E, k, n), torch._grouped_mm's
        self.router = Router(experts, tokens, device, generator)
        self.stream = torch.cuda.current_stream().cuda_stream
        self.operand = (lambda t: t.data_ptr()) if args.pointers else (lambda t: t)
        self.fixed = [self.operand(t) for t in self.tensors]
        self.offsets = self.operand(self.router.offsets)
        self.sample = torch.empty(SAMPLE, experts + 1, dtype=torch.int32, device=device)
        for i in range(SAMPLE):
            self.router(i)
            self.sample[i].copy_(self.router.offsets)
        self.pool = [self.operand(self.sample[i]) for i in range(EAGER_POOL)]
        self.counts = np.diff(self.sample.cpu().numpy().astype(np.int64), axis=1)
        assert (self.counts.sum(axis=1) == rows).all(), "a routing lost rows"

    def ours(self, routing, stream=None) -> None:
        self.plan.run(*self.fixed, routing, stream=self.stream if stream is None else stream)

    def check(self, k: int) -> dict:
        """The spot check of one sampled routing against dequantized torch math."""
        return spot_check(
            lambda r: self.ours(self.operand(r)), self.a, self.sfa, self.weights16,
            self.sample[0], self.c, k,
        )  # fmt: skip

    def steps(self, wanted: int, least: int, budget_ms: float = STEP_BUDGET_MS) -> int:
        """How many steps fit ``budget_ms`` of eager runs (at least ``least``)."""
        self.ours(self.offsets)
        torch.cuda.synchronize()
        start = time.perf_counter()
        for i in range(5):
            self.ours(self.pool[i % EAGER_POOL])
        torch.cuda.synchronize()
        per_ms = (time.perf_counter() - start) * 1e3 / 5
        return max(least, min(wanted, int(budget_ms / max(per_ms, 1e-3))))

    def graph(self) -> torch.cuda.CUDAGraph:
        """Ours captured once (a new routing goes into the same offsets before replays)."""
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, capture_error_mode="relaxed"):  # as test_moe_gpu.py
            self.ours(self.offsets, stream=torch.cuda.current_stream().cuda_stream)
        torch.cuda.synchronize()
        return graph

    def grouped_mm(self) -> None:
        torch._grouped_mm(self.a16, self.weights16_t, offs=self.router.ends)

    def time_grouped_mm_graph(self, row: dict, steps: int, hold) -> None:
        """``torch._grouped_mm`` captured once and replayed after new routings: its median
        µs (or its error) and the starved chunks into ``row``."""
        try:
            times, starved = time_graph_steps(self.grouped_mm, self.router, steps, hold)
            row["grouped_mm_graph_us"] = statistics.median(times)
            row["starved_chunks"] += starved
        except RuntimeError as exc:
            row["grouped_mm_error"] = str(exc).splitlines()[0][:160]

    def dense_bf16_us(self, n: int, repeats: int) -> float:
        """Median µs of dense cuBLAS BF16 with the same FLOPs: (rows, k) x (k, n)."""
        out = torch.empty(self.rows, n, dtype=torch.bfloat16, device=self.a16.device)
        times = time_graph(
            lambda _: torch.matmul(self.a16, self.weights16[0].T, out=out), [None], repeats
        )
        return statistics.median(times) * 1e3


def bench_case(name, experts, n, k, tokens, weights, copy_bps, hold, args, device) -> dict:
    case = MoeCase(experts, n, k, tokens, weights, args, device)
    plan, rows, router, counts = case.plan, case.rows, case.router, case.counts
    ours, offsets, pool_operands = case.ours, case.offsets, case.pool
    row = {"config": name, "experts": experts, "n": n, "k": k, "tokens": tokens, "rows": rows,
           "family": plan.family, "gemm_launches": len(plan.layout.chunks)}  # fmt: skip
    row["experts_hit"] = float(np.median(np.count_nonzero(counts, axis=1)))
    row["max_expert_rows"] = int(counts.max())
    row["mem_floor_us"] = (
        statistics.median(touched_bytes(c_, n, k) for c_ in counts) / copy_bps * 1e6
    )

    row["check"] = case.check(k)
    steps = row["steps"] = case.steps(args.steps, 20)

    # ours: one graph, captured once; a new routing before every replay
    graph = case.graph()
    times, starved = time_steps(router, lambda _i: graph.replay(), steps, hold)
    row["ours_graph_us"] = statistics.median(times)
    row["ours_graph_p10_us"], row["ours_graph_p90_us"] = _deciles(times)
    row["starved_chunks"] = starved

    walls, host = eager_wall(lambda i: ours(pool_operands[i % EAGER_POOL]), steps)
    row["ours_eager_us"] = statistics.median(walls)
    row["eager_over_graph"] = row["ours_eager_us"] / row["ours_graph_us"]
    row["host_us_per_run"] = statistics.median(host)
    row["host_p90_us"] = _deciles(host)[1]

    def step_ours(i):
        router(i)
        ours(offsets)

    def step_torch(i):
        router(i)
        case.grouped_mm()

    row["step_eager_us"] = statistics.median(eager_wall(step_ours, steps)[0])
    row["syncs"] = sync_check(step_ours, hold)
    try:
        row["torch_step_eager_us"] = statistics.median(eager_wall(step_torch, steps)[0])
    except RuntimeError as exc:
        row["grouped_mm_error"] = str(exc).splitlines()[0][:160]
    else:
        case.time_grouped_mm_graph(row, steps, hold)
    row["dense_bf16_us"] = case.dense_bf16_us(n, max(50, steps))
    row["flops"] = 2 * rows * n * k
    row["ours_tflops"] = row["flops"] / (row["ours_graph_us"] * 1e-6) / 1e12
    plan.close()
    torch.cuda.synchronize()
    return row


def _deciles(values) -> tuple[float, float]:
    if len(values) < 2:
        return values[0], values[0]
    deciles = statistics.quantiles(values, n=10, method="inclusive")
    return deciles[0], deciles[-1]


def make_weights(experts: int, n: int, k: int, device):
    """B (E, n, k/2) random FP4 codes, SFB blocked per expert, and B dequantized to BF16."""
    b = torch.randint(0, 256, (experts, n, k // 2), dtype=torch.uint8, device=device)
    per_expert = blocked_bytes(n, k)
    sfb = random_scales(experts * per_expert, device)
    weights16 = torch.empty(experts, n, k, dtype=torch.bfloat16, device=device)
    for e in range(experts):
        weights16[e] = dequantize(b[e], sfb[e * per_expert : (e + 1) * per_expert], n, k)
    return b, sfb, weights16


def markdown(rows) -> str:
    headers = ["config", "tokens", "experts hit", "ours graph µs", "ours eager µs",
               "eager/graph", "host µs/run", "step eager µs", "torch step µs",
               "grouped_mm graph µs", "mem floor µs", "dense bf16 µs", "syncs", "rel err"]  # fmt: skip
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for r in rows:
        grouped = (f"{r['grouped_mm_graph_us']:.1f}" if "grouped_mm_graph_us" in r
                   else "error")  # fmt: skip
        torch_step = f"{r['torch_step_eager_us']:.1f}" if "torch_step_eager_us" in r else "error"
        syncs = "0" if r["syncs"]["ok"] else (r["syncs"]["torch_error"] or "host waited")
        cells = [r["config"], r["tokens"], f"{r['experts_hit']:.0f}",
                 f"{r['ours_graph_us']:.1f}", f"{r['ours_eager_us']:.1f}",
                 f"{r['eager_over_graph']:.2f}", f"{r['host_us_per_run']:.1f}",
                 f"{r['step_eager_us']:.1f}", torch_step, grouped,
                 f"{r['mem_floor_us']:.1f}", f"{r['dense_bf16_us']:.1f}", syncs,
                 f"{r['check']['relative_error']:.1e}"]  # fmt: skip
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", action="append", choices=sorted(CONFIGS),
                        help="configuration (repeatable; default both)")  # fmt: skip
    parser.add_argument("--tokens", type=int, action="append",
                        help=f"tokens per step (repeatable; default {TOKENS})")  # fmt: skip
    parser.add_argument("--steps", type=int, default=200, help="steps per measurement")
    parser.add_argument("--quick", action="store_true", help="40 steps per measurement")
    add_case_options(parser)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    if args.quick:
        args.steps = min(args.steps, 40)
    device = torch.device("cuda", 0)
    torch.manual_seed(args.seed)
    stream = torch.cuda.Stream(device)
    rows, began = [], time.perf_counter()
    with torch.cuda.stream(stream):
        copy_bps = copy_bandwidth(device)
        torch.cuda.empty_cache()
        hold = GpuHold()
        name = torch.cuda.get_device_name(device)
        print(f"# {name}: copy {copy_bps / 1e12:.2f} TB/s, torch {torch.__version__}, "
              f"top-{TOP_K}, contiguous layout, up to {args.steps} steps per measurement",
              flush=True)  # fmt: skip
        for config in args.config or list(CONFIGS):
            experts, n, k = CONFIGS[config]
            weights = make_weights(experts, n, k, device)
            for tokens in args.tokens or TOKENS:
                row = bench_case(config, experts, n, k, tokens, weights, copy_bps, hold,
                                 args, device)  # fmt: skip
                rows.append(row)
                print(f"{config} T={tokens}: ours graph {row['ours_graph_us']:.1f} µs, eager "
                      f"{row['ours_eager_us']:.1f} µs ({row['eager_over_graph']:.2f}x), host "
                      f"{row['host_us_per_run']:.1f} µs/run, rel err "
                      f"{row['check']['relative_error']:.1e}", file=sys.stderr, flush=True)  # fmt: skip
            del weights
            torch.cuda.empty_cache()
    print(markdown(rows))
    failed = [r for r in rows if not r["check"]["relative_error"] <= 1e-3]
    unsynced = [r for r in rows if not r["syncs"]["ok"]]
    print(f"\n{len(rows)} cases in {time.perf_counter() - began:.0f} s; "
          f"eager/graph <= 1.10: {sum(r['eager_over_graph'] <= 1.10 for r in rows)}/{len(rows)}; "
          f"host <= 15 µs/run: {sum(r['host_us_per_run'] <= 15 for r in rows)}/{len(rows)}; "
          f"zero host syncs: {len(rows) - len(unsynced)}/{len(rows)}; "
          f"spot checks within 1e-3: {len(rows) - len(failed)}/{len(rows)}")  # fmt: skip
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "device": name,
                    "torch": torch.__version__,
                    "copy_Bps": copy_bps,
                    "top_k": TOP_K,
                    "steps": args.steps,
                    "rows": rows,
                },
                indent=1,
            )  # fmt: skip
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
