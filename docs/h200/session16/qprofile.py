"""One quantizer shape launched 4 times (ncu profiles the last): plain ROWSxK, contig or masked."""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from nvfp4_aot.quantizer import QuantizePlan  # noqa: E402

what, art = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else None)
dev = torch.device("cuda", 0)
g = torch.tensor([1.0], dtype=torch.float32, device=dev)
if what.startswith("contig"):  # contig: T = 1024; contigT: T = 1 (top-8: 8 rows)
    tokens, k, experts = (1 if what == "contigT" else 1024), 2048, 128
    cap = tokens * 8
    counts = torch.full((experts,), cap // experts, dtype=torch.int64)
    counts[: cap % experts] += 1
    routing = (
        torch.cat([torch.zeros(1, dtype=torch.int64), counts.cumsum(0)]).to(torch.int32).to(dev)
    )
    index = torch.randint(0, tokens, (cap,), dtype=torch.int32, device=dev)
    x = (torch.randn(tokens, k, device=dev) * 4).to(torch.bfloat16)
    plan = QuantizePlan(
        k, form="contiguous", rows=tokens, capacity=cap, experts=experts, artifacts=art
    )
    ops = dict(routing=routing, index=index)
elif what == "masked":  # E = 256, max_m = 64 (all full), k = 7168
    experts, max_m, k = 256, 64, 7168
    x = (torch.randn(experts * max_m, k, device=dev) * 4).to(torch.bfloat16)
    plan = QuantizePlan(k, form="masked", capacity=max_m, experts=experts, artifacts=art)
    ops = dict(routing=torch.full((experts,), max_m, dtype=torch.int32, device=dev))
else:
    rows, k = map(int, what.split("x"))
    x = (torch.randn(rows, k, device=dev) * 4).to(torch.bfloat16)
    plan = QuantizePlan(k, rows=rows, artifacts=art)
    ops = {}
out = torch.empty(plan.out_shape, dtype=torch.uint8, device=dev)
sc = torch.empty(plan.scale_bytes, dtype=torch.uint8, device=dev)
for _ in range(4):
    plan.run(x, out, sc, g, stream=torch.cuda.current_stream().cuda_stream, **ops)
torch.cuda.synchronize()
print("done", what)
