"""Session 21: issue rate of single instructions on the H200 (warp instructions a cycle an
SM), inline PTX in a loop of 8 independent chains, 64 warps an SM."""

import cupy as cp
import numpy as np

OPS = {
    "fma.rn.f32": ("f32", "fma.rn.f32 %0, %0, %1, %2;"),
    "fma.rn.sat.f32": ("f32", "fma.rn.sat.f32 %0, %0, %1, %2;"),
    "fma.rn.bf16x2": ("b32", "fma.rn.bf16x2 %0, %0, %1, %2;"),
    "add.rn.bf16x2": ("b32", "add.rn.bf16x2 %0, %0, %1;"),
    "set.ge.bf16x2": ("b32", "set.ge.bf16x2.bf16x2 %0, %0, %1;"),
    "set.ge.u32.bf16x2": ("b32", "set.ge.u32.bf16x2 %0, %0, %1;"),
    "set.ge.f16x2": ("b32", "set.ge.f16x2.f16x2 %0, %0, %1;"),
    "max.bf16x2": ("b32", "max.NaN.xorsign.abs.bf16x2 %0, %0, %1;"),
    "prmt": ("b32", "prmt.b32 %0, %0, %1, 0x5140;"),
    "lop3": ("b32", "lop3.b32 %0, %0, %1, %2, 0x96;"),
    "shl": ("b32", "shl.b32 %0, %0, 3;"),
    "mad.lo.u32": ("b32", "mad.lo.u32 %0, %0, %1, %2;"),
    "add.u32": ("b32", "add.u32 %0, %0, %1;"),
    "min.f32": ("f32", "min.f32 %0, %0, %1;"),
}
CHAINS, ITERS = 8, 4096
sm = cp.cuda.runtime.getDeviceProperties(0)["multiProcessorCount"]
clock_khz = cp.cuda.runtime.getDeviceProperties(0)["clockRate"]
for name, (kind, ptx) in OPS.items():
    ctype = "float" if kind == "f32" else "unsigned"
    cons = "f" if kind == "f32" else "r"
    body = "\n".join(
        f'asm volatile("{ptx}" : "+{cons}"(v{c}) : "{cons}"(a), "{cons}"(b));'
        for c in range(CHAINS)
    )
    src = f"""extern "C" __global__ void k({ctype}* out, {ctype} a, {ctype} b, long long* cycles) {{
  {ctype} {", ".join(f"v{c} = a" for c in range(CHAINS))};
  long long t0 = clock64();
  for (int i = 0; i < {ITERS}; ++i) {{
{body}
  }}
  long long t1 = clock64();
  {ctype} s = {" + ".join(f"v{c}" for c in range(CHAINS))};
  out[blockIdx.x * blockDim.x + threadIdx.x] = s;
  if (threadIdx.x == 0) cycles[blockIdx.x] = t1 - t0;
}}"""
    try:
        k = cp.RawKernel(src, "k")
        k.compile()
    except Exception as e:  # noqa: BLE001
        print(f"{name:20s} does not compile: {str(e).splitlines()[0][:100]}")
        continue
    blocks, threads = sm * 8, 256  # 64 warps an SM
    out = cp.zeros(blocks * threads, dtype=cp.float32 if kind == "f32" else cp.uint32)
    cyc = cp.zeros(blocks, dtype=cp.int64)
    a = np.float32(1.0001) if kind == "f32" else np.uint32(0x3F803F80)
    b = np.float32(0.5) if kind == "f32" else np.uint32(0x3F813F81)
    k((blocks,), (threads,), (out, a, b, cyc))
    cp.cuda.Device().synchronize()
    start, end = cp.cuda.Event(), cp.cuda.Event()
    start.record()
    k((blocks,), (threads,), (out, a, b, cyc))
    end.record()
    end.synchronize()
    ms = cp.cuda.get_elapsed_time(start, end)
    warp_instr = blocks * threads / 32 * ITERS * CHAINS
    per_sm_cycle = warp_instr / sm / (ms * 1e-3 * clock_khz * 1e3)
    print(
        f"{name:20s} {ms:8.3f} ms  {per_sm_cycle:5.2f} warp-instr/cycle/SM (4 = one a scheduler a cycle)"
    )
