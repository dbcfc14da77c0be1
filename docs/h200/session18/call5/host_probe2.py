"""session 18: where the torch ops' host time goes (T = 64 tokens, E=128 h=2048 f=768
top-8): each call alone, 10 calls behind a GPU hold (best of 5), beside the plans' own
run() with int pointers; then cProfile of 300 held calls of torch_ops.quantize and of
torch_ops.moe_gemm."""

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
from bench_moe_layer import Weights, routed  # noqa: E402

from nvfp4_aot import torch_ops  # noqa: E402

dev = torch.device("cuda", 0)
g = torch.Generator(device=dev).manual_seed(0)
w = Weights(128, 2048, 768, dev, g)
hold = GpuHold()
x = torch.randn(64, 2048, device=dev, generator=g).to(torch.bfloat16)
r, rw = routed(x, w, 8)
g_x = torch_ops.global_scale(x)
idx = r.tokens.to(torch.int32)
a1, sfa1 = torch_ops.quantize(x, g_x, r.offsets, idx, "contiguous")
alpha = w.w1_scale2 / g_x
c1 = torch_ops.moe_gemm(
    a1, w.w1, sfa1, w.w1_scales, r.offsets, alpha=alpha, out_dtype=torch.bfloat16
)
qplan = next(p for k, p in torch_ops._plans.items() if k[0] == "quantize" and k[2] == "contiguous")
gplan = next(p for k, p in torch_ops._plans.items() if k[0] != "quantize")
stream = torch.cuda.current_stream().cuda_stream
q_ptrs = (
    x.data_ptr(),
    a1.data_ptr(),
    sfa1.data_ptr(),
    g_x.data_ptr(),
    r.offsets.data_ptr(),
    idx.data_ptr(),
)
g_ptrs = (
    a1.data_ptr(),
    w.w1.data_ptr(),
    c1.data_ptr(),
    sfa1.data_ptr(),
    w.w1_scales.data_ptr(),
    r.offsets.data_ptr(),
)
ops = {
    "empty torch op (torch.ops.aten.alias)": lambda: torch.ops.aten.alias(x),
    "x.new_empty": lambda: x.new_empty((64, 1024), dtype=torch.uint8),
    "torch.cuda.current_stream()": lambda: torch.cuda.current_stream(dev).cuda_stream,
    "is_current_stream_capturing": torch.cuda.is_current_stream_capturing,
    "quantize op": lambda: torch_ops.quantize(x, g_x, r.offsets, idx, "contiguous"),
    "QuantizePlan.run (ints)": lambda: qplan.run(*q_ptrs, stream=stream),
    "moe_gemm op": lambda: torch_ops.moe_gemm(
        a1, w.w1, sfa1, w.w1_scales, r.offsets, alpha=alpha, out_dtype=torch.bfloat16
    ),
    "MoeGemmPlan.run (ints)": lambda: gplan.run(*g_ptrs, stream=stream, alpha=alpha.data_ptr()),
    "global_scale": lambda: torch_ops.global_scale(x),
    "silu * up": lambda: (torch.nn.functional.silu(c1[:, :768]) * c1[:, 768:]).contiguous(),
}
for name, fn in ops.items():
    fn()
    torch.cuda.synchronize()
    best = []
    for _ in range(5):
        hold(50)
        start = time.perf_counter()
        for _ in range(10):
            fn()
        best.append((time.perf_counter() - start) / 10 * 1e6)
        torch.cuda.synchronize()
    print(f"{name}: {min(best):.1f} µs a call (best of 5 x 10, GPU held)", flush=True)
for name in ("quantize op", "moe_gemm op"):
    fn = ops[name]
    hold(400)
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(300):
        fn()
    prof.disable()
    torch.cuda.synchronize()
    print(f"--- cProfile of 300 held calls: {name}")
    pstats.Stats(prof).sort_stats("tottime").print_stats(22)
