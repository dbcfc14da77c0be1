"""#17 probe (session 17): what the routing kernel costs a MoE run in a CUDA graph.
Per row: graph replay of plan.run as bench_decode times it (a new routing before each
replay), and of hand-captured launches of the same eager slot: routing + GEMM, the GEMM
alone (its tables left by the routing kernel), the routing kernel alone. The difference
run - GEMM alone bounds what folding the routing into the GEMM's producer could save."""

import argparse
import statistics
import sys
from pathlib import Path

import torch

root = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(root))
sys.path.insert(0, str(root / "bench"))
from bench_common import GpuHold, time_steps  # noqa: E402
from bench_moe import MoeCase, make_weights  # noqa: E402

ROWS = [
    (64, 1536, 2048, 1),
    (128, 1536, 2048, 1),
    (256, 1536, 2048, 1),
    (64, 2048, 768, 1),
    (128, 2048, 768, 1),
    (256, 2048, 768, 1),
    (128, 2048, 768, 8),
    (256, 2048, 768, 32),
    (128, 1536, 2048, 32),
    (64, 7168, 2048, 1),
]


def graph_of(fn):
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, capture_error_mode="relaxed"):
        fn()
    torch.cuda.synchronize()
    return g


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--passes", type=int, default=2)
    args0 = p.parse_args()
    args = argparse.Namespace(seed=0, kernel=None, pointers=False)
    device = torch.device("cuda", 0)
    hold = GpuHold()
    weights = {}
    print(
        "E n k tokens | family | run (bench) | routing+gemm | gemm alone | routing alone | run - gemm"
    )
    for e, n, k, t in ROWS:
        if (e, n, k) not in weights:
            weights.clear()
            weights[(e, n, k)] = make_weights(e, n, k, device)
        case = MoeCase(e, n, k, t, weights[(e, n, k)], args, device)
        case.router(0)
        case.ours(case.offsets)
        torch.cuda.synchronize()
        launcher = case.plan._launcher
        slot = launcher._last_slot
        specs, params, calls = launcher._launch_specs, launcher._params[slot], launcher._calls

        def launches(which, calls=calls, specs=specs, params=params):  # this row's
            def fn():
                s = torch.cuda.current_stream().cuda_stream
                for i in which:
                    calls.launch(specs[i], s, params[i])

            return fn

        nl = len(specs)
        graphs = {
            "run": case.graph(),
            "both": graph_of(launches(range(nl))),
            "gemm": graph_of(launches(range(1, nl))),
            "routing": graph_of(launches([0])),
        }
        res = {name: [] for name in graphs}
        for _ in range(args0.passes):
            for name, g in graphs.items():
                prep = case.router if name == "run" else (lambda _i: None)
                times, _ = time_steps(prep, lambda _i, g=g: g.replay(), args0.steps, hold)
                res[name].append(statistics.median(times))
        med = {name: statistics.median(v) for name, v in res.items()}
        print(
            f"{e} {n} {k} {t} | {case.plan.family} | {med['run']:.2f} | {med['both']:.2f} | "
            f"{med['gemm']:.2f} | {med['routing']:.2f} | {med['run'] - med['gemm']:.2f}",
            flush=True,
        )
        del case, graphs
        torch.cuda.synchronize()


if __name__ == "__main__":
    main()
