"""#17 probe (session 17): host µs of an eager MoeGemmPlan.run for a routed plan with its
copy + launch as one slot graph (the tree's default), as a copy and a direct launch
(MoeLayout.slot_graphs patched False), and the routing-kernel plan (routed=False: routing
+ GEMM as one slot graph). E = 128, (2048, 768), 8 tokens, contiguous; a routing from a
pool of 8 each call (bench_decode's EAGER_POOL); int pointers and torch tensors;
alternating rounds, median of per-call perf_counter times; the GPU drained every 16 calls."""

import statistics
import sys
import time
from pathlib import Path

import torch

root = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(root))
from nvfp4_aot import moe_layout  # noqa: E402
from nvfp4_aot.moe import MoeGemmPlan  # noqa: E402

E, N, K, T = 128, 2048, 768, 8
rows = T * 8
dev = torch.device("cuda", 0)


def make(kind):
    if kind == "direct":
        moe_layout.MoeLayout.slot_graphs = property(lambda self: False)
    try:
        plan = MoeGemmPlan(E, N, K, capacity=rows, routed=False if kind == "tables" else None)
    finally:
        if kind == "direct":
            del moe_layout.MoeLayout.slot_graphs
    return plan


plans = {k: make(k) for k in ("graph", "direct", "tables")}
need = plans["graph"].layout.operand_bytes()
a = torch.zeros(rows, K // 2, dtype=torch.uint8, device=dev)
b = torch.zeros(E, N, K // 2, dtype=torch.uint8, device=dev)
c = torch.zeros(rows, N, dtype=torch.float16, device=dev)
sfa = torch.zeros(need["sfa"], dtype=torch.uint8, device=dev)
sfb = torch.zeros(need["sfb"], dtype=torch.uint8, device=dev)
pool = torch.zeros(8, E + 1, dtype=torch.int32, device=dev)
pool[:, 1:] = torch.arange(1, E + 1, device=dev).clamp(max=rows).to(torch.int32)
for name, plan in plans.items():
    print(name, plan, "slot graphs", plan._launcher._slot_graphs is not None)


def time_calls(plan, ptrs, calls=400):
    ops = [a, b, c, sfa, sfb]
    ops = [t.data_ptr() for t in ops] if ptrs else ops
    routings = [pool[i].data_ptr() if ptrs else pool[i] for i in range(8)]
    out = []
    for i in range(calls):
        if i % 16 == 0:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        plan.run(*ops, routings[i % 8])
        out.append(time.perf_counter() - t0)
    torch.cuda.synchronize()
    return statistics.median(out) * 1e6


res = {(k, p): [] for k in plans for p in (True, False)}
for _ in range(7):
    for k, plan in plans.items():
        for p in (True, False):
            res[(k, p)].append(time_calls(plan, p))
print("| plan | int pointers µs | torch tensors µs |")
print("| --- | --- | --- |")
for k in plans:
    print(
        f"| {k} | {statistics.median(res[(k, True)]):.2f} | {statistics.median(res[(k, False)]):.2f} |"
    )
