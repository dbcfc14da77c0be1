"""float64 reference for NVFP4 block-scaled (grouped) GEMM, numpy only.

Every dequantized element (an FP4 value times an E4M3 scale) and every product of two
of them is exact in float64; only the K-sum rounds, at about 1e-16 relative, far below
the FP16 rounding of the kernel's output. So the reference is, for testing purposes,
the exact answer.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from nvfp4_aot.blocked import blocked_scale_bytes
from nvfp4_aot.errors import InvalidProblemError
from nvfp4_aot.intmath import round_up
from nvfp4_aot.layouts import (
    SF_VEC_SIZE,
    Problem,
    blocked_to_scales,
    e4m3_to_float,
    fp4_to_float,
    unpack_fp4,
)
from nvfp4_aot.moe_layout import SF_BLOCK_ROWS, scale_offsets

# The relative (Frobenius) error a correct kernel's output stays within, per output dtype:
# about twice float16's unit roundoff (2^-11) and about bfloat16's (2^-8). Rounding the
# exact result to the dtype is the error; the FP32 accumulation adds far less.
TOLERANCE = {"float16": 1e-3, "bfloat16": 4e-3}


def dequantize(packed, scales) -> np.ndarray:
    """Expand packed FP4 data and its row-major E4M3 scales to float64.

    Parameters
    ----------
    packed : array_like of uint8, shape (rows, k // 2)
        Two E2M1 codes per byte, the first in the low nibble.
    scales : array_like of uint8, shape (rows, k // 16)
        One E4M3 byte per 16 consecutive elements of a row (not the blocked layout).

    Returns
    -------
    numpy.ndarray of float64, shape (rows, k)
        ``out[r, j] = fp4(packed)[r, j] * e4m3(scales)[r, j // 16]``.
    """
    packed = np.asarray(packed)
    scales = np.asarray(scales)
    if packed.ndim != 2 or scales.ndim != 2:
        raise ValueError(
            f"packed and scales must be 2-D, got shapes {packed.shape} and {scales.shape}"
        )
    rows, k = packed.shape[0], packed.shape[1] * 2
    if k % SF_VEC_SIZE or scales.shape != (rows, k // SF_VEC_SIZE):
        raise ValueError(
            f"scales for packed data of shape {packed.shape} (k={k}) must have shape "
            f"({rows}, {k // SF_VEC_SIZE}) with k a multiple of {SF_VEC_SIZE}, "
            f"got {scales.shape}"
        )
    values = fp4_to_float(unpack_fp4(packed))
    return values * np.repeat(e4m3_to_float(scales), SF_VEC_SIZE, axis=1)


def reference_gemm(problem: Problem) -> np.ndarray:
    """C = dequant(A) @ dequant(B).T in float64, shape (m, n).

    Compare a kernel's FP16 output against this with :func:`relative_error`, or round
    it to FP16 for an elementwise check.
    """
    a = dequantize(problem.a, problem.sfa)
    b = dequantize(problem.b, problem.sfb)
    return a @ b.T


def grouped_reference(problems: Iterable[Problem]) -> list[np.ndarray]:
    """:func:`reference_gemm` for each problem of a group, in order."""
    return [reference_gemm(problem) for problem in problems]


def relative_error(out, ref) -> float:
    """Relative Frobenius error ``||out - ref|| / ||ref||`` in float64.

    Returns ``inf`` when ``out`` holds a NaN or an infinity (a kernel that overflows or
    reads garbage must never pass a tolerance check), and, when ``ref`` is all zeros,
    0.0 if ``out`` is too and ``inf`` otherwise.

    Raises
    ------
    ValueError
        If the shapes differ.
    """
    out = np.asarray(out, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if out.shape != ref.shape:
        raise ValueError(f"out has shape {out.shape}, reference has shape {ref.shape}")
    if not np.isfinite(out).all():
        return float("inf")
    ref_norm = np.linalg.norm(ref)
    diff_norm = np.linalg.norm(out - ref)
    if ref_norm == 0.0:
        return 0.0 if diff_norm == 0.0 else float("inf")
    return float(diff_norm / ref_norm)


def moe_gemm_reference(layout: str, a, b, sfa, sfb, routing, alpha=None):
    """The MoE grouped GEMM of :mod:`nvfp4_aot.moe`'s layouts in float64 on host arrays:
    yields ``(expert, first row, C rows)`` for every expert with rows, C = alpha[e] *
    A_e @ B_e^T (alpha optional). ``a`` (T, k/2) contiguous or (E, M, k/2) masked, ``b``
    (E, n, k/2) uint8; ``sfa``, ``sfb`` 1-D blocked bytes; ``routing`` offsets[E + 1] or
    masked_m[E]. A routing the GPU kernels would clamp raises InvalidProblemError."""
    a, b, sfa, sfb = (np.asarray(x).view(np.uint8) for x in (a, b, sfa, sfb))
    values = np.asarray(routing).astype(np.int64)
    experts, n, half_k = b.shape
    k = 2 * half_k
    capacity = a.shape[0] if layout == "contiguous" else a.shape[1]
    cols = k // SF_VEC_SIZE
    row_bytes = round_up(cols, 4)
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
        segment = sfa[sfa_at[e] : sfa_at[e] + round_up(m, SF_BLOCK_ROWS) * row_bytes]
        a64 = dequantize(rows[start : start + m], blocked_to_scales(segment, m, cols))
        b64 = dequantize(b[e], blocked_to_scales(sfb[e * b_bytes : (e + 1) * b_bytes], n, cols))
        result = a64 @ b64.T
        if alpha is not None:
            result *= float(np.asarray(alpha)[e])
        yield e, start, result
