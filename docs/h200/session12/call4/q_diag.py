"""Which (row, block) of a plain run differ from the reference: T k [dtype]."""

import sys

import numpy as np
import torch

from nvfp4_aot.quantize import quantize
from nvfp4_aot.quantizer import QuantizePlan

rows, k = int(sys.argv[1]), int(sys.argv[2])
dev = torch.device("cuda", 0)
rng = np.random.default_rng(0)
xf = (rng.standard_normal((rows, k)) * 4).astype(np.float32)
bits = (xf.view(np.uint32) >> 16).astype(np.uint16)
x = torch.from_numpy(bits.view(np.int16)).to(dev)
g = torch.tensor([1.0], dtype=torch.float32, device=dev)
plan = QuantizePlan(k, rows=rows, dtype="bfloat16")
out = torch.full(plan.out_shape, 0xA5, dtype=torch.uint8, device=dev)
scales = torch.full((plan.scale_bytes,), 0xA5, dtype=torch.uint8, device=dev)
plan.run(x.data_ptr(), out.data_ptr(), scales.data_ptr(), g.data_ptr())
torch.cuda.synchronize()
q = quantize(bits, np.float32(1.0))
got = out.cpu().numpy().reshape(rows, k // 2)
bad = got != q.packed
blocks_bad = bad.reshape(rows, k // 16, 8).any(axis=2)
r, b = np.nonzero(blocks_bad)
print(
    f"T={rows} k={k} segments={plan.problem.segments} units={plan.problem.scale_rows * plan.problem.segments} "
    f"ctas={plan.layout.launch.num_ctas}: {blocks_bad.sum()} bad blocks of {blocks_bad.size}"
)
if len(r):
    print(" rows:", np.unique(r)[:20], "... blocks:", np.unique(b)[:40])
    print(
        " first bad bytes:",
        got[r[0], b[0] * 8 : b[0] * 8 + 8],
        "expected",
        q.packed[r[0], b[0] * 8 : b[0] * 8 + 8],
    )
sc = scales.cpu().numpy()
print(
    " scales equal:",
    bool(
        (
            sc[: q.scales_blocked.size]
            == np.asarray(q.scales_blocked).reshape(-1)[: plan.scale_bytes]
        ).all()
    ),
)
