"""PyTorch: an NVFP4 mixture-of-experts MLP, one grouped GEMM per projection, routed on the GPU.

The layer: ``T`` tokens of width ``hidden``; a linear router picks each token's top-k of
``E`` experts (softmax weights over the chosen logits); expert e computes
``silu(x W1g_e^T) * (x W1u_e^T)`` (W1 = [W1g; W1u] of shape (2 ffn, hidden)), then
``h W2_e^T`` (W2 of shape (hidden, ffn)); the results are scaled by the router weights
and summed back per token. The whole forward stays on the GPU, reads nothing back to the
host, and is one CUDA graph for any routing::

    logits -> topk -> r = torch_ops.route(top_experts, E)     # sort by expert, offsets
    a1  = x_packed[r.tokens]                                 # (T*top_k, hidden/2) FP4
    sfa = torch_ops.blocked_scales(x_scales[r.tokens], r.scale_rows, r.scale_row_count)
    c1  = torch_ops.moe_gemm(a1, w1, sfa, w1_scales, r.offsets)        # ONE call, all E
    h   = silu(gate) * up  -> quantised to NVFP4 (same rows, same scale segments)
    c2  = torch_ops.moe_gemm(h_packed, w2, sfa2, w2_scales, r.offsets)  # ONE call
    y   = zeros.index_add_(0, r.tokens, c2 * router weight * global scales)

``r.offsets`` is int32 offsets[E + 1] on the device (expert e owns rows offsets[e] ..
offsets[e+1] of A and C). The activation scales are in the contiguous layout's blocked
form: row i of expert e's tokens at blocked row ``scale_offsets[e] + i``, every expert's
segment starting on a 128-row boundary, padding rows zero (``r.scale_rows``). Experts
that get no token cost nothing. See ``nvfp4_aot/moe.py`` for the layouts.

NVFP4 quantisation, in torch on the GPU (``quantize_nvfp4``):

* per tensor, an FP32 global scale ``g = amax / 6`` -- a 0-dim tensor, never read on the
  host -- so that every block scale lies in (0, 1];
* per 16 consecutive K elements, an E4M3 block scale ``s = to_e4m3(amax_block / (6 g))``;
* each element rounded to the nearest FP4 E2M1 value of ``x / (s g)``, clamped to +-6, and
  packed two codes per byte (the first in the low nibble).

The kernel's C is ``sum (fp4 * s)(fp4 * s)``; the global scales are applied per row
afterwards (the weights' global scale by the row's expert).

Runs, each checked (below): an eager forward under ``torch.cuda.set_sync_debug_mode
("error")`` (any host sync raises); with ``--graph``, the forward captured once in
``torch.cuda.graph`` and replayed with new tokens (new logits, a new routing) and with a
router that sends every token to the same top-k experts (the others empty); with
``--compile``, ``torch.compile(layer, fullgraph=True)``.

Checks: both projections' C against float64 GEMMs of the same quantised operands (the
second with the GPU's quantised h), and the layer output against the float64 layer of
those operands (relative error <= 1e-3, finite). The FP4 quantisation error against the
unquantised float64 layer is printed for information. Exits 1 on a mismatch.
"""

from __future__ import annotations

import argparse
import contextlib
import sys

import numpy as np

from nvfp4_aot import torch_ops
from nvfp4_aot.layouts import blocked_to_scales, scales_to_blocked
from nvfp4_aot.reference import dequantize, relative_error

TOLERANCE = 1e-3
FP4_MIDPOINTS = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)  # between 0, .5, 1, 1.5, 2, 3, 4, 6


