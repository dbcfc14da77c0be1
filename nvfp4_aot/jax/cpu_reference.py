"""The CPU handlers' computations: the MoE GEMM in float64 on XLA's host buffers (numpy),
and the quantizer's bytes (:func:`quantize_reference`, at the end).

Slow and exact (FP16/BF16 rounding of the float64 result): for tests and for checking a
JAX pipeline on a machine without a GPU. Rows no expert owns are NaN, so that a program
reading them shows it (on the GPU they are unspecified). Unlike the GPU kernels, a
routing the kernels would clamp (offsets out of order or past the capacity, negative
counts) raises InvalidProblemError, which JAX reports as the call's error.
"""

from __future__ import annotations

import ctypes

import numpy as np

from ..layouts import encode_output
from ..reference import moe_gemm_reference
from . import xla_ffi


def host_array(buffer, dtype=None) -> np.ndarray:
    """A numpy view of a host XLA buffer (no copy)."""
    shape = xla_ffi.shape(buffer)
    dtype = np.dtype(dtype or _numpy_dtype(buffer))
    count = int(np.prod(shape, dtype=np.int64))
    if count == 0:
        return np.zeros(shape, dtype)
    raw = (ctypes.c_char * (count * dtype.itemsize)).from_address(buffer.data)
    return np.frombuffer(raw, dtype=dtype).reshape(shape)


def _numpy_dtype(buffer):
    name = xla_ffi.dtype_name(buffer)
    if name in ("bfloat16", "float8_e4m3fn"):
        return np.uint16 if name == "bfloat16" else np.uint8  # handled as raw bits
    return np.dtype(name)


def moe_reference(layout: str, ops, alpha_buffer, c_buffer, fill_nan: bool = True) -> None:
    """C = alpha_e * A_e @ B_e^T per expert (:func:`nvfp4_aot.reference.moe_gemm_reference`),
    the routing read from the host buffer; rows no expert owns keep C's contents (XLA's
    fresh buffer: NaN written first, unless the call passed ``out``: ``fill_nan`` False)."""
    a, b, sfa, sfb = (host_array(op, np.uint8) for op in ops[:4])
    routing = host_array(ops[4], np.int32)
    alpha = host_array(alpha_buffer, np.float32) if alpha_buffer is not None else None
    out_dtype = xla_ffi.dtype_name(c_buffer)
    c = host_array(c_buffer, np.uint16)
    if fill_nan:
        c[...] = _bits(np.full(c.shape, np.nan), out_dtype)
    for e, start, result in moe_gemm_reference(layout, a, b, sfa, sfb, routing, alpha):
        target = c[e, : len(result)] if layout == "masked" else c[start : start + len(result)]
        target[...] = _bits(result, out_dtype)


def _bits(values: np.ndarray, dtype: str) -> np.ndarray:
    """float64 -> float16 or bfloat16 (round to nearest even) as its uint16 bits."""
    return encode_output(values, dtype).view(np.uint16)


# the quantizer -------------------------------------------------------------------------

#: what the CPU target leaves in the bytes a quantizer run does not write (unspecified on
#: the GPU: whatever XLA's buffer held), so that a program reading them shows it
UNWRITTEN = 0xFF


def quantize_reference(problem, x_buffer, g_buffer, routing_buffer, index_buffer, out_buffer,
                       scales_buffer) -> None:  # fmt: skip
    """The quantizer kernel's outputs for ``problem`` on XLA's host buffers: the bytes
    of :func:`nvfp4_aot.quantize.quantize` where the kernel writes them, placed by the
    kernel's row map (:func:`nvfp4_aot.quantize_routing.expected_outputs`: counts and
    index entries clamped as the kernel clamps them), :data:`UNWRITTEN` elsewhere."""
    from ..quantize_routing import expected_outputs

    x = host_array(x_buffer).reshape(problem.rows, problem.k)  # bfloat16 as uint16 bits
    g = np.float32(host_array(g_buffer, np.float32).reshape(-1)[0])
    routing = None if routing_buffer is None else host_array(routing_buffer, np.int32)
    index = None if index_buffer is None else host_array(index_buffer, np.int32)
    expected = expected_outputs(problem, x, g, routing, index)
    for buffer, want, written in (
        (out_buffer, expected.out, expected.out_written),
        (scales_buffer, expected.scales, expected.scales_written),
    ):
        target = host_array(buffer, np.uint8).reshape(-1)
        target[...] = np.where(written, want, np.uint8(UNWRITTEN))
