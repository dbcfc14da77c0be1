"""Run the quantizer on one configuration a few times (for ncu): plain T k | contiguous E T k."""

import sys

import torch

from nvfp4_aot.quantizer import QuantizePlan

form = sys.argv[1]
dev = torch.device("cuda", 0)
if form == "plain":
    rows, k = int(sys.argv[2]), int(sys.argv[3])
    x = (torch.randn(rows, k, device=dev) * 4).to(torch.bfloat16)
    plan = QuantizePlan(k, rows=rows, dtype="bfloat16")
    extra = {}
else:
    experts, tokens, k = (int(a) for a in sys.argv[2:5])
    capacity = tokens * 8
    x = (torch.randn(tokens, k, device=dev) * 4).to(torch.bfloat16)
    plan = QuantizePlan(k, form="contiguous", rows=tokens, capacity=capacity, experts=experts)
    counts = torch.full((experts,), capacity // experts, dtype=torch.int64)
    counts[: capacity % experts] += 1
    routing = (
        torch.cat([torch.zeros(1, dtype=torch.int64), counts.cumsum(0)]).to(torch.int32).to(dev)
    )
    index = torch.randint(0, tokens, (capacity,), dtype=torch.int32, device=dev)
    extra = dict(routing=routing.data_ptr(), index=index.data_ptr())
g = torch.tensor([1.0], dtype=torch.float32, device=dev)
out = torch.empty(plan.out_shape, dtype=torch.uint8, device=dev)
scales = torch.empty(plan.scale_bytes, dtype=torch.uint8, device=dev)
for _ in range(4):
    plan.run(x.data_ptr(), out.data_ptr(), scales.data_ptr(), g.data_ptr(), **extra)
torch.cuda.synchronize()
print(form, sys.argv[2:], "num_ctas", plan.layout.launch.num_ctas)
