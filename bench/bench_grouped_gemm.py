#!/usr/bin/env python3
"""Kernel benchmark on the GPU: ours against torch baselines and measured floors.

Columns (all from one run, same GPU, median of many CUDA-event timings, several input
sets rotated to defeat the L2):
  ours          nvfp4-aot grouped GEMM (FP4 x FP4 + E4M3 block scales -> FP16)
  grouped_mm    torch._grouped_mm on BF16 operands dequantized ahead of time
  naive         per group: dequantize A and B to BF16 in torch, then A @ B.T
  dense bf16    one cuBLAS BF16 GEMM of the same FLOPs, (sum m) x n x k with one weight
                matrix: what the tensor cores reach at this size with no grouping, no
                padding of groups to tiles and no FP4 decode (a bound no grouped FP4
                kernel on Hopper can beat by much)
  mem floor     bytes the FP4 kernel must move / measured device-to-device copy rate
  bf16 floor    2 * sum(m n k) / measured rate of an 8192^3 BF16 matmul
grouped_mm and dense bf16 are replayed from CUDA graphs (their host path is slower than
their kernels on the small shapes); ours is launched from Python, batches of 10 calls
queued back to back (--kernel forces a family instead of the plan's choice).
Ratios are against the BF16 floor. torch is used here only as the baseline and to make
data; the runtime under test never imports it.

    python bench/bench_grouped_gemm.py [--shapes ../shared/shapes.json] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import (  # noqa: E402
    blocked_bytes,
    dequantize,
    finite_or_inf,
    measure_ceilings,
    random_scales,
    time_events,
    time_graph,
)

from nvfp4_aot.plan import GroupedGemmPlan  # noqa: E402

MOE_SHAPES = [
    # larger MoE-like shapes: many experts, decode/prefill-sized token counts per expert
    {"name": "moe-32x128-n4096-k7168", "m": [128] * 32, "n": [4096] * 32, "k": [7168] * 32},
    {"name": "moe-8x1024-n4096-k7168", "m": [1024] * 8, "n": [4096] * 8, "k": [7168] * 8},
    {"name": "moe-64x256-n2048-k4096", "m": [256] * 64, "n": [2048] * 64, "k": [4096] * 64},
]


def make_set(shape, device):
    """One input set: per group A, B, SFA, SFB (device tensors), C (FP16)."""
    groups = []
    for m, n, k in zip(shape["m"], shape["n"], shape["k"]):
        a = torch.randint(0, 256, (m, k // 2), dtype=torch.uint8, device=device)
        b = torch.randint(0, 256, (n, k // 2), dtype=torch.uint8, device=device)
        sfa = random_scales(blocked_bytes(m, k), device)
        sfb = random_scales(blocked_bytes(n, k), device)
        c = torch.empty((m, n), dtype=torch.float16, device=device)
        groups.append((a, b, c, sfa, sfb, m, n, k))
    return groups


def bench_shape(shape, device, repeats, num_sets, kernel=None):
    sizes = list(zip(shape["m"], shape["n"], shape["k"]))
    flops = sum(2 * m * n * k for m, n, k in sizes)
    min_bytes = sum(m * k // 2 + n * k // 2 + (m + n) * k // 16 + 2 * m * n for m, n, k in sizes)
    sets = [make_set(shape, device) for _ in range(num_sets)]
    plan = GroupedGemmPlan(sizes, device=device.index or 0, kernel=kernel)
    stream = torch.cuda.current_stream().cuda_stream

    # Operands are validated once per input set (plan.pointers); the timed call is the
    # launch with those pointers, so the columns compare kernels, not Python overhead.
    validated = {
        id(st): plan.pointers([g[0] for g in st], [g[1] for g in st], [g[2] for g in st],
                              [g[3] for g in st], [g[4] for g in st], stream)[0]
        for st in sets
    }  # fmt: skip

    def ours(s):
        plan.launch_pointers(validated[id(s)], stream)

    row = {"name": shape.get("name", ""), "groups": len(sizes), "kernel": plan.family,
           "ours_ms": statistics.median(time_events(ours, sets, repeats))}  # fmt: skip

    # correctness spot check of ours against torch on the first set (fp32 reference of exact BF16)
    s = sets[0]
    ours(s)
    torch.cuda.synchronize()
    worst = 0.0
    for a, b, c, sfa, sfb, m, n, k in s:
        ref = dequantize(a, sfa, m, k).float() @ dequantize(b, sfb, n, k).float().T
        worst = max(worst, finite_or_inf(((c.float() - ref).norm() / ref.norm()).item()))
    row["rel_err"] = worst

    deq = [
        [(dequantize(a, sfa, m, k), dequantize(b, sfb, n, k)) for a, b, c, sfa, sfb, m, n, k in st]
        for st in sets
    ]
    same_nk = len({(n, k) for _, n, k in sizes}) == 1
    if same_nk and hasattr(torch, "_grouped_mm"):
        offs = torch.tensor(
            [sum(shape["m"][: i + 1]) for i in range(len(sizes))], dtype=torch.int32, device=device
        )
        stacked = [(torch.cat([d[0] for d in st]), torch.stack([d[1] for d in st])) for st in deq]
        try:
            row["grouped_mm_ms"] = statistics.median(
                time_graph(lambda i: torch._grouped_mm(stacked[i][0], stacked[i][1].transpose(-2, -1), offs=offs),
                           list(range(num_sets)), repeats)
            )  # fmt: skip
        except RuntimeError as exc:
            row["grouped_mm_error"] = str(exc).splitlines()[0][:100]
    if same_nk:
        n, k = sizes[0][1], sizes[0][2]
        dense = [(torch.randn(sum(shape["m"]), k, dtype=torch.bfloat16, device=device),
                  torch.randn(n, k, dtype=torch.bfloat16, device=device)) for _ in range(num_sets)]  # fmt: skip
        outs = [
            torch.empty(sum(shape["m"]), n, dtype=torch.bfloat16, device=device)
            for _ in range(num_sets)
        ]
        row["dense_bf16_ms"] = statistics.median(
            time_graph(lambda i: torch.matmul(dense[i][0], dense[i][1].T, out=outs[i]), list(range(num_sets)), repeats)
        )  # fmt: skip
        del dense, outs
    row["naive_ms"] = statistics.median(
        time_events(lambda st: [dequantize(a, sfa, m, k) @ dequantize(b, sfb, n, k).T for a, b, c, sfa, sfb, m, n, k in st], sets, max(10, repeats // 10))
    )  # fmt: skip
    row["flops"], row["min_bytes"] = flops, min_bytes
    row["ours_tflops"] = flops / (row["ours_ms"] * 1e-3) / 1e12
    plan.close()
    del sets, deq
    torch.cuda.empty_cache()
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--shapes",
        type=Path,
        default=Path(__file__).resolve().parents[2] / "shared" / "shapes.json",
    )
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--sets", type=int, default=4)
    parser.add_argument("--no-moe", action="store_true")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--kernel", help="force this kernel family (default: the plan's choice)")
    args = parser.parse_args()
    device = torch.device("cuda", 0)
    torch.manual_seed(0)
    shapes = [
        dict(s, name=f"bench{i}")
        for i, s in enumerate(json.loads(args.shapes.read_text())["benchmarks"])
    ]
    if not args.no_moe:
        shapes += MOE_SHAPES
    rows = [bench_shape(s, device, args.repeats, args.sets, args.kernel) for s in shapes]
    # the ceilings last: 30 back-to-back 8192^3 matmuls leave the GPU hot, and the first
    # shape measured after them ran up to 20 % slow in earlier runs
    ceilings = measure_ceilings(device)
    print(
        f"# {torch.cuda.get_device_name(0)}: copy {ceilings[0] / 1e12:.2f} TB/s, bf16 {ceilings[1] / 1e12:.0f} TFLOP/s"
    )
    for r in rows:
        r["mem_floor_ms"] = r["min_bytes"] / ceilings[0] * 1e3
        r["bf16_floor_ms"] = r["flops"] / ceilings[1] * 1e3
    header = (f"{'shape':24} {'G':>3} {'ours us':>9} {'x bf16fl':>8} {'grp_mm us':>9} {'naive us':>9} "
              f"{'dense us':>9} {'x bf16fl':>8} {'mem fl':>7} {'bf16 fl':>8} {'TFLOP/s':>7} {'rel err':>8}  kernel")  # fmt: skip
    print(header)
    for r in rows:
        gm = f"{r['grouped_mm_ms'] * 1e3:9.1f}" if "grouped_mm_ms" in r else f"{'n/a':>9}"
        dense = (f"{r['dense_bf16_ms'] * 1e3:9.1f} {r['dense_bf16_ms'] / r['bf16_floor_ms']:8.2f}"
                 if "dense_bf16_ms" in r else f"{'n/a':>9} {'':>8}")  # fmt: skip
        print(f"{r['name']:24} {r['groups']:3d} {r['ours_ms'] * 1e3:9.1f} {r['ours_ms'] / r['bf16_floor_ms']:8.2f} {gm} "
              f"{r['naive_ms'] * 1e3:9.1f} {dense} {r['mem_floor_ms'] * 1e3:7.1f} {r['bf16_floor_ms'] * 1e3:8.1f} "
              f"{r['ours_tflops']:7.0f} {r['rel_err']:8.1e}  {r['kernel']}")  # fmt: skip
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "device": torch.cuda.get_device_name(0),
                    "copy_Bps": ceilings[0],
                    "bf16_flops": ceilings[1],
                    "rows": rows,
                },
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
