"""PyTorch: an NVFP4 mixture-of-experts layer, all experts in one grouped launch.

The layer: ``T`` tokens of width ``hidden`` are routed by a random linear router to their
top-1 or top-2 of ``E`` experts (softmax weights over the chosen ones); expert ``e`` computes
``x_e @ W_e^T`` with ``W_e`` of shape (ffn, hidden); the results are scaled by the router
weights and summed back per token.

NVFP4 quantisation, in torch (what a real pipeline would do on the GPU):

* per tensor, an FP32 global scale ``g = amax / 6`` (one per activation tensor, one per
  expert weight), so that every block scale lies in (0, 1];
* per 16 consecutive K elements, an E4M3 block scale ``s = to_e4m3(amax_block / (6 g))``;
* each element rounded to the nearest FP4 E2M1 value of ``x / (s g)``, clamped to ±6, and
  packed two codes per byte (the first in the low nibble);
* the scales rearranged into the kernel's blocked layout (``to_blocked`` below, checked
  against ``nvfp4_aot.layouts.scales_to_blocked``).

The launch: tokens are grouped per expert (a gather of the quantised rows and their scale
rows), experts that received no token are left out, and one call runs every expert::

    nvfp4_aot.grouped_gemm(a, b, c, sfa, sfb, stream=torch.cuda.current_stream())
    # a[i]: uint8 (m_i, hidden/2)    tokens routed to expert i, packed FP4
    # b[i]: uint8 (ffn, hidden/2)    expert i's weight, packed FP4 (quantised once)
    # c[i]: float16 (m_i, ffn)       written by the kernel (poisoned with NaN first)
    # sfa[i], sfb[i]: float8_e4m3fn, blocked layout (uint8 works as well)

``grouped_gemm`` reads the tensors through DLPack / ``__cuda_array_interface__``, takes the
problem sizes from the shapes and caches one plan per list of sizes, so a new routing with
the same per-expert counts costs no setup. The kernel's C is ``sum (fp4 * s)(fp4 * s)``;
the global scales and router weights are applied when scattering back (``index_add_``).
Up to 120 experts run in one launch; more are split into several by the runtime.

Checks: every expert's C against ``nvfp4_aot.reference`` (float64, same quantised
operands), then the whole layer output against a float64 MoE of the same quantised
operands (relative error <= 1e-3, finite). The FP4 quantisation error against the
unquantised float64 layer is printed for information. Exits 1 on a mismatch.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

import nvfp4_aot
from nvfp4_aot.intmath import ceil_div
from nvfp4_aot.layouts import scales_to_blocked
from nvfp4_aot.reference import dequantize, relative_error

TOLERANCE = 1e-3
FP4_GRID = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
FP4_MIDPOINTS = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)


def quantize_nvfp4(t):
    """Quantise a float (rows, k) tensor to NVFP4.

    Returns ``(packed, scales, global_scale)``: packed FP4 codes, uint8 (rows, k/2);
    E4M3 block scales as their bytes, uint8 (rows, k/16), row-major (uint8 so that rows
    can be gathered with any indexing op); and the FP32 per-tensor scale.
    Dequantised: ``fp4(packed) * scales (per 16 elements) * global_scale``.
    """
    import torch

    rows, k = t.shape
    blocks = t.float().reshape(rows, k // 16, 16)
    amax = blocks.abs().amax(dim=-1)
    global_scale = float(amax.max().clamp_min(1e-30)) / 6.0
    scales = (amax / (6.0 * global_scale)).to(torch.float8_e4m3fn)  # round to nearest
    s = scales.float().unsqueeze(-1) * global_scale
    q = torch.where(s > 0, blocks / s, torch.zeros_like(blocks)).clamp(-6.0, 6.0)
    midpoints = torch.tensor(FP4_MIDPOINTS, device=t.device)
    magnitude = torch.bucketize(q.abs(), midpoints).to(torch.uint8)  # index into FP4_GRID
    codes = (magnitude | (torch.signbit(q).to(torch.uint8) << 3)).reshape(rows, k)
    packed = codes[:, 0::2] | (codes[:, 1::2] << 4)
    return packed.contiguous(), scales.view(torch.uint8), global_scale


def to_blocked(scales):
    """Row-major (rows, k/16) E4M3 bytes -> the blocked layout the kernel reads (1-D).

    128-row x 4-column tiles, zero padded, each stored as 32 x 16 bytes (cuBLAS's
    "1D block scaling factors layout"; GPU MODE's ``to_blocked``).
    """
    import torch

    rows, cols = scales.shape
    row_tiles, col_tiles = ceil_div(rows, 128), ceil_div(cols, 4)
    padded = torch.zeros((row_tiles * 128, col_tiles * 4), dtype=torch.uint8, device=scales.device)
    padded[:rows, :cols] = scales
    tiles = padded.view(row_tiles, 4, 32, col_tiles, 4).permute(0, 3, 2, 1, 4)
    return tiles.reshape(-1).view(torch.float8_e4m3fn)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", type=int, default=0, help="CUDA device ordinal")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random layer")
    parser.add_argument("--tokens", type=int, default=1024)
    parser.add_argument("--hidden", type=int, default=1024, help="K: a multiple of 32")
    parser.add_argument("--ffn", type=int, default=512, help="N: a multiple of 32")
    parser.add_argument("--experts", type=int, default=16)
    parser.add_argument("--top-k", type=int, default=2, choices=(1, 2))
    args = parser.parse_args(argv)

    import torch

    torch.manual_seed(args.seed)
    dev = torch.device("cuda", args.device)
    torch.cuda.set_device(dev)
    x = torch.randn(args.tokens, args.hidden, device=dev)
    router = torch.randn(args.hidden, args.experts, device=dev) / args.hidden**0.5
    weights = torch.randn(args.experts, args.ffn, args.hidden, device=dev) / args.hidden**0.5

    # route: top-k experts per token, softmax over the chosen logits
    top_logits, top_experts = (x @ router).topk(args.top_k, dim=-1)
    top_weights = top_logits.softmax(dim=-1)

    # quantise: activations once (rows are gathered per expert), weights once per expert
    x_packed, x_scales, x_global = quantize_nvfp4(x)
    w_quant = [quantize_nvfp4(weights[e]) for e in range(args.experts)]
    assert torch.equal(  # the torch blocked layout is the runtime's
        to_blocked(x_scales[:200]).view(torch.uint8).cpu(),
        torch.from_numpy(scales_to_blocked(x_scales[:200].cpu().numpy())),
    )

    # group tokens per expert
    flat_experts = top_experts.reshape(-1)
    order = torch.argsort(flat_experts, stable=True)
    counts = torch.bincount(flat_experts, minlength=args.experts).tolist()
    token_of = (order // args.top_k).split(counts)
    weight_of = top_weights.reshape(-1)[order].split(counts)
    experts = [e for e in range(args.experts) if counts[e] > 0]

    a = [x_packed[token_of[e]] for e in experts]
    sfa = [to_blocked(x_scales[token_of[e]]) for e in experts]
    b = [w_quant[e][0] for e in experts]
    sfb = [to_blocked(w_quant[e][1]) for e in experts]
    c = [torch.full((counts[e], args.ffn), float("nan"), dtype=torch.float16, device=dev)
         for e in experts]  # fmt: skip

    nvfp4_aot.grouped_gemm(a, b, c, sfa, sfb, stream=torch.cuda.current_stream())
    sizes = [(counts[e], args.ffn, args.hidden) for e in experts]
    launches = len(nvfp4_aot.get_plan(sizes, args.device).launches)  # the cached plan

    # scatter back: global scales and router weights, summed per token
    y = torch.zeros(args.tokens, args.ffn, device=dev)
    for i, e in enumerate(experts):
        scale = x_global * w_quant[e][2]
        y.index_add_(0, token_of[e], c[i].float() * scale * weight_of[e].unsqueeze(1))
    torch.cuda.synchronize()

    # checks, in float64 on the host
    x_deq = dequantize(x_packed.cpu().numpy(), x_scales.cpu().numpy())
    y_ref = np.zeros((args.tokens, args.ffn))
    y_exact = np.zeros((args.tokens, args.ffn))
    failures = 0
    for i, e in enumerate(experts):
        packed, scales, w_global = w_quant[e]
        w_deq = dequantize(packed.cpu().numpy(), scales.cpu().numpy())
        tokens = token_of[e].cpu().numpy()
        route = weight_of[e].double().cpu().numpy()[:, None]
        ref = x_deq[tokens] @ w_deq.T  # what the kernel computes
        out = c[i].cpu().numpy()
        error = relative_error(out, ref)
        ok = bool(np.isfinite(out).all()) and error <= TOLERANCE
        failures += not ok
        if not ok:
            print(f"  expert {e} (m={counts[e]}, n={args.ffn}, k={args.hidden}): "
                  f"rel err {error:.2e} MISMATCH")  # fmt: skip
        np.add.at(y_ref, tokens, ref * (x_global * w_global) * route)
        w_float = weights[e].double().cpu().numpy()
        np.add.at(y_exact, tokens, x[token_of[e]].double().cpu().numpy() @ w_float.T * route)

    y_host = y.cpu().numpy()
    layer_error = relative_error(y_host, y_ref)
    layer_ok = bool(np.isfinite(y_host).all()) and layer_error <= TOLERANCE
    print(
        f"torch {torch.__version__}: MoE {args.tokens} tokens x top-{args.top_k} of "
        f"{args.experts} experts, hidden {args.hidden} -> ffn {args.ffn}: {len(experts)} "
        f"experts with tokens ({min(counts)}..{max(counts)} each) in {launches} launch(es)"
    )
    print(f"  {len(experts) - failures}/{len(experts)} experts match the float64 reference")
    print(f"  layer output vs float64 MoE of the same FP4 operands: rel err {layer_error:.2e} "
          f"{'ok' if layer_ok else 'MISMATCH'}")  # fmt: skip
    print(f"  (FP4 quantisation error vs the unquantised layer: "
          f"{relative_error(y_host, y_exact):.3f})")  # fmt: skip
    return 1 if failures or not layer_ok else 0


if __name__ == "__main__":
    sys.exit(main())
