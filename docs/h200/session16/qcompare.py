"""Quantizer variants side by side: graph-replay µs of each artifacts dir on the #16 shapes,
passes alternating variants; bytes compared with the first variant's.

    python3 scratch/qcompare.py --passes 3 base=scratch/base/artifacts halves=scratch/halves/artifacts
"""

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from bench_common import copy_bandwidth  # noqa: E402
from bench_quantize import time_graph_relaxed  # noqa: E402

from nvfp4_aot.quantizer import QuantizePlan  # noqa: E402

PLAIN = [(1024, 2048), (1024, 4096), (1024, 7168), (4096, 2048), (4096, 4096), (4096, 7168),
         (16384, 7168)]  # fmt: skip
PLAIN_ONLY = bool(__import__("os").environ.get("QCOMPARE_PLAIN_ONLY"))
MOE = [
    ("contiguous", 128, 1024, 2048),
    ("contiguous", 256, 4096, 7168),
    ("masked", 32, 512, 7168),
    ("contiguous", 128, 1, 2048),
    ("contiguous", 128, 16, 2048),
    ("contiguous", 256, 64, 7168),
    ("masked", 128, 8, 2048),
    ("masked", 256, 64, 7168),
]


def cases(device):
    for rows, k in PLAIN:
        x = (torch.randn(rows, k, device=device) * 4).to(torch.bfloat16)
        g = torch.tensor([448.0 * 6 / 16], dtype=torch.float32, device=device)
        yield (
            f"{rows}x{k}",
            dict(k=k, rows=rows),
            dict(x=x, global_scale=g),
            rows * k * 2 + rows * k // 2,
            None,
        )
    for form, experts, tokens, k in [] if PLAIN_ONLY else MOE:
        g = torch.tensor([1.0], dtype=torch.float32, device=device)
        if form == "contiguous":
            capacity = tokens * 8
            kw = dict(k=k, form=form, rows=tokens, capacity=capacity, experts=experts)
            # capacity rows over the experts, the first capacity % E one more
            counts = torch.full((experts,), capacity // experts, dtype=torch.int64)
            counts[: capacity % experts] += 1
            routing = torch.cat([torch.zeros(1, dtype=torch.int64), counts.cumsum(0)]).to(
                torch.int32
            )
            index = torch.randint(0, tokens, (capacity,), dtype=torch.int32, device=device)
            x = (torch.randn(tokens, k, device=device) * 4).to(torch.bfloat16)
            ops = dict(x=x, global_scale=g, routing=routing.to(device), index=index)
            moved = capacity * k * 2 + capacity * k // 2 + 4 * capacity
            padded = int(((counts + 127) // 128 * 128).sum())
        else:
            kw = dict(k=k, form=form, capacity=tokens, experts=experts)
            routing = torch.full((experts,), tokens, dtype=torch.int32, device=device)
            x = (torch.randn(experts * tokens, k, device=device) * 4).to(torch.bfloat16)
            ops = dict(x=x, global_scale=g, routing=routing)
            moved = experts * tokens * (k * 2 + k // 2)
            padded = None
        yield f"{form} E={experts} {tokens} k={k}", kw, ops, moved, padded


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("variants", nargs="+")
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=200)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    variants = [v.split("=", 1) for v in a.variants]
    device = torch.device("cuda", 0)
    bw = copy_bandwidth(device)
    print(f"copy bandwidth {bw / 1e12:.2f} TB/s")
    results = {}
    for label, kw, ops, moved, padded in cases(device):
        plans, outs = {}, {}
        for name, art in variants:
            plan = QuantizePlan(device=0, artifacts=art, capture_slots=64, **kw)
            out = torch.full(plan.out_shape, 0xA5, dtype=torch.uint8, device=device)
            sc = torch.full((plan.scale_bytes,), 0x5A, dtype=torch.uint8, device=device)
            plans[name], outs[name] = plan, (out, sc)
        total = moved + (
            plans[variants[0][0]].scale_bytes
            if padded is None
            else padded * plans[variants[0][0]].problem.blocks_padded
        )
        times = {name: [] for name, _ in variants}
        for _ in range(a.passes):
            for name, _art in variants:
                plan, (out, sc) = plans[name], outs[name]

                def ours(_, plan=plan, out=out, sc=sc, ops=ops):
                    plan.run(
                        out=out, scales=sc, stream=torch.cuda.current_stream().cuda_stream, **ops
                    )

                times[name].append(statistics.median(time_graph_relaxed(ours, a.repeats)) * 1e3)
        torch.cuda.synchronize()
        base_out, base_sc = outs[variants[0][0]]
        same = {
            n: bool(torch.equal(o, base_out) and torch.equal(s, base_sc))
            for n, (o, s) in outs.items()
        }
        for p in plans.values():
            p.close()
        floor_us = total / bw * 1e6
        row = {n: dict(us=statistics.median(t), passes=t, copy=floor_us / statistics.median(t),
                       same=same[n]) for n, t in times.items()}  # fmt: skip
        results[label] = dict(floor_us=floor_us, variants=row)
        cells = "  ".join(
            f"{n} {r['us']:6.1f} ({100 * r['copy']:3.0f} %){'' if r['same'] else ' DIFF'}"
            for n, r in row.items()
        )
        print(f"{label:28s} floor {floor_us:6.1f}  {cells}", flush=True)
    if a.json:
        a.json.write_text(json.dumps(dict(copy_bw=bw, results=results), indent=1))


if __name__ == "__main__":
    main()
