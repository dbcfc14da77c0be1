"""What alpha and BF16 output cost: every epilogue against the original (FP16, no alpha).

For each benchmark shape (tests/data/shapes.json "benchmarks") and each sm_90a kernel
family, one plan per epilogue (FP16 / BF16, without / with a per-group alpha) runs the
same operands, rotating over four input sets; each plan's runs are captured once into a
CUDA graph of 8 runs. The graphs are then replayed round-robin, 15 rounds of 20 replays
each, so drift on the GPU (clocks, temperature) hits every epilogue alike. Printed per
case: the median GPU time of each epilogue, its ratio to the original (the median of the
per-round ratios of medians, which cancels drift between rounds), and the floors
beside it: the operands' bytes at the copy bandwidth measured in this run, and a dense
cuBLAS BF16 matmul of the same FLOPs.

    python3 bench/bench_epilogue.py [--json out.json] [--family F ...] [--rounds N]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_common import measure_ceilings, time_events  # noqa: E402

from nvfp4_aot import validation  # noqa: E402
from nvfp4_aot.manifest import EPILOGUES, ORIGINAL_EPILOGUE  # noqa: E402
from nvfp4_aot.plan import GroupedGemmPlan  # noqa: E402

SHAPES = Path(__file__).resolve().parents[1] / "tests" / "data" / "shapes.json"
FAMILIES = ("sm90_nvfp4_grouped_gemm", "sm90_nvfp4_grouped_gemm_a16")
SETS, PER_GRAPH, ROUNDS, REPLAYS = 4, 8, 15, 20
TORCH_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}


def operand_sets(sizes, device) -> list[dict]:
    """SETS sets of random operands (torch tensors) for every epilogue's C dtype."""
    sets = []
    for _ in range(SETS):
        operands = {"a": [], "b": [], "sfa": [], "sfb": [], "c": {d: [] for d in TORCH_DTYPES}}
        for m, n, k in sizes:
            nbytes = validation.operand_bytes(m, n, k)
            operands["a"].append(
                torch.randint(0, 256, (m, k // 2), dtype=torch.uint8, device=device)
            )
            operands["b"].append(
                torch.randint(0, 256, (n, k // 2), dtype=torch.uint8, device=device)
            )
            for field in ("sfa", "sfb"):  # E4M3 codes 0x30..0x40: 0.5 .. 2
                operands[field].append(
                    torch.randint(0x30, 0x41, (nbytes[field],), dtype=torch.uint8, device=device)
                )
            for dtype, torch_dtype in TORCH_DTYPES.items():
                operands["c"][dtype].append(torch.empty(m, n, dtype=torch_dtype, device=device))
        operands["alpha"] = torch.ones(len(sizes), dtype=torch.float32, device=device)
        sets.append(operands)
    return sets


def pointers(operands, epilogue) -> tuple:
    columns = [
        [t.data_ptr() for t in operands[f]] for f in ("a", "b")
    ] + [[t.data_ptr() for t in operands["c"][epilogue.out_dtype]]] + [
        [t.data_ptr() for t in operands[f]] for f in ("sfa", "sfb")
    ]  # fmt: skip
    alpha = operands["alpha"].data_ptr() if epilogue.alpha else None
    return columns, alpha


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="write the results here too")
    parser.add_argument("--family", action="append", choices=FAMILIES, help="(repeatable)")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="round-robin rounds")
    args = parser.parse_args()
    device = torch.device("cuda", 0)
    copy_bps, bf16_flops = measure_ceilings(device)
    print(f"copy bandwidth {copy_bps / 1e9:.0f} GB/s (read + write), dense BF16 "
          f"{bf16_flops / 1e12:.0f} TFLOP/s")  # fmt: skip
    cases = json.loads(SHAPES.read_text())["benchmarks"]
    results = []
    stream = torch.cuda.Stream()
    for index, case in enumerate(cases):
        sizes = list(zip(case["m"], case["n"], case["k"]))
        sets = operand_sets(sizes, device)
        flops = sum(2 * m * n * k for m, n, k in sizes)
        moved = sum(sum(validation.operand_bytes(m, n, k).values()) for m, n, k in sizes)
        for family in args.family or FAMILIES:
            plans, graphs = {}, {}
            for epilogue in EPILOGUES:
                plan = GroupedGemmPlan(
                    sizes, kernel=family, out_dtype=epilogue.out_dtype, alpha=epilogue.alpha,
                    capture_slots=PER_GRAPH,
                )  # fmt: skip
                plans[epilogue] = plan
                runs = [pointers(s, epilogue) for s in sets]
                with torch.cuda.stream(stream):
                    for columns, alpha in runs:  # warm-up, loads the kernels
                        plan.run(*columns, stream=stream.cuda_stream, alpha=alpha)
                    stream.synchronize()
                    graph = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(graph, stream=stream):
                        for i in range(PER_GRAPH):
                            columns, alpha = runs[i % SETS]
                            plan.run(*columns, stream=stream.cuda_stream, alpha=alpha)
                graphs[epilogue] = graph
            samples = {e: [] for e in EPILOGUES}
            ratios = {e: [] for e in EPILOGUES}
            for _round in range(args.rounds):
                rounds = {}
                for epilogue, graph in graphs.items():
                    ms = time_events(lambda _, g=graph: g.replay(), [None], REPLAYS, per_batch=1)
                    rounds[epilogue] = [t / PER_GRAPH * 1e3 for t in ms]
                    samples[epilogue] += rounds[epilogue]
                base = statistics.median(rounds[ORIGINAL_EPILOGUE])
                for epilogue, times in rounds.items():
                    ratios[epilogue].append(statistics.median(times) / base)
            for epilogue in EPILOGUES:
                results.append(
                    {
                        "case": index, "family": family, "epilogue": str(epilogue),
                        "median_us": statistics.median(samples[epilogue]),
                        "ratio": statistics.median(ratios[epilogue]),
                        "memory_floor_us": moved / copy_bps * 1e6,
                        "bf16_floor_us": flops / bf16_flops * 1e6,
                    }
                )  # fmt: skip
            del graphs
            for plan in plans.values():
                plan.close()
    header = f"{'case':>4}  {'family':<28} {'epilogue':<20} {'median us':>9} {'ratio':>6} " \
             f"{'mem floor us':>12} {'bf16 floor us':>13}"  # fmt: skip
    print(header)
    for r in results:
        print(f"{r['case']:>4}  {r['family']:<28} {r['epilogue']:<20} {r['median_us']:>9.2f} "
              f"{r['ratio']:>6.3f} {r['memory_floor_us']:>12.2f} {r['bf16_floor_us']:>13.2f}")  # fmt: skip
    worst = max(r["ratio"] for r in results)
    print(f"largest cost of an epilogue over the original: {100 * (worst - 1):+.1f} %")
    if args.json:
        args.json.write_text(json.dumps({"copy_bps": copy_bps, "bf16_flops": bf16_flops,
                                         "results": results}, indent=1))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
