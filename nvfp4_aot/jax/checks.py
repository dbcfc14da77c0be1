"""Trace-time checks of a JAX MoE GEMM or quantizer call: shapes and dtypes only, no jax,
no GPU.

The rules and the messages are those of the PyTorch ops (:mod:`nvfp4_aot.torch_ops`)
and of :func:`nvfp4_aot.moe_layout.check_moe_problem` (the quantizer's: those of
:class:`nvfp4_aot.QuantizePlan`, :func:`nvfp4_aot.quantizer.make_problem`), so a bad call fails the same way
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
from ..quantize_layout import DTYPES as X_DTYPES
from ..quantize_layout import FORMS, QuantizeProblem

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


# the quantizer -------------------------------------------------------------------------


class QuantizeCall(NamedTuple):
    """What a checked quantizer call computes: packed codes of ``out_shape`` and
    ``scale_bytes`` bytes of blocked scales (uint8 both); ``problem`` is the plan's
    (None when there are no output rows: nothing runs)."""

    problem: QuantizeProblem | None
    out_shape: tuple[int, ...]
    scale_bytes: int


def check_quantize_call(
    x, global_scale, form="plain", routing=None, index=None, experts=None, capacity=None
) -> QuantizeCall:
    """A :class:`QuantizeCall`, or InvalidProblemError naming the operand, the expected
    and the actual shape or dtype. Shapes (``nvfp4_aot.quantizer``)::

        plain       x (T, k)                                   -> (T, k/2)
        contiguous  x (rows, k), routing offsets[E + 1], index[capacity] (optional)
                                                               -> (capacity, k/2)
        masked      x (E, max_m, k), routing masked_m[E]       -> (E, max_m, k/2)
    """
    from ..quantizer import make_problem

    if form not in FORMS:
        raise InvalidProblemError(f"form must be one of {FORMS}, got {form!r}")
    dtype = dtype_name(x)
    if dtype not in X_DTYPES:
        raise InvalidProblemError(f"x must have dtype {' or '.join(X_DTYPES)}, got {dtype}")
    g_shape = tuple(global_scale.shape)
    if dtype_name(global_scale) != "float32" or g_shape not in ((), (1,)):
        raise InvalidProblemError(
            f"global_scale must be float32 of shape () or (1,) (one float32, read on the "
            f"GPU), got {dtype_name(global_scale)} of shape {g_shape}"
        )
    shape = tuple(x.shape)
    rank = 3 if form == "masked" else 2
    if len(shape) != rank:
        what = "(experts, max_m, k)" if form == "masked" else "(rows, k)"
        raise InvalidProblemError(f"x must be {what} for the {form} form, got shape {shape}")
    k = shape[-1]
    if form == "plain":
        for name, value in (("routing", routing), ("index", index)):
            if value is not None:
                raise InvalidProblemError(f"{name} is not an operand of the plain form; pass None")
        if experts not in (None, 1):
            raise InvalidProblemError(f"the plain form has one expert, got experts={experts}")
        rows = shape[0]
        capacity = rows if capacity is None else capacity
        experts = 1
    elif form == "masked":
        if index is not None:
            raise InvalidProblemError("index is not an operand of the masked form; pass None")
        for name, given, actual in (
            ("experts", experts, shape[0]),
            ("capacity", capacity, shape[1]),
        ):
            if given is not None and given != actual:
                raise InvalidProblemError(
                    f"x must be (experts={experts}, max_m, k) with max_m = capacity"
                    f"{'' if capacity is None else f' = {capacity}'} for the masked form, "
                    f"got shape {shape} ({name} {actual})"
                )
        experts, capacity = shape[0], shape[1]
        rows = experts * capacity
        _check_int32("routing", routing, (experts,), "masked_m[E]", form)
    else:
        rows = shape[0]
        if routing is None or len(getattr(routing, "shape", ())) != 1:
            raise InvalidProblemError(
                "the contiguous form needs routing: int32 offsets[E + 1] "
                f"(got {None if routing is None else tuple(routing.shape)})"
            )
        experts = routing.shape[0] - 1 if experts is None else experts
        _check_int32("routing", routing, (experts + 1,), "offsets[E + 1]", form)
        if index is not None:
            if capacity is None and len(getattr(index, "shape", ())) == 1:
                capacity = index.shape[0]
            _check_int32("index", index, (capacity,), "index[capacity]", form)
        elif capacity is None:
            capacity = rows
        elif capacity > rows:
            raise InvalidProblemError(
                f"without an index output row i reads row i of x: the plan's rows ({rows}) "
                f"must be >= capacity ({capacity}), or pass index"
            )
    out_shape = (experts, capacity, k // 2) if form == "masked" else (capacity, k // 2)
    if capacity == 0 and k > 0 and experts > 0:
        return QuantizeCall(None, out_shape, 0)  # no output rows: nothing runs
    problem = make_problem(k, form, rows, capacity, experts, dtype, None)
    return QuantizeCall(problem, out_shape, problem.operand_bytes()["scales"])


def _check_int32(name: str, array, need: tuple[int, ...], what: str, form: str) -> None:
    if array is None:
        raise InvalidProblemError(f"the {form} form needs {name}: int32 {what}")
    if dtype_name(array) != "int32":
        raise InvalidProblemError(f"{name} must have dtype int32, got {dtype_name(array)}")
    if tuple(array.shape) != need:
        raise InvalidProblemError(
            f"{name} must be int32 {what} of shape {need}, got shape {tuple(array.shape)}"
        )
