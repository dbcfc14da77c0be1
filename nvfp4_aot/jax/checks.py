"""Trace-time checks of a JAX MoE GEMM call: shapes and dtypes only, no jax, no GPU.

The rules and the messages are those of the PyTorch ops (:mod:`nvfp4_aot.torch_ops`)
and of :func:`nvfp4_aot.moe_layout.check_moe_problem`, so a bad call fails the same way
whichever framework makes it, and fails while tracing, before anything is compiled.
Operands are anything with ``shape`` and ``dtype`` (jax arrays, tracers,
``jax.ShapeDtypeStruct``, numpy arrays).
"""

from __future__ import annotations

from typing import NamedTuple

from ..blocked import SF_VEC_SIZE, blocked_scale_bytes
from ..errors import InvalidProblemError
from ..intmath import round_up
from ..manifest import OUT_DTYPES
from ..moe_layout import LAYOUTS, check_moe_problem, contiguous_scale_rows

FP4_DTYPES = ("uint8", "int8")  # packed FP4, two codes per byte (low nibble first)
SCALE_DTYPES = ("uint8", "float8_e4m3fn")  # blocked E4M3 scales, bytes
ROUTING_DTYPES = ("int32",)
ALPHA_DTYPES = ("float32",)


class MoeCall(NamedTuple):
    """What a checked call computes: C of ``c_shape`` and ``out_dtype``."""

    experts: int
    n: int
    k: int
    layout: str
    capacity: int
    c_shape: tuple[int, ...]
    out_dtype: str


def dtype_name(x) -> str:
    dtype = getattr(x, "dtype", x)
    return getattr(dtype, "name", str(dtype))


def check_moe_call(a, b, sfa, sfb, routing, layout: str, alpha=None, out_dtype="float16"):
    """A :class:`MoeCall`, or InvalidProblemError naming the operand, the expected and
    the actual shape or dtype."""
    if layout not in LAYOUTS:
        raise InvalidProblemError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    out_name = dtype_name(out_dtype)
    if out_name not in OUT_DTYPES:
        raise InvalidProblemError(
            f"out_dtype must be one of {', '.join(OUT_DTYPES)}, got {out_name}"
        )
    for name, x, allowed in (
        ("a", a, FP4_DTYPES), ("b", b, FP4_DTYPES), ("sfa", sfa, SCALE_DTYPES),
        ("sfb", sfb, SCALE_DTYPES), ("routing", routing, ROUTING_DTYPES),
    ):  # fmt: skip
        if dtype_name(x) not in allowed:
            raise InvalidProblemError(
                f"{name} must have dtype {', '.join(allowed)}, got {dtype_name(x)}"
            )
    a_shape, b_shape = tuple(a.shape), tuple(b.shape)
    if len(b_shape) != 3:
        raise InvalidProblemError(f"b must be (experts, n, k/2), got shape {b_shape}")
    experts, n, half_k = b_shape
    if layout == "masked":
        if len(a_shape) != 3 or a_shape[0] != experts or a_shape[2] != half_k:
            raise InvalidProblemError(
                f"a must be (experts={experts}, max_m, k/2={half_k}) for the masked layout, "
                f"got shape {a_shape}"
            )
        capacity = a_shape[1]
        c_shape = (experts, capacity, n)
        r_shape, r_name = (experts,), "masked_m[E]"
    else:
        if len(a_shape) != 2 or a_shape[1] != half_k:
            raise InvalidProblemError(
                f"a must be (tokens, k/2={half_k}) for the contiguous layout, got shape {a_shape}"
            )
        capacity = a_shape[0]
        c_shape = (capacity, n)
        r_shape, r_name = (experts + 1,), "offsets[E + 1]"
    if tuple(routing.shape) != r_shape:
        raise InvalidProblemError(
            f"routing must be int32 {r_name} of shape {r_shape}, got {tuple(routing.shape)}"
        )
    for name, x in (("sfa", sfa), ("sfb", sfb)):
        if len(x.shape) != 1:
            raise InvalidProblemError(f"{name} must be 1-D blocked scales (bytes)")
    k = 2 * half_k
    call = MoeCall(experts, n, k, layout, capacity, c_shape, out_name)
    if alpha is not None:
        _check_alpha(alpha, experts)
    if capacity == 0:
        return call  # no rows: nothing runs (the plan's rules need capacity >= 1)
    check_moe_problem(experts, n, k, layout, capacity)
    if k % SF_VEC_SIZE == 0:
        if layout == "contiguous":
            sfa_bytes = contiguous_scale_rows(capacity, experts) * round_up(k // SF_VEC_SIZE, 4)
        else:
            sfa_bytes = experts * blocked_scale_bytes(capacity, k)
        sfb_bytes = experts * blocked_scale_bytes(n, k)
        for name, x, need in (("sfa", sfa, sfa_bytes), ("sfb", sfb, sfb_bytes)):
            if x.shape[0] < need:
                raise InvalidProblemError(
                    f"{name} must hold at least {need} bytes of blocked scales, got {x.shape[0]}"
                )
    return call


def _check_alpha(alpha, experts: int) -> None:
    if dtype_name(alpha) not in ALPHA_DTYPES or tuple(alpha.shape) != (experts,):
        raise InvalidProblemError(
            f"alpha must be float32 of shape ({experts},) (one per expert), got "
            f"{dtype_name(alpha)} of shape {tuple(alpha.shape)}"
        )
