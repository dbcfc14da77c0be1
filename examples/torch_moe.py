"""PyTorch: an NVFP4 mixture-of-experts MLP, end to end on the GPU with no host sync.

The layer: ``T`` tokens of width ``hidden`` (BF16); a linear router picks each token's
top-k of ``E`` experts (softmax weights over the chosen logits); expert e computes
``silu(x W1g_e^T) * (x W1u_e^T)`` (W1 = [W1g; W1u] of shape (2 ffn, hidden)), then
``h W2_e^T`` (W2 of shape (hidden, ffn)); the results are scaled by the router weights
and summed back per token. Every step is on the GPU, nothing is read back to the host,
and the whole forward is one CUDA graph for any routing::

    r   = torch_ops.route(top_experts, E)                   # sort by expert, offsets
    g_x = torch_ops.global_scale(x)                         # 2688 / amax(|x|), device
    a1, sfa1 = torch_ops.quantize(x, g_x, r.offsets, index, "contiguous")
        # the baked quantizer: row i of a1 reads x[index[i]] (index = r.tokens), each
        # expert's scales in its 128-row padded segment: the GEMM's A and SFA, one launch
    c1  = torch_ops.moe_gemm(a1, w1, sfa1, w1_scales, r.offsets,       # ONE call, all E
                             alpha=w1_scale_2 / g_x, out_dtype=torch.bfloat16)
    h   = silu(gate) * up                                   # BF16, already in expert order
    a2, sfa2 = torch_ops.quantize(h, g_h, r.offsets, None, "contiguous")
    c2  = torch_ops.moe_gemm(a2, w2, sfa2, w2_scales, r.offsets,
                             alpha=w2_scale_2 / g_h, out_dtype=torch.bfloat16)
    y   = zeros.index_add_(0, r.tokens, c2 * router weight)

``r.offsets`` is int32 offsets[E + 1] on the device (expert e owns rows offsets[e] ..
offsets[e+1] of A and C). Experts that get no token cost nothing. See
``nvfp4_aot/moe.py`` for the layouts.

NVFP4, two-level scales (ModelOpt's convention, ``nvfp4_aot/quantize.py``): a tensor's
global scale is ``g = 2688 / amax`` (so the largest E4M3 block scale is 448), each 16
elements get ``sf = E4M3((g * amax16) / 6)`` and codes ``E2M1_rne(x * (g / sf))``;
``x ~ fp4 * sf / g``. The weights are quantized once on the host with
``nvfp4_aot.quantize.quantize`` (per expert, its own g; ``scale_2 = 1 / g``); the
activations on the GPU every step by ``torch_ops.quantize`` (``nvfp4_aot.QuantizePlan``,
the same bytes as the numpy function). The GEMM applies ``alpha[e] = scale_2(A) *
scale_2(B_e) = 1 / (g_x g_w[e])`` to its FP32 accumulator and writes BF16; alpha is
computed on the device each step from the activations' own global scale.

Runs, each checked (below): an eager forward under ``torch.cuda.set_sync_debug_mode
("error")`` (any host sync raises); with ``--graph``, the forward captured once in
``torch.cuda.graph`` and replayed with new tokens (new logits, a new routing) and with a
router that sends every token to the same top-k experts (the others empty); with
``--compile``, ``torch.compile(layer, fullgraph=True)``.

Checks: the quantizer's bytes (both activations) against ``nvfp4_aot.quantize.quantize``
of the same rows and global scale; both projections' C against float64 GEMMs of the same
quantized operands times alpha (the second with the GPU's quantized h), and the layer
output against the float64 layer of those operands (relative error <= 4e-3: BF16
outputs). The FP4 quantization error against the unquantized float64 layer is printed
for information. Exits 1 on a mismatch.
"""

from __future__ import annotations

import argparse
import contextlib
import sys

import numpy as np

from nvfp4_aot import torch_ops
from nvfp4_aot.layouts import blocked_to_scales
from nvfp4_aot.moe import MoeGemmPlan
from nvfp4_aot.moe_layout import scale_offsets
from nvfp4_aot.quantize import quantize
from nvfp4_aot.reference import TOLERANCE as TOLERANCES
from nvfp4_aot.reference import dequantize, relative_error
from nvfp4_aot.weights import quantize_weight