def quantize_nvfp4(t):
    """Quantise a float (rows, k) tensor to NVFP4 on its device, without host syncs.

    Returns ``(packed, scales, global_scale)``: packed FP4 codes, uint8 (rows, k/2);
    E4M3 block scales as their bytes, uint8 (rows, k/16), row-major (uint8 so that rows
    can be gathered with any indexing op); and the FP32 per-tensor scale (0-dim tensor).
    Dequantised: ``fp4(packed) * scales (per 16 elements) * global_scale``.
    """
    import torch

    rows, k = t.shape
    blocks = t.float().reshape(rows, k // 16, 16)
    amax = blocks.abs().amax(dim=-1)
    global_scale = amax.amax().clamp_min(1e-30) / 6.0
    scales = (amax / (6.0 * global_scale)).to(torch.float8_e4m3fn)  # round to nearest
    s = scales.float().unsqueeze(-1) * global_scale
    q = torch.where(s > 0, blocks / s, 0.0).clamp(-6.0, 6.0)
    magnitude = torch.zeros_like(q, dtype=torch.uint8)  # index into the FP4 grid, 0..7
    for midpoint in FP4_MIDPOINTS:
        magnitude = magnitude + (q.abs() > midpoint).to(torch.uint8)
    codes = (magnitude | ((q < 0).to(torch.uint8) << 3)).reshape(rows, k)
    packed = codes[:, 0::2] | (codes[:, 1::2] << 4)
    return packed.contiguous(), scales.view(torch.uint8), global_scale


def to_blocked(scales):
    """Row-major (rows, k/16) E4M3 bytes -> the blocked layout the kernel reads (1-D).

    128-row x 4-column tiles, zero padded, each stored as 32 x 16 bytes (cuBLAS's
    "1D block scaling factors layout"; ``nvfp4_aot.layouts.scales_to_blocked``).
    """
    import torch

    rows = scales.shape[0]
    every_row = torch.arange(rows, device=scales.device)
    padded_rows = -(-rows // 128) * 128
    return torch_ops.blocked_scales(scales, every_row, padded_rows)


def quantize_experts(weights):
    """Per expert weights (E, n, k) -> packed (E, n, k/2), blocked scales (one buffer,
    E x blocked_scale_bytes(n, k)), global scales (E,) float32. Once, off the hot path."""
    import torch

    parts = [quantize_nvfp4(w) for w in weights]
    packed = torch.stack([p[0] for p in parts])
    blocked = torch.cat([to_blocked(p[1]) for p in parts])
    return packed, blocked, torch.stack([p[2] for p in parts]).float()


def make_layer_class():
    import torch

    class NvFp4MoeMlp(torch.nn.Module):
        """The MoE MLP with NVFP4 experts; ``forward(x)`` returns ``(y, trace)``, where
        trace holds the intermediate tensors the checks read."""

        def __init__(self, router, w1, w2, top_k: int):
            super().__init__()
            self.experts, self.top_k = router.shape[1], top_k
            self.register_buffer("router", router)
            self.register_buffer("router_bias", torch.zeros_like(router[0]))
            self.w1, self.w1_scales, self.w1_global = quantize_experts(w1)
            self.w2, self.w2_scales, self.w2_global = quantize_experts(w2)

        def forward(self, x):
            logits = x @ self.router + self.router_bias
            top_logits, top_experts = logits.topk(self.top_k, dim=-1)
            top_weights = top_logits.softmax(dim=-1)
            r = torch_ops.route(top_experts, self.experts)

            # gate/up projection: tokens in expert order, one grouped GEMM for all experts
            x_packed, x_scales, x_global = quantize_nvfp4(x)
            sfa1 = torch_ops.blocked_scales(x_scales[r.tokens], r.scale_rows, r.scale_row_count)
            c1 = torch_ops.moe_gemm(x_packed[r.tokens], self.w1, sfa1, self.w1_scales, r.offsets)
            g = c1.float() * (x_global * self.w1_global[r.experts]).unsqueeze(1)
            gate, up = g.chunk(2, dim=1)
            h = torch.nn.functional.silu(gate) * up

            # down projection: h is already in expert order; same offsets, same segments
            h_packed, h_scales, h_global = quantize_nvfp4(h)
            sfa2 = torch_ops.blocked_scales(h_scales, r.scale_rows, r.scale_row_count)
            c2 = torch_ops.moe_gemm(h_packed, self.w2, sfa2, self.w2_scales, r.offsets)
            scale = top_weights.reshape(-1)[r.order] * h_global * self.w2_global[r.experts]
            y = torch.zeros_like(x).index_add_(0, r.tokens, c2.float() * scale.unsqueeze(1))
            trace = {
                "tokens": r.tokens, "experts": r.experts, "offsets": r.offsets,
                "route_weight": top_weights.reshape(-1)[r.order],
                "x_packed": x_packed, "x_scales": x_scales,
                "h_packed": h_packed, "h_scales": h_scales, "h_global": h_global,
                "c1": c1, "c2": c2,
            }  # fmt: skip
            return y, trace

    return NvFp4MoeMlp


class HostWeights:
    """The layer's quantised experts dequantised to float64 on the host (for checks)."""

    def __init__(self, layer):
        self.w1 = self._dequantize(layer.w1, layer.w1_scales)
        self.w2 = self._dequantize(layer.w2, layer.w2_scales)
        self.w1_global = layer.w1_global.double().cpu().numpy()
        self.w2_global = layer.w2_global.double().cpu().numpy()

    @staticmethod
    def _dequantize(packed, blocked):
        experts, n, half_k = packed.shape
        packed = packed.cpu().numpy()
        per_expert = blocked.view(-1).cpu().numpy().reshape(experts, -1)
        return [
            dequantize(packed[e], blocked_to_scales(per_expert[e], n, half_k // 8))
            for e in range(experts)
        ]


def check(host: HostWeights, y, trace, label: str, x=None, layer=None) -> bool:
    """Compare one forward with float64 of the same quantised operands; print, return ok."""
    t = {name: v.cpu() for name, v in trace.items()}
    tokens, experts = t["tokens"].numpy(), t["experts"].numpy()
    x64 = dequantize(t["x_packed"].numpy(), t["x_scales"].numpy())
    h64 = dequantize(t["h_packed"].numpy(), t["h_scales"].numpy())
    ref1 = np.zeros(t["c1"].shape)
    ref2 = np.zeros(t["c2"].shape)
    for e in np.unique(experts):  # rows are sorted by expert
        rows = np.flatnonzero(experts == e)
        ref1[rows] = x64[tokens[rows]] @ host.w1[e].T
        ref2[rows] = h64[rows] @ host.w2[e].T
    scale = t["route_weight"].double().numpy() * float(t["h_global"]) * host.w2_global[experts]
    y_ref = np.zeros(tuple(y.shape))
    np.add.at(y_ref, tokens, ref2 * scale[:, None])
    y_host = y.cpu().double().numpy()
    errors = {
        "gate/up C": relative_error(t["c1"].numpy(), ref1),
        "down C": relative_error(t["c2"].numpy(), ref2),
        "layer": relative_error(y_host, y_ref),
    }
    ok = all(error <= TOLERANCE for error in errors.values())  # inf (non-finite) fails
    counts = np.diff(t["offsets"].numpy())
    print(
        f"  {label}: {int((counts > 0).sum())}/{len(counts)} experts with tokens "
        f"({counts.min()}..{counts.max()} rows each); rel err "
        + ", ".join(f"{name} {error:.2e}" for name, error in errors.items())
        + (" ok" if ok else " MISMATCH")
    )
    if x is not None and layer is not None:  # information: FP4 vs the unquantised layer
        print(f"    (FP4 quantisation error vs the unquantised layer: "
              f"{relative_error(y_host, exact_layer(layer, x)):.3f})")  # fmt: skip
    return ok


def exact_layer(layer, x) -> np.ndarray:
    """The layer in float64 from the unquantised weights (kept on the layer for this)."""
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
    """Any host synchronisation inside raises (torch.cuda.set_sync_debug_mode)."""
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
    host = HostWeights(layer)
    x = torch.randn(args.tokens, hidden, device=dev)
    x_scales = quantize_nvfp4(x)[1][:200]
    assert torch.equal(  # the torch blocked layout is the runtime's
        to_blocked(x_scales).cpu(), torch.from_numpy(scales_to_blocked(x_scales.cpu().numpy()))
    )
    print(
        f"torch {torch.__version__}: NVFP4 MoE MLP, {args.tokens} tokens x top-{args.top_k} "
        f"of {e} experts, hidden {hidden}, ffn {ffn}"
    )
    results = []

    layer(x)  # warm-up: creates the two plans (one per projection), outside sync checks
    torch.cuda.synchronize()
    with sync_debug_error():
        y, trace = layer(x)
    torch.cuda.synchronize()
    results.append(check(host, y, trace, "eager, no host sync", x=x, layer=layer))

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
            results.append(check(host, static_y, static_trace, label))
        layer.router_bias.zero_()
        del graph

    if args.compile:
        compiled = torch.compile(layer, fullgraph=True)
        x2 = torch.randn_like(x)
        y, trace = compiled(x2)
        torch.cuda.synchronize()
        results.append(check(host, y, trace, "torch.compile(fullgraph=True)"))

    launches = [len(p.layout.chunks) for p in torch_ops.plans()]
    print(f"  {len(torch_ops.plans())} plans, GEMM launches per call: {launches}")
    print(f"{sum(results)}/{len(results)} runs match the float64 reference")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
