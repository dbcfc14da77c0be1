"""session 18: why 16 eager layer steps at T = 1024 make the host wait behind a GPU hold
(session 17 calls 22-24). For T = 64 and 1024: (1) kernels each layer step launches
(torch.profiler), (2) host ms to queue 2/4/8/12/16 steps of ours, torch's BF16 layer and
prefixes of ours (route only; + quantize; + GEMM 1) behind a 250 ms hold, and whether the
GPU was still held after (a wait: it was not)."""

import sys
from pathlib import Path

root = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(root))
sys.path.insert(0, str(root / "bench"))
import bench_moe  # noqa: E402
import torch  # noqa: E402
from bench_common import GpuHold  # noqa: E402
from bench_moe_layer import Weights, ours_step, routed, torch_step  # noqa: E402

from nvfp4_aot import torch_ops  # noqa: E402


def route_only(x, w, k):
    return routed(x, w, k)


def quantize_prefix(x, w, k):
    r, _ = routed(x, w, k)
    g_x = torch_ops.global_scale(x)
    return torch_ops.quantize(x, g_x, r.offsets, r.tokens.to(torch.int32), "contiguous")


def gemm_prefix(x, w, k):
    r, _ = routed(x, w, k)
    g_x = torch_ops.global_scale(x)
    a1, sfa1 = torch_ops.quantize(x, g_x, r.offsets, r.tokens.to(torch.int32), "contiguous")
    return torch_ops.moe_gemm(a1, w.w1, sfa1, w.w1_scales, r.offsets, alpha=w.w1_scale2 / g_x,
                              out_dtype=torch.bfloat16)  # fmt: skip


LAYERS = {"ours": ours_step, "torch": torch_step, "route": route_only,
          "route+quant": quantize_prefix, "route+quant+gemm1": gemm_prefix}  # fmt: skip

dev = torch.device("cuda", 0)
g = torch.Generator(device=dev).manual_seed(0)
w = Weights(128, 2048, 768, dev, g)
hold = GpuHold()
for tokens in (64, 1024):
    x = torch.randn(tokens, 2048, device=dev, generator=g).to(torch.bfloat16)
    for fn in LAYERS.values():
        fn(x, w, 8)
    torch.cuda.synchronize()
    for name, fn in LAYERS.items():
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            fn(x, w, 8)
            torch.cuda.synchronize()
        kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        print(f"T={tokens} {name}: {len(kernels)} GPU activities a step", flush=True)
    for steps in (2, 4, 8, 12, 16):
        bench_moe.SYNC_STEPS = steps
        for name, fn in LAYERS.items():
            r = bench_moe.sync_check(lambda _i, fn=fn, x=x: fn(x, w, 8), hold)
            print(f"T={tokens} steps={steps} {name}: host {r['host_ms']:.1f} ms, GPU still held "
                  f"{r['gpu_still_held']}, torch sync error {r['torch_error']}", flush=True)  # fmt: skip
