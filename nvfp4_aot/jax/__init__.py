"""NVFP4 MoE grouped GEMMs and the activation quantizer as JAX functions that work
inside ``jax.jit`` (XLA FFI).

Importing this package imports no jax; the functions import it on first use and
register the FFI target then (once per process). The GEMM is the baked kernels'
:class:`nvfp4_aot.MoeGemmPlan`, reached through XLA's typed FFI by a handler written in
Python (ctypes; no compiled shim)::

    import nvfp4_aot.jax as nj
    c = nj.moe_gemm(a, w, sfa, w_scales, offsets)                 # contiguous
    c = nj.moe_gemm(a, w, sfa, w_scales, masked_m, layout="masked")
    packed, scales = nj.quantize(x, g)                            # plain
    packed, sfa = nj.quantize(x, g, form="contiguous", routing=offsets, index=tokens)

Plans are made on the first execution for each (device, E, n, k, layout, capacity,
output dtype) and kept; each later call allocates nothing and never synchronises
(except as backpressure: see :mod:`nvfp4_aot.jax.handler`).
The call runs outside XLA's command buffers (CUDA graphs): see
:mod:`nvfp4_aot.jax.handler` for why. ``jax.vmap`` maps sequentially (one run per batch
element). On JAX's CPU backend the same target computes a float64 reference.

:func:`quantize` is the baked quantizer (:class:`nvfp4_aot.QuantizePlan`) under a second
target, ``nvfp4_aot_quantize`` (:mod:`nvfp4_aot.jax.quantize_handler`), with the same
plan cache, stream, error and CPU-reference rules.

Helpers for a MoE layer in JAX: :func:`route` (the contiguous layout from ``top_k``
expert ids), :func:`blocked_scales`, and :func:`quantize_standin`, the activation
quantizer written in jnp (kept as a reference and for comparison).
"""

from __future__ import annotations

_EXPORTS = {
    "moe_gemm": "ops",
    "prepare": "ops",
    "quantize": "ops",
    "prepare_quantize": "ops",
    "register": "handler",
    "plans": "handler",
    "release_plans": "handler",
    "TARGET": "handler",
    "check_moe_call": "checks",
    "check_quantize_call": "checks",
    "Routing": "routing",
    "route": "routing",
    "blocked_scales": "routing",
    "quantize_standin": "quantize_standin",
}

__all__ = list(_EXPORTS)

from ..lazy import lazy_exports  # noqa: E402  (after the names it serves)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
