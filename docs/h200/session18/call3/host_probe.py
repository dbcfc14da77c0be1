# ruff: noqa: B023  (each lambda runs within the loop iteration that made it)
"""session 18: where an eager MoE layer step's host time goes (bench_moe_layer's
ours_step, E=128 h=2048 f=768 top-8): each op alone, queued 40 times behind a GPU hold
(so no call waits for the GPU), µs a call; then cProfile of 30 held steps."""

import cProfile
import pstats
import sys
import time
from pathlib import Path

root = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(root))
sys.path.insert(0, str(root / "bench"))
import torch  # noqa: E402
from bench_common import GpuHold  # noqa: E402
from bench_moe_layer import Weights, combine, ours_step, routed, torch_step  # noqa: E402

from nvfp4_aot import torch_ops  # noqa: E402

dev = torch.device("cuda", 0)
g = torch.Generator(device=dev).manual_seed(0)
w = Weights(128, 2048, 768, dev, g)
hold = GpuHold()
for tokens in (64, 1024):
    x = torch.randn(tokens, 2048, device=dev, generator=g).to(torch.bfloat16)
    r, rw = routed(x, w, 8)
    g_x = torch_ops.global_scale(x)
    idx = r.tokens.to(torch.int32)
    a1, sfa1 = torch_ops.quantize(x, g_x, r.offsets, idx, "contiguous")
    alpha = w.w1_scale2 / g_x
    c1 = torch_ops.moe_gemm(
        a1, w.w1, sfa1, w.w1_scales, r.offsets, alpha=alpha, out_dtype=torch.bfloat16
    )
    ops = {
        "ours_step": lambda: ours_step(x, w, 8),
        "torch_step": lambda: torch_step(x, w, 8),
        "routed (torch ops)": lambda: routed(x, w, 8),
        "global_scale": lambda: torch_ops.global_scale(x),
        "tokens.to(int32)": lambda: r.tokens.to(torch.int32),
        "quantize contiguous": lambda: torch_ops.quantize(x, g_x, r.offsets, idx, "contiguous"),
        "alpha = scale2 / g": lambda: w.w1_scale2 / g_x,
        "moe_gemm bf16 alpha": lambda: torch_ops.moe_gemm(
            a1, w.w1, sfa1, w.w1_scales, r.offsets, alpha=alpha, out_dtype=torch.bfloat16
        ),
        "silu * up": lambda: (torch.nn.functional.silu(c1[:, :768]) * c1[:, 768:]).contiguous(),
        "combine": lambda: combine(x, r, c1[:, :2048] if c1.shape[1] >= 2048 else c1, rw),
    }
    for name, fn in ops.items():
        fn()
        torch.cuda.synchronize()
        best = []
        for _ in range(3):
            hold(100)
            start = time.perf_counter()
            for _ in range(10):
                fn()
            best.append((time.perf_counter() - start) / 10 * 1e6)
            torch.cuda.synchronize()
        print(
            f"T={tokens} {name}: {min(best):.1f} µs a call (best of 3 x 10, GPU held)", flush=True
        )
    hold(300)
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(30):
        ours_step(x, w, 8)
    prof.disable()
    torch.cuda.synchronize()
    print(f"--- cProfile of 30 held ours_step, T={tokens}")
    pstats.Stats(prof).sort_stats("tottime").print_stats(25)