TOLERANCE = TOLERANCES["bfloat16"]  # BF16 C and y against float64


def quantize_experts(weights):
    """Per expert weights (E, n, k) -> on their device: packed (E, n, k/2), blocked
    scales (one buffer, E x blocked_scale_bytes(n, k)), scale_2 = 1/g (E,) float32; on the
    host: fp4 * sf (E, n, k) float64, the kernel's view of B. Once, off the hot path."""
    import torch

    q = quantize_weight(weights.float().cpu().numpy())  # nvfp4_aot.quantize.quantize per expert
    device = weights.device
    codes = np.stack([dequantize(q.packed[e], q.scales[e]) for e in range(q.experts)])
    return (
        torch.from_numpy(q.packed).to(device),
        torch.from_numpy(q.scales_blocked).to(device),
        torch.from_numpy(q.scale_2).to(device),
        codes,
    )


def make_layer_class():
    import torch

    class NvFp4MoeMlp(torch.nn.Module):
        """The MoE MLP with NVFP4 experts; ``forward(x)`` (BF16 (T, hidden)) returns
        ``(y, trace)``, y BF16, trace the intermediate tensors the checks read."""

        def __init__(self, router, w1, w2, top_k: int):
            super().__init__()
            self.experts, self.top_k = router.shape[1], top_k
            self.register_buffer("router", router)
            self.register_buffer("router_bias", torch.zeros_like(router[0]))
            self.w1, self.w1_scales, self.w1_scale2, self.w1_codes = quantize_experts(w1)
            self.w2, self.w2_scales, self.w2_scale2, self.w2_codes = quantize_experts(w2)

        def forward(self, x):
            logits = x.float() @ self.router + self.router_bias
            top_logits, top_experts = logits.topk(self.top_k, dim=-1)
            top_weights = top_logits.softmax(dim=-1)
            r = torch_ops.route(top_experts, self.experts)
            index = r.tokens.to(torch.int32)

            # gate/up: quantize x's rows in expert order, one grouped GEMM for all experts
            g_x = torch_ops.global_scale(x)
            a1, sfa1 = torch_ops.quantize(x, g_x, r.offsets, index, "contiguous")
            alpha1 = self.w1_scale2 / g_x  # input_scale * weight_scale_2, per expert
            c1 = torch_ops.moe_gemm(
                a1, self.w1, sfa1, self.w1_scales, r.offsets, alpha=alpha1,
                out_dtype=torch.bfloat16,
            )  # fmt: skip
            gate, up = c1.float().chunk(2, dim=1)
            h = (torch.nn.functional.silu(gate) * up).to(torch.bfloat16)

            # down: h is already in expert order; same offsets, same scale segments
            g_h = torch_ops.global_scale(h)
            a2, sfa2 = torch_ops.quantize(h, g_h, r.offsets, None, "contiguous")
            alpha2 = self.w2_scale2 / g_h
            c2 = torch_ops.moe_gemm(
                a2, self.w2, sfa2, self.w2_scales, r.offsets, alpha=alpha2,
                out_dtype=torch.bfloat16,
            )  # fmt: skip
            route_weight = top_weights.reshape(-1)[r.order]
            y = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
            y.index_add_(0, r.tokens, c2.float() * route_weight.unsqueeze(1))
            trace = {
                "tokens": r.tokens, "experts": r.experts, "offsets": r.offsets,
                "route_weight": route_weight, "x": x, "g_x": g_x, "a1": a1, "sfa1": sfa1,
                "h": h, "g_h": g_h, "a2": a2, "sfa2": sfa2, "alpha1": alpha1,
                "alpha2": alpha2, "c1": c1, "c2": c2,
            }  # fmt: skip
            return y.to(torch.bfloat16), trace

    return NvFp4MoeMlp


def bf16_bits(t) -> np.ndarray:
    """A BF16 tensor's uint16 bit patterns on the host (nvfp4_aot.quantize reads them)."""
    import torch

    return t.cpu().view(torch.int16).numpy().view(np.uint16)


