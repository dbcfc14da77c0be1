"""The JAX functions: trace-time checks, then one XLA FFI call (imports jax)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ..errors import InvalidProblemError
from . import handler, quantize_handler
from .checks import check_moe_call, check_quantize_call

# vmap: XLA runs the call once per batch element (a loop), each a whole MoE GEMM
VMAP_METHOD = "sequential"


def moe_gemm(
    a, b, sfa, sfb, routing, *, layout="contiguous", alpha=None, out_dtype=jnp.float16, out=None
):
    """C = A_e @ B_e^T for the rows the device ``routing`` gives expert e, as a new array.

    Works inside ``jax.jit``: C is a result buffer XLA allocates, the GEMM runs on
    XLA's stream, the routing is read on the GPU only. Shapes and dtypes are checked
    while tracing (:func:`nvfp4_aot.jax.checks.check_moe_call`). Layouts as
    :mod:`nvfp4_aot.moe`::

        contiguous: a (T, k/2)  b (E, n, k/2)  routing int32 offsets[E + 1]  -> C (T, n)
        masked:     a (E, M, k/2)  b (E, n, k/2)  routing int32 masked_m[E]  -> C (E, M, n)

    a, b packed FP4 (uint8 or int8), sfa, sfb 1-D blocked E4M3 scales (uint8 or
    float8_e4m3fn). Rows no expert owns are unspecified on the GPU (whatever XLA's
    buffer held; NaN on the CPU reference): mask them before use, or pass ``out``.

    Parameters
    ----------
    alpha : float32 array (E,), optional
        Per-expert scale of the FP32 accumulator: expert e's rows are
        alpha[e] * A_e @ B_e^T (read on the GPU).
    out_dtype : float16 (default) or bfloat16.
    out : array of C's shape and dtype, optional
        C's initial contents: the result is ``out`` with the routed rows replaced, its
        unrouted rows kept (XLA aliases the buffer to the result: no copy when the
        caller donates it, ``jax.jit(..., donate_argnums=...)``, else one copy).
    """
    if out is not None:
        out_dtype = out.dtype
    call = check_moe_call(a, b, sfa, sfb, routing, layout, alpha, out_dtype)
    result = jax.ShapeDtypeStruct(call.c_shape, jnp.dtype(call.out_dtype))
    if out is not None and tuple(out.shape) != call.c_shape:
        raise InvalidProblemError(f"out must have shape {call.c_shape}, got {tuple(out.shape)}")
    if call.capacity == 0:  # no rows: nothing to run
        return out if out is not None else jnp.zeros(result.shape, result.dtype)
    handler.register()
    operands = [a, b, sfa, sfb, routing]  # no attributes: the handler reads shapes only
    if alpha is not None:
        operands.append(alpha)
    aliases = None
    if out is not None:
        aliases = {len(operands): 0}
        operands.append(out)
    run = jax.ffi.ffi_call(
        handler.TARGET, result, vmap_method=VMAP_METHOD, input_output_aliases=aliases
    )
    return run(*operands)


def prepare(
    a, b, sfa, sfb, routing, *, layout="contiguous", alpha=None, out_dtype=jnp.float16,
    device=None,
):  # fmt: skip
    """Make the plan a call with these operands (arrays or ``jax.ShapeDtypeStruct``)
    will use, now, instead of at its first execution (which allocates and synchronises
    once). ``device``: a ``jax.Device`` or CUDA ordinal (default: JAX's first GPU)."""
    call = check_moe_call(a, b, sfa, sfb, routing, layout, alpha, out_dtype)
    if call.capacity == 0:
        return None
    key = (_ordinal(device), call.experts, call.n, call.k, layout, call.capacity, call.out_dtype,
           alpha is not None)  # fmt: skip
    return handler.prepare_plan(key)


def quantize(
    x, global_scale, *, form="plain", routing=None, index=None, experts=None, capacity=None
):
    """NVFP4 activations by the baked quantizer kernel (:class:`nvfp4_aot.QuantizePlan`):
    ``(packed, scales)``, uint8 arrays XLA allocates.

    Works inside ``jax.jit``: one launch on XLA's stream, ``global_scale`` (float32, shape
    () or (1,), e.g. ``2688 / amax`` computed in the program), the routing and the index
    read on the GPU; the bytes of :func:`nvfp4_aot.quantize.quantize` with that g. Forms
    (x bfloat16 or float16; shapes checked while tracing)::

        plain       x (T, k)                            -> packed (T, k/2)
        contiguous  x (rows, k), routing offsets[E + 1] -> packed (capacity, k/2): row i
                    reads x[index[i]] (index int32[capacity], optional: else x[i]);
                    scales: each expert's 128-row padded segment, the contiguous MoE
                    GEMM's A and SFA (capacity defaults to len(index), else rows)
        masked      x (E, max_m, k), routing masked_m[E] -> packed (E, max_m, k/2)

    ``scales`` is 1-D, ``QuantizePlan(...).scale_bytes`` bytes in the blocked layout.
    Rows no expert owns, and scale rows past every expert's segment, are not written:
    unspecified on the GPU (0xFF on the CPU target). ``jax.vmap`` maps sequentially.
    """
    if isinstance(global_scale, (int, float)):
        global_scale = jnp.float32(global_scale)
    call = check_quantize_call(x, global_scale, form, routing, index, experts, capacity)
    results = (
        jax.ShapeDtypeStruct(call.out_shape, jnp.uint8),
        jax.ShapeDtypeStruct((call.scale_bytes,), jnp.uint8),
    )
    if call.problem is None:  # no rows: nothing to run
        return tuple(jnp.zeros(r.shape, r.dtype) for r in results)
    handler.register()
    operands = [x, global_scale] + [a for a in (routing, index) if a is not None]
    run = jax.ffi.ffi_call(quantize_handler.TARGET, results, vmap_method=VMAP_METHOD)
    return tuple(run(*operands))


def prepare_quantize(
    x, global_scale, *, form="plain", routing=None, index=None, experts=None, capacity=None,
    device=None,
):  # fmt: skip
    """Make the quantizer plan a :func:`quantize` call with these operands (arrays or
    ``jax.ShapeDtypeStruct``) will use, now (as :func:`prepare`)."""
    call = check_quantize_call(x, global_scale, form, routing, index, experts, capacity)
    if call.problem is None:
        return None
    p = call.problem
    sizes = (p.form, p.rows, p.capacity, p.k, p.experts, p.dtype)
    return quantize_handler.prepare_plan(("quantize", _ordinal(device), *sizes))


def _ordinal(device) -> int:
    """The CUDA ordinal of a ``jax.Device`` or int (default: JAX's first GPU)."""
    if device is None:
        device = jax.devices("gpu")[0]
    if isinstance(device, int):
        return device
    ordinal = getattr(device, "local_hardware_id", None)
    return device.id if ordinal is None else ordinal
