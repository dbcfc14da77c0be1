"""The JAX functions: trace-time checks, then one XLA FFI call (imports jax)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ..errors import InvalidProblemError
from . import handler
from .checks import check_moe_call

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
    if device is None:
        device = jax.devices("gpu")[0]
    ordinal = getattr(device, "local_hardware_id", None)
    ordinal = device if ordinal is None and isinstance(device, int) else ordinal
    if ordinal is None:
        ordinal = device.id
    key = (ordinal, call.experts, call.n, call.k, layout, call.capacity, call.out_dtype,
           alpha is not None)  # fmt: skip
    return handler.prepare_plan(key)
