"""session 17 call 21: which eager layer steps make the host wait behind a GPU hold:
ours and torch's, 4 / 8 / 16 / 32 steps, E=128 h=2048 f=768 top-8, T=64."""

import sys
from pathlib import Path

root = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(root))
sys.path.insert(0, str(root / "bench"))
import bench_moe  # noqa: E402
import torch  # noqa: E402
from bench_common import GpuHold  # noqa: E402
from bench_moe_layer import Weights, ours_step, torch_step  # noqa: E402

dev = torch.device("cuda", 0)
g = torch.Generator(device=dev).manual_seed(0)
w = Weights(128, 2048, 768, dev, g)
x = torch.randn(64, 2048, device=dev, generator=g).to(torch.bfloat16)
ours_step(x, w, 8)
torch_step(x, w, 8)
torch.cuda.synchronize()
hold = GpuHold()
for steps in (4, 8, 16, 32):
    bench_moe.SYNC_STEPS = steps
    for name, fn in (("ours", ours_step), ("torch", torch_step)):
        r = bench_moe.sync_check(lambda _i, fn=fn: fn(x, w, 8), hold)
        print(steps, name, round(r["host_ms"], 1), r["gpu_still_held"], r["torch_error"])
