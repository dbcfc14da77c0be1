"""JAX: an NVFP4 mixture-of-experts MLP inside jax.jit, one grouped GEMM per projection.

The layer (as examples/torch_moe.py): ``T`` tokens of width ``hidden``; a linear router
picks each token's top-k of ``E`` experts with ``jax.lax.top_k`` (softmax weights over
the chosen logits); expert e computes ``silu(x W1g_e^T) * (x W1u_e^T)`` (W1 = [W1g; W1u],
(2 ffn, hidden)), then ``h W2_e^T`` (W2 (hidden, ffn)); the results are scaled by the
router weights and summed back per token. The whole forward is one jitted function: the
routing, the token permutation and the combine in JAX, the two projections our grouped
GEMMs through XLA's FFI (``nvfp4_aot.jax.moe_gemm``), nothing read back to the host::

    top_logits, top_experts = jax.lax.top_k(logits, top_k)
    r = nj.route(top_experts, E)                          # sort by expert, offsets
    g_x = 2688 / max|x|                                   # float32, on the device
    xq, sfa = nj.quantize(x, g_x, form="contiguous",      # the baked quantizer: row i
                          routing=r.offsets, index=r.tokens)  # reads x[tokens[i]]
    c1 = nj.moe_gemm(xq, w1, sfa, w1_scales, r.offsets,   # ONE call, all E
                     alpha=w1_scale_2 / g_x)              # 1 / (g_x g_w1[e]), per expert
    h = silu(gate) * up
    hq, sfa2 = nj.quantize(h, g_h, form="contiguous", routing=r.offsets)  # same segments
    c2 = nj.moe_gemm(hq, w2, sfa2, w2_scales, r.offsets, alpha=w2_scale_2 / g_h)
    y = zeros.at[r.tokens].add(c2 * router weight)

Weights are quantized once on the host with ``nvfp4_aot.quantize.quantize`` (numpy;
two-level scales, per expert). Activations (BF16) are quantized inside jit by
``nvfp4_aot.jax.quantize``, the baked quantizer kernel (``nvfp4_aot.QuantizePlan``, the
rules of ``nvfp4_aot/quantize.py``) through XLA's FFI: its contiguous form gathers the
rows through the routing's token index and writes each expert's 128-row padded scale
segment, the grouped GEMM's A and SFA in one launch. Every row of A and C is routed here (capacity T * top_k), so no row is left unspecified. The global scales are
ModelOpt's ``2688 / amax`` (block scales up to 448): the products only fit FP16 after the
per-expert alpha, which the GEMM applies to its FP32 accumulator (``alpha=``), computed
on the device every step from the activations' own global scale.

Checks (exit 1 on a mismatch): both projections' C against float64 GEMMs of the same
quantized operands and the layer output against the float64 layer of those operands
(relative error <= 1e-3); the same compiled function again with new tokens and with a
router that sends every token to experts 0..top_k-1 (the others empty). Printed for
information: the FP4 error against the unquantized float64 layer, and the same layer
with ``jax.lax.ragged_dot`` on the weights pre-dequantized to BF16 (its error and time
against ours). ``--platform cpu`` runs it on JAX's CPU backend (the float64 reference
target: slow, for checking the program without a GPU).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # share the GPU politely

import numpy as np

from nvfp4_aot.intmath import round_up
from nvfp4_aot.layouts import blocked_to_scales
from nvfp4_aot.quantize import quantize
from nvfp4_aot.reference import dequantize, relative_error

TOLERANCE = 1e-3
# ModelOpt's global scale g = 6 * 448 / amax: the largest block scale is E4M3's maximum
GLOBAL = np.float32(6 * 448)


class Weights:
    """The layer's parameters: router (float32), experts in NVFP4 (device arrays) and,
    for the checks and the BF16 baseline, the same experts dequantized (float64, host)."""

    def __init__(self, jax, rng, experts, hidden, ffn):
        self.experts = experts
        self.router = (rng.standard_normal((hidden, experts)) / hidden**0.5).astype(np.float32)
        self.w1_float = rng.standard_normal((experts, 2 * ffn, hidden)) / hidden**0.5
        self.w2_float = rng.standard_normal((experts, hidden, ffn)) / ffn**0.5
        self.w1, self.w1_scales, self.w1_scale2, self.w1_codes, self.w1_64 = self._quantize(
            jax, self.w1_float
        )
        self.w2, self.w2_scales, self.w2_scale2, self.w2_codes, self.w2_64 = self._quantize(
            jax, self.w2_float
        )

    @staticmethod
    def _quantize(jax, w):
        """Per expert, its own global scale: packed (E, n, k/2), blocked scales (one
        buffer), scale_2 = 1/g (E,) on the device; fp4 * sf and its float64 value on
        the host."""
        w32 = w.astype(np.float32)
        parts = [quantize(e, GLOBAL / np.abs(e).max()) for e in w32]
        packed = np.stack([q.packed for q in parts])
        blocked = np.concatenate([q.scales_blocked for q in parts])
        scale_2 = np.array([q.scale_2 for q in parts], np.float32)
        codes = np.stack([dequantize(q.packed, q.scales) for q in parts])  # the kernel's view
        g = np.array([q.global_scale for q in parts], np.float64)[:, None, None]
        device = [jax.device_put(x) for x in (packed, blocked, scale_2)]
        return (*device, codes, codes / g)


def make_forward(jax, weights: Weights, top_k: int):
    """The jitted NVFP4 layer: ``forward(x, router_bias) -> (y, trace)``."""
    import jax.numpy as jnp

    import nvfp4_aot.jax as nj

    w = weights

    @jax.jit
    def forward(x, router_bias):
        logits = x @ w.router + router_bias
        top_logits, top_experts = jax.lax.top_k(logits, top_k)
        top_weights = jax.nn.softmax(top_logits, axis=-1)
        r = nj.route(top_experts, w.experts)

        # gate/up: the quantizer reads the tokens in expert order (index r.tokens) and
        # writes A and each expert's scale segment; one grouped GEMM for all experts
        xb = x.astype(jnp.bfloat16)
        xg = GLOBAL / jnp.max(jnp.abs(xb)).astype(jnp.float32)  # float32 on the device
        xq, sfa1 = nj.quantize(xb, xg, form="contiguous", routing=r.offsets, index=r.tokens)
        alpha1 = w.w1_scale2 / xg  # input_scale * weight_scale_2, per expert, on the device
        c1 = nj.moe_gemm(xq, w.w1, sfa1, w.w1_scales, r.offsets, alpha=alpha1)
        gate, up = jnp.split(c1.astype(jnp.float32), 2, axis=1)
        h = (jax.nn.silu(gate) * up).astype(jnp.bfloat16)

        # down: h is already in expert order; same offsets, same scale segments
        hg = GLOBAL / jnp.max(jnp.abs(h)).astype(jnp.float32)
        hq, sfa2 = nj.quantize(h, hg, form="contiguous", routing=r.offsets)
        c2 = nj.moe_gemm(hq, w.w2, sfa2, w.w2_scales, r.offsets, alpha=w.w2_scale2 / hg)
        route_weight = top_weights.reshape(-1)[r.order]
        y = jnp.zeros_like(x).at[r.tokens].add(c2.astype(jnp.float32) * route_weight[:, None])
        trace = {
            "tokens": r.tokens, "experts": r.experts, "offsets": r.offsets,
            "route_weight": route_weight, "scale_rows": r.scale_rows, "xq": xq,
            "sfa1": sfa1, "xg": xg, "hq": hq, "sfa2": sfa2, "hg": hg, "c1": c1, "c2": c2,
            "alpha1": alpha1,
            "alpha2": w.w2_scale2 / hg,
        }  # fmt: skip
        return y, trace

    return forward


def make_bf16_forward(jax, weights: Weights, top_k: int):
    """The same layer with ``jax.lax.ragged_dot`` on BF16 weights (dequantized once)."""
    import jax.numpy as jnp

    w = weights
    w1 = jax.device_put(np.swapaxes(w.w1_64, 1, 2).astype(np.float32)).astype(jnp.bfloat16)
    w2 = jax.device_put(np.swapaxes(w.w2_64, 1, 2).astype(np.float32)).astype(jnp.bfloat16)

    @jax.jit
    def forward(x, router_bias):
        logits = x @ w.router + router_bias
        top_logits, top_experts = jax.lax.top_k(logits, top_k)
        top_weights = jax.nn.softmax(top_logits, axis=-1)
        flat = top_experts.reshape(-1)
        order = jnp.argsort(flat, stable=True)
        sizes = jnp.bincount(flat, length=w.experts).astype(jnp.int32)
        tokens = order // top_k
        xs = x[tokens].astype(jnp.bfloat16)
        g = jax.lax.ragged_dot(xs, w1, sizes, preferred_element_type=jnp.float32)
        gate, up = jnp.split(g, 2, axis=1)
        h = (jax.nn.silu(gate) * up).astype(jnp.bfloat16)
        c2 = jax.lax.ragged_dot(h, w2, sizes, preferred_element_type=jnp.float32)
        scale = top_weights.reshape(-1)[order]
        return jnp.zeros_like(x).at[tokens].add(c2 * scale[:, None])

    return forward


def check(weights: Weights, y, trace, label: str) -> bool:
    """One forward against float64 of the same quantized operands; print, return ok."""
    t = {name: np.asarray(v) for name, v in trace.items()}
    tokens, experts = t["tokens"], t["experts"]
    # A in expert order (times 1/g: applied with alpha), its scales read back from the
    # rows of the blocked SFA the routing gives each token row
    x64 = dequantize(t["xq"], row_scales(t["sfa1"], t["scale_rows"], 2 * t["xq"].shape[1]))
    h64 = dequantize(t["hq"], row_scales(t["sfa2"], t["scale_rows"], 2 * t["hq"].shape[1]))
    ref1, ref2 = np.zeros(t["c1"].shape), np.zeros(t["c2"].shape)
    alpha1, alpha2 = (np.asarray(t[name], np.float64) for name in ("alpha1", "alpha2"))
    for e in np.unique(experts):  # rows are sorted by expert
        rows = np.flatnonzero(experts == e)
        ref1[rows] = alpha1[e] * (x64[rows] @ weights.w1_codes[e].T)  # the kernel's C
        ref2[rows] = alpha2[e] * (h64[rows] @ weights.w2_codes[e].T)
    y_ref = np.zeros(y.shape)
    np.add.at(y_ref, tokens, ref2 * t["route_weight"][:, None])
    y_host = np.asarray(y, np.float64)
    errors = {
        "gate/up C": relative_error(t["c1"], ref1),
        "down C": relative_error(t["c2"], ref2),
        "layer": relative_error(y_host, y_ref),
    }
    ok = all(error <= TOLERANCE for error in errors.values())  # inf (non-finite) fails
    counts = np.diff(t["offsets"])
    print(
        f"  {label}: {int((counts > 0).sum())}/{len(counts)} experts with tokens "
        f"({counts.min()}..{counts.max()} rows each); rel err "
        + ", ".join(f"{name} {error:.2e}" for name, error in errors.items())
        + (" ok" if ok else " MISMATCH")
    )
    return ok


def row_scales(blocked, scale_rows, k: int) -> np.ndarray:
    """Row-major E4M3 scale bytes (rows, k/16) of the given rows of a blocked buffer."""
    cols = k // 16
    total_rows = blocked.size // round_up(cols, 4)
    return blocked_to_scales(blocked, total_rows, cols)[scale_rows]


def exact_layer(weights: Weights, x, router_bias, top_k: int) -> np.ndarray:
    """The layer in float64 from the unquantized weights."""
    x64 = np.asarray(x, np.float64)
    logits = x64 @ weights.router.astype(np.float64) + np.asarray(router_bias, np.float64)
    top = np.argsort(-logits, axis=1, kind="stable")[:, :top_k]
    chosen = np.take_along_axis(logits, top, axis=1)
    p = np.exp(chosen - chosen.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    y = np.zeros_like(x64)
    for e in range(weights.experts):
        token, slot = np.nonzero(top == e)
        gate, up = np.split(x64[token] @ weights.w1_float[e].T, 2, axis=1)
        h = gate / (1 + np.exp(-gate)) * up
        np.add.at(y, token, p[token, slot][:, None] * (h @ weights.w2_float[e].T))
    return y


def per_call_ms(jax, fn, args, repeats: int) -> float:
    jax.block_until_ready(fn(*args))  # compiled and warm
    start = time.perf_counter()
    for _ in range(repeats):
        out = fn(*args)
    jax.block_until_ready(out)
    return (time.perf_counter() - start) / repeats * 1e3


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", type=int, default=0, help="index into jax.devices()")
    parser.add_argument("--platform", default=None, help="jax platform (default: jax's)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random layer")
    parser.add_argument("--tokens", type=int, default=512)
    parser.add_argument("--hidden", type=int, default=1024, help="a multiple of 64")
    parser.add_argument("--ffn", type=int, default=512, help="a multiple of 64")
    parser.add_argument("--experts", type=int, default=16)
    parser.add_argument("--top-k", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=50, help="timed calls per layer")
    args = parser.parse_args(argv)

    import jax

    device = jax.devices(args.platform)[args.device]
    rng = np.random.default_rng(args.seed)
    with jax.default_device(device):
        weights = Weights(jax, rng, args.experts, args.hidden, args.ffn)
        forward = make_forward(jax, weights, args.top_k)
        bf16_forward = make_bf16_forward(jax, weights, args.top_k)
        print(
            f"jax {jax.__version__} on {device.device_kind}: NVFP4 MoE MLP, {args.tokens} tokens "
            f"x top-{args.top_k} of {args.experts} experts, hidden {args.hidden}, ffn {args.ffn}"
        )
        x = jax.device_put(rng.standard_normal((args.tokens, args.hidden)).astype(np.float32))
        zero_bias = jax.device_put(np.zeros(args.experts, np.float32))
        results = []
        y, trace = forward(x, zero_bias)
        results.append(check(weights, y, trace, "jit"))
        exact = exact_layer(weights, x, zero_bias, args.top_k)
        y_bf16 = bf16_forward(x, zero_bias)
        print(
            f"    (vs the unquantized float64 layer: NVFP4 {relative_error(np.asarray(y), exact):.3f}, "
            f"BF16 ragged_dot on the dequantized NVFP4 weights "
            f"{relative_error(np.asarray(y_bf16, np.float64), exact):.3f})"
        )
        x2 = jax.device_put(rng.standard_normal(x.shape).astype(np.float32))
        y, trace = forward(x2, zero_bias)
        results.append(check(weights, y, trace, "same compiled function, new tokens"))
        bias = np.zeros(args.experts, np.float32)
        bias[: args.top_k] = 100.0  # every other expert empty
        y, trace = forward(x2, jax.device_put(bias))
        results.append(check(weights, y, trace, f"all tokens to experts 0..{args.top_k - 1}"))
        compiled = forward._cache_size() if hasattr(forward, "_cache_size") else "?"
        print(f"  compiled once for every routing: {compiled} executable(s) in the jit cache")

        ours = per_call_ms(jax, forward, (x, zero_bias), args.repeats)
        theirs = per_call_ms(jax, bf16_forward, (x, zero_bias), args.repeats)
        print(
            f"  layer time per call: NVFP4 (ours) {ours:.3f} ms, BF16 ragged_dot {theirs:.3f} ms "
            f"({args.repeats} calls each, async dispatch, one block at the end)"
        )
    print(f"{sum(results)}/{len(results)} runs match the float64 reference")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
