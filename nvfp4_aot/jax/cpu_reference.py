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

from ..blocked import SF_VEC_SIZE, blocked_scale_bytes
from ..errors import InvalidProblemError
from ..intmath import round_up
from ..layouts import blocked_to_scales
from ..moe_layout import scale_offsets
from ..reference import dequantize
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
    """C = alpha_e * A_e @ B_e^T per expert, the routing read from the host buffer; rows
    no expert owns keep C's contents (XLA's fresh buffer: NaN written first, unless the
    call passed ``out``: ``fill_nan`` False)."""
    a = host_array(ops[0], np.uint8)
    b = host_array(ops[1], np.uint8)
    sfa = host_array(ops[2], np.uint8)
    sfb = host_array(ops[3], np.uint8)
    values = host_array(ops[4], np.int32).astype(np.int64)
    alpha = host_array(alpha_buffer, np.float32) if alpha_buffer is not None else None
    out_dtype = xla_ffi.dtype_name(c_buffer)
    c = host_array(c_buffer, np.uint16)
    experts, n, half_k = b.shape
    k = 2 * half_k
    capacity = a.shape[0] if layout == "contiguous" else a.shape[1]
    cols = k // SF_VEC_SIZE
    row_bytes = round_up(cols, 4)
    if fill_nan:
        c[...] = _encode(np.full(c.shape, np.nan), out_dtype)
    if layout == "masked":
        if (values < 0).any():
            raise InvalidProblemError(f"routing: masked_m must be >= 0, got {values}")
        counts = np.minimum(values, capacity)
        starts = np.zeros(experts, dtype=np.int64)
        sfa_at = [e * blocked_scale_bytes(capacity, k) for e in range(experts)]
    else:
        counts = np.diff(values)
        if values[0] != 0 or (counts < 0).any() or values[-1] > capacity:
            raise InvalidProblemError(
                f"routing: offsets must rise from 0 to at most {capacity}, got {values}"
            )
        starts = values[:-1]
        sfa_at = [row * row_bytes for row in scale_offsets(counts)]
    b_bytes = blocked_scale_bytes(n, k)
    for e in range(experts):
        m, start = int(counts[e]), int(starts[e])
        if m == 0:
            continue
        rows = a[e] if layout == "masked" else a
        segment = sfa[sfa_at[e] : sfa_at[e] + round_up(m, 128) * row_bytes]
        a64 = dequantize(rows[start : start + m], blocked_to_scales(segment, m, cols))
        b64 = dequantize(b[e], blocked_to_scales(sfb[e * b_bytes : (e + 1) * b_bytes], n, cols))
        result = a64 @ b64.T
        if alpha is not None:
            result *= float(alpha[e])
        target = c[e, :m] if layout == "masked" else c[start : start + m]
        target[...] = _encode(result, out_dtype)


def _encode(values: np.ndarray, dtype: str) -> np.ndarray:
    """float64 -> the bits of float16 or bfloat16 (round to nearest even), as uint16."""
    if dtype == "float16":
        return values.astype(np.float16).view(np.uint16)
    bits = values.astype(np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16  # RNE on the dropped 16 bits
    nan = np.isnan(values)
    return np.where(nan, np.uint64(0x7FC0), rounded).astype(np.uint16)


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