def expert_rows(packed, blocked, offsets) -> tuple[np.ndarray, np.ndarray]:
    """The contiguous layout's A and SFA back to (rows, k/2) codes and row-major (rows,
    k/16) scales: expert e's rows offsets[e]..offsets[e+1], its scales in the segment
    starting at scale row scale_offsets(counts)[e]."""
    rows, half_k = packed.shape
    cols = half_k // 8
    row_bytes = -(-cols // 4) * 4
    counts = np.diff(offsets)
    scales = np.zeros((rows, cols), np.uint8)
    for e, first in enumerate(scale_offsets(counts)):
        m = int(counts[e])
        if m:
            start = int(first) * row_bytes
            segment = blocked[start : start + -(-m // 128) * 128 * row_bytes]
            scales[offsets[e] : offsets[e + 1]] = blocked_to_scales(segment, m, cols)
    return packed, scales


def check(layer, y, trace, label: str, x=None) -> bool:
    """One forward against float64 of the same quantized operands; print, return ok."""
    t = {name: v.cpu() for name, v in trace.items()}
    tokens, experts = t["tokens"].numpy(), t["experts"].numpy()
    offsets = t["offsets"].numpy().astype(np.int64)
    a1, s1 = expert_rows(t["a1"].numpy(), t["sfa1"].numpy(), offsets)
    a2, s2 = expert_rows(t["a2"].numpy(), t["sfa2"].numpy(), offsets)
    # the quantizer's bytes: nvfp4_aot.quantize of the same rows with the same g
    q1 = quantize(bf16_bits(t["x"])[tokens], t["g_x"].numpy()[0])
    q2 = quantize(bf16_bits(t["h"]), t["g_h"].numpy()[0])
    same = all(
        np.array_equal(ours, ref)
        for ours, ref in ((a1, q1.packed), (s1, q1.scales), (a2, q2.packed), (s2, q2.scales))
    )
    x64, h64 = dequantize(a1, s1), dequantize(a2, s2)  # fp4 * sf: 1 / g is in alpha
    alpha1, alpha2 = (t[name].double().numpy() for name in ("alpha1", "alpha2"))
    ref1, ref2 = np.zeros(t["c1"].shape), np.zeros(t["c2"].shape)
    for e in np.unique(experts):  # rows are sorted by expert
        rows = slice(offsets[e], offsets[e + 1])
        ref1[rows] = alpha1[e] * (x64[rows] @ layer.w1_codes[e].T)
        ref2[rows] = alpha2[e] * (h64[rows] @ layer.w2_codes[e].T)
    y_ref = np.zeros(tuple(y.shape))
    np.add.at(y_ref, tokens, ref2 * t["route_weight"].double().numpy()[:, None])
    y_host = y.cpu().double().numpy()
    errors = {
        "gate/up C": relative_error(t["c1"].double().numpy(), ref1),
        "down C": relative_error(t["c2"].double().numpy(), ref2),
        "layer": relative_error(y_host, y_ref),
    }
    ok = same and all(error <= TOLERANCE for error in errors.values())  # inf fails
    counts = np.diff(offsets)
    print(
        f"  {label}: {int((counts > 0).sum())}/{len(counts)} experts with tokens "
        f"({counts.min()}..{counts.max()} rows each); quantizer bytes "
        f"{'= numpy reference' if same else 'DIFFER from the numpy reference'}; rel err "
        + ", ".join(f"{name} {error:.2e}" for name, error in errors.items())
        + (" ok" if ok else " MISMATCH")
    )
    if x is not None:  # information: FP4 vs the unquantized layer
        print(f"    (FP4 quantization error vs the unquantized float64 layer: "
              f"{relative_error(y_host, exact_layer(layer, x)):.3f})")  # fmt: skip
    return ok


def exact_layer(layer, x) -> np.ndarray:
    """The layer in float64 from the unquantized weights (kept on the layer for this)."""
    x64 = x.double().cpu().numpy()
    logits = x64 @ layer.router.double().cpu().numpy() + layer.router_bias.double().cpu().numpy()
    top = np.argsort(-logits, axis=1, kind="stable")[:, : layer.top_k]
    chosen = np.take_along_axis(logits, top, axis=1)
    weights = np.exp(chosen - chosen.max(axis=1, keepdims=True))
    weights /= weights.sum(axis=1, keepdims=True)
    w1, w2 = layer.w1_float, layer.w2_float
    y = np.zeros_like(x64)
    for e in range(layer.experts):
        token, slot = np.nonzero(top == e)
        gate, up = np.split(x64[token] @ w1[e].T, 2, axis=1)
        h = gate / (1 + np.exp(-gate)) * up
        np.add.at(y, token, weights[token, slot][:, None] * (h @ w2[e].T))
    return y


@contextlib.contextmanager
def sync_debug_error():
    """Any host synchronization inside raises (torch.cuda.set_sync_debug_mode)."""
    import torch

    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode("default")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", type=int, default=0, help="CUDA device ordinal")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random layer")
    parser.add_argument("--tokens", type=int, default=512)
    parser.add_argument("--hidden", type=int, default=1024, help="a multiple of 64")
    parser.add_argument("--ffn", type=int, default=512, help="a multiple of 64")
    parser.add_argument("--experts", type=int, default=16)
    parser.add_argument("--top-k", type=int, default=2)
    parser.add_argument("--graph", action="store_true", help="capture once, replay new routings")
    parser.add_argument("--compile", action="store_true", help="torch.compile(fullgraph=True)")
    args = parser.parse_args(argv)

    import torch

    torch.manual_seed(args.seed)
    dev = torch.device("cuda", args.device)
    torch.cuda.set_device(dev)
    e, hidden, ffn = args.experts, args.hidden, args.ffn
    router = torch.randn(hidden, e, device=dev) / hidden**0.5
    w1 = torch.randn(e, 2 * ffn, hidden, device=dev) / hidden**0.5
    w2 = torch.randn(e, hidden, ffn, device=dev) / ffn**0.5
    layer = make_layer_class()(router, w1, w2, args.top_k)
    layer.w1_float, layer.w2_float = w1.double().cpu().numpy(), w2.double().cpu().numpy()
    x = torch.randn(args.tokens, hidden, device=dev).to(torch.bfloat16)
    print(
        f"torch {torch.__version__}: NVFP4 MoE MLP, {args.tokens} tokens x top-{args.top_k} "
        f"of {e} experts, hidden {hidden}, ffn {ffn}"
    )
    results = []

    layer(x)  # warm-up: creates the plans (a GEMM and a quantizer per projection)
    torch.cuda.synchronize()
    with sync_debug_error():
        y, trace = layer(x)
    torch.cuda.synchronize()
    results.append(check(layer, y, trace, "eager, no host sync", x=x))

    if args.graph:
        static_x = x.clone()
        side = torch.cuda.Stream()  # warm-up on a side stream, as torch.cuda.graph asks
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            layer(static_x)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_y, static_trace = layer(static_x)
        for label, tokens, bias in (
            ("graph replay", x, None),
            ("graph replay, new tokens", torch.randn_like(x), None),
            ("graph replay, all to experts 0..top_k-1", torch.randn_like(x), True),
        ):
            static_x.copy_(tokens)
            if bias:  # every other expert empty
                layer.router_bias[: args.top_k] = 100.0
            with sync_debug_error():
                graph.replay()
            torch.cuda.synchronize()
            results.append(check(layer, static_y, static_trace, label))
        layer.router_bias.zero_()
        del graph

    if args.compile:
        compiled = torch.compile(layer, fullgraph=True)
        x2 = torch.randn_like(x)
        y, trace = compiled(x2)
        torch.cuda.synchronize()
        results.append(check(layer, y, trace, "torch.compile(fullgraph=True)"))

    gemms = [p for p in torch_ops.plans() if isinstance(p, MoeGemmPlan)]
    launches = [len(p.layout.chunks) for p in gemms]
    print(
        f"  {len(torch_ops.plans())} plans ({len(gemms)} GEMM, "
        f"{len(torch_ops.plans()) - len(gemms)} quantizer), GEMM launches per call: {launches}"
    )
    print(f"{sum(results)}/{len(results)} runs match the float64 reference")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
