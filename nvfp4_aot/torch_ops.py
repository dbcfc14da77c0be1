"""PyTorch ops for MoE grouped GEMMs, and the routing helpers that feed them on the GPU.

Importing this module imports no torch; the ops are registered with ``torch.library`` on
first use, or at import when torch is already imported (call :func:`register` before
``torch.compile`` traces a module that uses them, or just import this module after torch).

Ops (``torch.ops.nvfp4_aot``), the layouts of :mod:`nvfp4_aot.moe`::

    moe_gemm(Tensor a, Tensor b, Tensor sfa, Tensor sfb, Tensor routing,
             str layout="contiguous", Tensor? alpha=None, ScalarType? out_dtype=None)
             -> Tensor
    moe_gemm_out(Tensor a, Tensor b, Tensor sfa, Tensor sfb, Tensor routing,
                 Tensor(a!) out, str layout="contiguous", Tensor? alpha=None) -> ()
    quantize(Tensor x, Tensor global_scale, Tensor? routing=None, Tensor? index=None,
             str form="plain") -> (Tensor, Tensor)

    contiguous: a (T, k/2)  b (E, n, k/2)  out (T, n)  routing int32 offsets[E + 1]
                sfa >= contiguous_scale_rows(T, E) * round_up(k/16, 4) bytes (1-D)
    masked:     a (E, M, k/2)  b (E, n, k/2)  out (E, M, n)  routing int32 masked_m[E]
                sfa >= E * blocked_scale_bytes(M, k) bytes

out is float16 or bfloat16 (``out_dtype``, default float16); ``alpha``, where given, is
float32 of shape (E,): expert e's rows are alpha[e] * A_e @ B_e^T, the FP32 accumulator
scaled on the GPU before the conversion (checkpoints' input_scale * weight_scale_2).

a and b are packed FP4 (uint8, or ``torch.float4_e2m1fn_x2``), sfa and sfb blocked E4M3
scales (uint8 or ``torch.float8_e4m3fn``), everything C-contiguous on one CUDA device.
The capacity of the plan is T (contiguous) or M (masked), taken from A's shape. ``moe_gemm``
allocates C with ``torch.empty``: rows no expert owns are left as allocated (unspecified).
``moe_gemm_out`` writes only the routed rows of ``out``.

A call checks shapes, dtypes, devices and contiguity on the host (errors name the
operand), never reads the routing, never synchronises, and launches on
``torch.cuda.current_stream()``; it is capturable by ``torch.cuda.graph`` and traced by
``torch.compile(fullgraph=True)`` through its fake implementation. CPU tensors run a
float64 reference (slow; for tests and for checking a pipeline without a GPU).

Plans. The ops keep one :class:`nvfp4_aot.MoeGemmPlan` per (device, E, n, k, layout,
capacity) and expert weights (the addresses of b and sfb), i.e. one per projection of a
layer, created on the first eager call (a plan cannot be created during CUDA graph
capture: run the module once eagerly before capturing, as torch.cuda.graph needs
anyway). A captured call takes a capture slot of its plan (its operand addresses stay
with that graph); a plan has 8, so each layer may be captured into 8 graphs at once
(serving engines capture one graph per batch size, whose capacities differ: another
plan each). Plans that graphs captured are never evicted; :func:`release_plans` frees
all of them once those graphs are destroyed.

Activation quantization (:class:`nvfp4_aot.QuantizePlan`, the bytes of
:func:`nvfp4_aot.quantize.quantize`): ``quantize(x, g, ...)`` returns ``(packed, scales)``,
packed E2M1 codes (uint8, k/2 bytes a row) and blocked E4M3 scales (uint8, 1-D), exactly
what ``moe_gemm`` reads as ``a`` and ``sfa``; x is bfloat16 or float16, C-contiguous;
``global_scale`` g is float32 with one element, read on the GPU (sf = E4M3(g amax / 6);
x ~ fp4 * sf / g, so alpha takes 1 / g)::

    plain       x (T, k)                 -> packed (T, k/2), scales blocked for T rows
    contiguous  x (rows, k), routing int32 offsets[E + 1], index int32 (capacity,) or None
                -> packed (capacity, k/2): row i reads x[index[i]] (no index: x[i],
                capacity = rows); scales contiguous_scale_rows(capacity, E) rows, each
                expert's segment 128-row padded (padding rows zero): the contiguous
                moe_gemm's a and sfa
    masked      x (E, max_m, k), routing int32 masked_m[E] -> packed (E, max_m, k/2)

Bytes a run does not write (rows no expert owns, scale rows past the routed segments)
are unspecified on the GPU (``torch.empty``) and zero on the CPU, whose implementation
is the numpy reference. One :class:`~nvfp4_aot.QuantizePlan` per (device, form, rows,
capacity, experts, k, dtype), made on the first eager call as for ``moe_gemm``.

Routing on the GPU (no ``.item()``, no ``.tolist()``, no host sync; ``bincount`` is
avoided since on CUDA it reads the largest id back to the host)::

    r = route(top_experts, experts)        # permutation, offsets, blocked scale rows
    a = x_packed[r.tokens]                 # tokens in expert order, packed FP4
    sfa = blocked_scales(x_scales[r.tokens], r.scale_rows, r.scale_row_count)
    c = moe_gemm(a, w, sfa, w_scales, r.offsets)
"""

from __future__ import annotations

import sys
import threading
from typing import NamedTuple

from .blocked import BLOCK_COLS, SF_VEC_SIZE, blocked_scale_bytes
from .errors import InvalidProblemError
from .intmath import round_up
from .moe_layout import LAYOUTS, SF_BLOCK_ROWS, contiguous_scale_rows

__all__ = [
    "MAX_PLANS",
    "Routing",
    "blocked_scales",
    "global_scale",
    "moe_gemm",
    "moe_gemm_out",
    "plans",
    "quantize",
    "register",
    "release_plans",
    "route",
]

NAMESPACE = "nvfp4_aot"
SCHEMAS = {
    "moe_gemm": (
        "moe_gemm(Tensor a, Tensor b, Tensor sfa, Tensor sfb, Tensor routing, "
        'str layout="contiguous", Tensor? alpha=None, ScalarType? out_dtype=None) -> Tensor'
    ),
    "moe_gemm_out": (
        "moe_gemm_out(Tensor a, Tensor b, Tensor sfa, Tensor sfb, Tensor routing, "
        'Tensor(a!) out, str layout="contiguous", Tensor? alpha=None) -> ()'
    ),
    "quantize": (
        "quantize(Tensor x, Tensor global_scale, Tensor? routing=None, Tensor? index=None, "
        'str form="plain") -> (Tensor, Tensor)'
    ),
}
MAX_PLANS = 4096  # plans kept; past it, plans no CUDA graph captured are closed (oldest first)

_lock = threading.Lock()
_library = None  # the torch.library.Library holding our registrations
_moe_gemm = None  # torch.ops.nvfp4_aot.moe_gemm once registered
_moe_gemm_out = None
_quantize = None
_plans: dict[tuple, object] = {}  # plan key -> MoeGemmPlan (insertion order = age)
_captured: set[tuple] = set()  # keys of plans that CUDA graphs captured: never evicted


# ---------------------------------------------------------------------------------------
# public functions


def register() -> None:
    """Register the ops with ``torch.library`` (once per process; imports torch)."""
    global _library, _moe_gemm, _moe_gemm_out, _quantize
    if _moe_gemm is not None:
        return
    import torch

    with _lock:
        if _moe_gemm is not None:
            return
        namespace = getattr(torch.ops, NAMESPACE)
        if not _defined(namespace, "moe_gemm"):  # (a reloaded module finds them defined)
            library = torch.library.Library(NAMESPACE, "FRAGMENT")
            for schema in SCHEMAS.values():
                library.define(schema)
            library.impl("moe_gemm", _moe_gemm_cuda, "CUDA")
            library.impl("moe_gemm_out", _moe_gemm_out_cuda, "CUDA")
            library.impl("moe_gemm", _moe_gemm_cpu, "CPU")
            library.impl("moe_gemm_out", _moe_gemm_out_cpu, "CPU")
            library.impl("quantize", _quantize_cuda, "CUDA")
            library.impl("quantize", _quantize_cpu, "CPU")
            torch.library.register_fake(f"{NAMESPACE}::quantize", _quantize_fake, lib=library)
            torch.library.register_fake(f"{NAMESPACE}::moe_gemm", _moe_gemm_fake, lib=library)
            torch.library.register_fake(
                f"{NAMESPACE}::moe_gemm_out", _moe_gemm_out_fake, lib=library
            )
            _library = library
        _moe_gemm_out = namespace.moe_gemm_out
        _quantize = namespace.quantize
        _moe_gemm = namespace.moe_gemm


def moe_gemm(a, b, sfa, sfb, routing, layout: str = "contiguous", alpha=None, out_dtype=None):
    """C = alpha[e] * A_e @ B_e^T (alpha optional) for the rows the device ``routing``
    gives each expert e; a new ``out_dtype`` tensor (float16 or bfloat16, default
    float16; see the module docstring for the layouts)."""
    if _moe_gemm is None:
        register()
    return _moe_gemm(a, b, sfa, sfb, routing, layout, alpha, out_dtype)


def moe_gemm_out(a, b, sfa, sfb, routing, out, layout: str = "contiguous", alpha=None) -> None:
    """:func:`moe_gemm` into ``out`` (float16 or bfloat16), whose unrouted rows stay as
    they are."""
    if _moe_gemm_out is None:
        register()
    _moe_gemm_out(a, b, sfa, sfb, routing, out, layout, alpha)


def quantize(x, global_scale, routing=None, index=None, form: str = "plain"):
    """(packed, scales) of ``x`` in NVFP4 for the device float32 ``global_scale``
    (see the module docstring for the forms); uint8 tensors on x's device."""
    if _quantize is None:
        register()
    return _quantize(x, global_scale, routing, index, form)


def global_scale(x):
    """ModelOpt's global scale of ``x`` on its device, no host sync: float32 (1,) tensor
    ``2688 / amax(|x|)`` (1 for an all-zero ``x``; the largest block scale is 448). Its
    reciprocal is the tensor's factor of a GEMM's alpha (input_scale)."""
    import torch

    # one reduction (|x| and the float32 cast fused) and three element-wise kernels, a
    # MoE layer two of these a step (were eight kernels each). The numerator is a CPU
    # scalar tensor, which the division kernel takes as an argument: torch computes a
    # Python number / tensor as reciprocal times number, not the quotient
    global _NUMERATOR
    if _NUMERATOR is None:
        _NUMERATOR = torch.tensor(448.0 * 6.0, dtype=torch.float32)
    amax = torch.linalg.vector_norm(x, float("inf"), dtype=torch.float32).reshape(1)
    return torch.where(amax > 0, _NUMERATOR / amax, 1.0)


_NUMERATOR = None  # float32 2688 on the CPU, made on first use (torch is imported late)


class Routing(NamedTuple):
    """The contiguous layout of one routing, all on the router's device.

    Row i of A / C (the "permuted" rows, T * top_k of them) is slot ``order[i]`` of the
    flattened (T, top_k) router output: token ``tokens[i]``, expert ``experts[i]``.
    """

    order: object  # int64 (T * top_k,): flat index token * top_k + j of row i
    tokens: object  # int64 (T * top_k,): order // top_k
    experts: object  # int64 (T * top_k,): expert of row i, non-decreasing
    offsets: object  # int32 (E + 1,): expert e owns rows offsets[e] .. offsets[e + 1]
    scale_rows: object  # int64 (T * top_k,): blocked SFA row of row i (128-padded segments)
    scale_row_count: int  # rows of the blocked SFA buffer: contiguous_scale_rows(T*top_k, E)


def route(top_experts, experts: int) -> Routing:
    """Sort the router's (T, top_k) expert ids by expert and lay them out contiguously:
    permutation, int32 offsets[E + 1] and each row's blocked scale row
    (``scale_offsets[e] + i`` for the i-th row of expert e), with tensor ops only."""
    import torch

    flat = top_experts.reshape(-1)
    rows = flat.shape[0]
    top_k = top_experts.shape[-1] if top_experts.dim() > 1 else 1
    order = torch.argsort(flat, stable=True)
    by_expert = flat[order]
    bounds = torch.arange(experts + 1, device=flat.device, dtype=by_expert.dtype)
    offsets = torch.searchsorted(by_expert, bounds, out_int32=True)  # no bincount: no sync
    counts = (offsets[1:] - offsets[:-1]).long()
    padded = (counts + (SF_BLOCK_ROWS - 1)) // SF_BLOCK_ROWS * SF_BLOCK_ROWS
    segment = torch.cumsum(padded, 0) - padded  # exclusive: scale_offsets(counts)
    index = torch.arange(rows, device=flat.device)
    scale_rows = segment[by_expert] + index - offsets.long()[by_expert]
    return Routing(
        order=order,
        tokens=order // top_k,
        experts=by_expert.long(),
        offsets=offsets,
        scale_rows=scale_rows,
        scale_row_count=contiguous_scale_rows(rows, experts),
    )


def blocked_scales(scales, scale_rows, total_rows: int, out=None):
    """Write row-major E4M3 scales (rows, k/16) into the blocked layout at the given rows.

    Row i of ``scales`` becomes row ``scale_rows[i]`` of a blocked buffer of
    ``total_rows`` rows (a multiple of 128); every other row is zero (E4M3 +0.0). With
    :func:`route`'s ``scale_rows`` and ``scale_row_count`` this is the contiguous
    layout's SFA. Returns ``out`` (uint8 or float8_e4m3fn, 1-D, ``total_rows *
    round_up(k/16, 4)`` bytes) or a new uint8 tensor.
    """
    import torch

    if total_rows % SF_BLOCK_ROWS:
        raise InvalidProblemError(f"total_rows must be a multiple of 128, got {total_rows}")
    cols = scales.shape[1]
    padded_cols = round_up(cols, BLOCK_COLS)
    rows = torch.zeros((total_rows, padded_cols), dtype=torch.uint8, device=scales.device)
    source = scales.view(torch.uint8) if scales.dtype != torch.uint8 else scales
    if padded_cols != cols:
        source = torch.nn.functional.pad(source, (0, padded_cols - cols))
    rows.index_copy_(0, scale_rows, source)
    # row = tile * 128 + quarter * 32 + lane; col = col_tile * 4 + slot
    # -> (tile, col_tile, lane, quarter, slot), as nvfp4_aot.layouts.scales_to_blocked
    tiles = rows.view(total_rows // SF_BLOCK_ROWS, 4, 32, padded_cols // 4, 4)
    tiles = tiles.permute(0, 3, 2, 1, 4)
    if out is None:
        return tiles.reshape(-1)
    target = out.view(torch.uint8) if out.dtype != torch.uint8 else out
    target.view(total_rows // SF_BLOCK_ROWS, padded_cols // 4, 32, 4, 4).copy_(tiles)
    return out


def plans() -> list:
    """The plans the ops hold (for inspection)."""
    return list(_plans.values())


def release_plans() -> None:
    """Close every plan the ops hold (waiting for their queued runs). Only when no graph
    that captured an op will replay."""
    with _lock:
        held = list(_plans.values())
        _plans.clear()
        _captured.clear()
    for plan in held:
        plan.close()


# ---------------------------------------------------------------------------------------
# checks shared by every implementation


def _defined(namespace, name: str) -> bool:
    try:
        getattr(namespace, name)
    except (AttributeError, RuntimeError):
        return False
    return True


def _dtypes():
    import torch

    fp4 = [torch.uint8, torch.int8]
    if hasattr(torch, "float4_e2m1fn_x2"):
        fp4.append(torch.float4_e2m1fn_x2)
    scales = [torch.uint8, torch.float8_e4m3fn]
    return tuple(fp4), tuple(scales)


def _shape(t) -> tuple:
    return tuple(t.shape)


def _check(a, b, sfa, sfb, routing, out, layout: str, real: bool, alpha=None):
    """(experts, n, k, capacity) of a call; raises InvalidProblemError naming the operand.
    ``real``: also devices, contiguity and scale buffer sizes (not for fake tensors)."""
    import torch

    if layout not in LAYOUTS:
        raise InvalidProblemError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    fp4, scale_types = _dtypes()
    for name, t, allowed in (
        ("a", a, fp4), ("b", b, fp4), ("sfa", sfa, scale_types), ("sfb", sfb, scale_types),
        ("routing", routing, (torch.int32,)),
    ):  # fmt: skip
        if t.dtype not in allowed:
            names = ", ".join(str(d).replace("torch.", "") for d in allowed)
            raise InvalidProblemError(f"{name} must have dtype {names}, got {t.dtype}")
    if out is not None and out.dtype not in (torch.float16, torch.bfloat16):
        raise InvalidProblemError(f"out must be float16 or bfloat16, got {out.dtype}")
    if alpha is not None and alpha.dtype != torch.float32:
        raise InvalidProblemError(f"alpha must have dtype float32, got {alpha.dtype}")
    if b.dim() != 3:
        raise InvalidProblemError(f"b must be (experts, n, k/2), got shape {_shape(b)}")
    experts, n, half_k = b.shape
    masked = layout == "masked"
    if masked:
        if a.dim() != 3 or a.shape[0] != experts or a.shape[2] != half_k:
            raise InvalidProblemError(
                f"a must be (experts={experts}, max_m, k/2={half_k}) for the masked layout, "
                f"got shape {_shape(a)}"
            )
        capacity = a.shape[1]
        c_shape = (experts, capacity, n)
        r_shape, r_name = (experts,), "masked_m[E]"
    else:
        if a.dim() != 2 or a.shape[1] != half_k:
            raise InvalidProblemError(
                f"a must be (tokens, k/2={half_k}) for the contiguous layout, got shape {_shape(a)}"
            )
        capacity = a.shape[0]
        c_shape = (capacity, n)
        r_shape, r_name = (experts + 1,), "offsets[E + 1]"
    if _shape(routing) != r_shape:
        raise InvalidProblemError(
            f"routing must be int32 {r_name} of shape {r_shape}, got {_shape(routing)}"
        )
    if out is not None and _shape(out) != c_shape:
        raise InvalidProblemError(f"out must have shape {c_shape}, got {_shape(out)}")
    if alpha is not None and _shape(alpha) != (experts,):
        raise InvalidProblemError(
            f"alpha must be float32 of shape ({experts},) (one per expert), got {_shape(alpha)}"
        )
    if sfa.dim() != 1 or sfb.dim() != 1:
        which = "sfa" if sfa.dim() != 1 else "sfb"
        raise InvalidProblemError(f"{which} must be 1-D blocked scales (bytes)")
    if not real:
        return experts, n, 2 * half_k, capacity
    _check_placement("a", a, (("b", b), ("sfa", sfa), ("sfb", sfb), ("routing", routing),
                              ("out", out), ("alpha", alpha)))  # fmt: skip
    k = 2 * half_k
    if k % SF_VEC_SIZE == 0 and capacity > 0:
        need = _scale_bytes(experts, n, k, layout, capacity)
        for name, t, bytes_needed in (("sfa", sfa, need[0]), ("sfb", sfb, need[1])):
            if t.numel() < bytes_needed:
                raise InvalidProblemError(
                    f"{name} must hold at least {bytes_needed} bytes of blocked scales, "
                    f"got {t.numel()}"
                )
    return experts, n, k, capacity


_SCALE_BYTES: dict[tuple, tuple[int, int]] = {}


def _scale_bytes(experts, n, k, layout, capacity) -> tuple[int, int]:
    key = (experts, n, k, layout, capacity)
    need = _SCALE_BYTES.get(key)
    if need is None:
        if layout == "contiguous":
            sfa = contiguous_scale_rows(capacity, experts) * round_up(k // SF_VEC_SIZE, 4)
        else:
            sfa = experts * blocked_scale_bytes(capacity, k)
        need = _SCALE_BYTES[key] = (sfa, experts * blocked_scale_bytes(n, k))
    return need


# ---------------------------------------------------------------------------------------
# implementations


def _moe_gemm_fake(a, b, sfa, sfb, routing, layout="contiguous", alpha=None, out_dtype=None):
    problem = _check(a, b, sfa, sfb, routing, None, layout, False, alpha)
    return _new_out(a, problem, layout, out_dtype)


def _new_out(a, problem: tuple, layout: str, out_dtype):
    """An empty C of a checked call's (experts, n, k, capacity) on a's device."""
    import torch

    experts, n, _k, capacity = problem
    shape = (experts, capacity, n) if layout == "masked" else (capacity, n)
    if out_dtype not in (None, torch.float16, torch.bfloat16):
        raise InvalidProblemError(f"out_dtype must be float16 or bfloat16, got {out_dtype}")
    return a.new_empty(shape, dtype=out_dtype or torch.float16)


def _moe_gemm_out_fake(a, b, sfa, sfb, routing, out, layout="contiguous", alpha=None):
    _check(a, b, sfa, sfb, routing, out, layout, False, alpha)


def _moe_gemm_cuda(a, b, sfa, sfb, routing, layout="contiguous", alpha=None, out_dtype=None):
    # checked once (the operands; C is ours): each check is ~25 tensor attribute reads
    problem = _check(a, b, sfa, sfb, routing, None, layout, True, alpha)
    out = _new_out(a, problem, layout, out_dtype)
    _launch_moe_gemm(a, b, sfa, sfb, routing, out, layout, alpha, problem)
    return out


def _moe_gemm_out_cuda(a, b, sfa, sfb, routing, out, layout="contiguous", alpha=None):
    problem = _check(a, b, sfa, sfb, routing, out, layout, True, alpha)
    _launch_moe_gemm(a, b, sfa, sfb, routing, out, layout, alpha, problem)


def _launch_moe_gemm(a, b, sfa, sfb, routing, out, layout, alpha, problem: tuple):
    """One checked call's launch on the current stream, by the plan of its key."""
    import torch

    experts, n, k, capacity = problem
    if capacity == 0:
        return  # no rows: nothing to write
    device = a.device
    pointers = (
        a.data_ptr(), b.data_ptr(), out.data_ptr(), sfa.data_ptr(), sfb.data_ptr(),
        routing.data_ptr(),
    )  # fmt: skip
    key = (device.index, experts, n, k, layout, capacity, pointers[1], pointers[4],
           out.dtype is torch.bfloat16, alpha is not None)  # fmt: skip
    capturing = torch.cuda.is_current_stream_capturing()
    plan = _plans.get(key)
    if plan is None:
        plan = _new_plan(key, capturing)
    if capturing:
        with _lock:
            _captured.add(key)
    plan.run(
        *pointers, stream=_current_stream(torch, device),
        alpha=None if alpha is None else alpha.data_ptr(),
    )  # fmt: skip


def _current_stream(torch, device) -> int:
    """The handle of ``device``'s current stream: torch's raw accessor where it has one
    (what torch.compile's generated code calls; ~0.3 µs), else through a Stream object
    (``torch.cuda.current_stream``: 4-7 µs on the lent H200 host, session 18)."""
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is None:
        return torch.cuda.current_stream(device).cuda_stream
    return raw(device.index)


def _new_plan(key: tuple, capturing: bool):
    device, experts, n, k, layout, capacity, _b, _sfb, bf16, alpha = key
    if capturing:
        raise RuntimeError(
            f"nvfp4_aot::moe_gemm: no plan yet for {experts} experts, n={n}, k={k}, "
            f"{layout}, capacity {capacity} with these expert weights; a plan cannot be "
            "created during CUDA graph capture: run the module once eagerly before capturing"
        )
    from .moe import MoeGemmPlan

    plan = MoeGemmPlan(
        experts, n, k, layout=layout, capacity=capacity, device=device,
        out_dtype="bfloat16" if bf16 else "float16", alpha=alpha,
    )  # fmt: skip
    return _keep(key, plan)


def _keep(key: tuple, plan):
    """Hold ``plan`` under ``key`` (or the one another thread made first), evicting the
    oldest uncaptured plans past MAX_PLANS."""
    evict = []
    with _lock:
        existing = _plans.get(key)
        if existing is not None:
            evict.append(plan)
            plan = existing
        else:
            _plans[key] = plan
            if len(_plans) > MAX_PLANS:  # weights freed and reallocated elsewhere, mostly
                for old in list(_plans):
                    if len(_plans) <= MAX_PLANS:
                        break
                    if old not in _captured:
                        evict.append(_plans.pop(old))
    for old in evict:
        old.close()
    return plan


def _moe_gemm_cpu(a, b, sfa, sfb, routing, layout="contiguous", alpha=None, out_dtype=None):
    out = _moe_gemm_fake(a, b, sfa, sfb, routing, layout, alpha, out_dtype)
    out.fill_(float("nan"))  # unrouted rows: as unspecified as on the GPU, but visible
    _moe_gemm_out_cpu(a, b, sfa, sfb, routing, out, layout, alpha)
    return out


def _moe_gemm_out_cpu(a, b, sfa, sfb, routing, out, layout="contiguous", alpha=None):
    """The float64 reference of the kernel, on CPU tensors (numpy)."""
    import torch

    from .reference import moe_gemm_reference

    _check(a, b, sfa, sfb, routing, out, layout, True, alpha)

    def host(t):
        return (t.view(torch.uint8) if t.dtype != torch.uint8 else t).numpy()

    scale = None if alpha is None else alpha.numpy()
    for e, start, result in moe_gemm_reference(
        layout, host(a), host(b), host(sfa), host(sfb), routing.numpy(), scale
    ):
        c = torch.from_numpy(result).to(out.dtype)
        if layout == "masked":
            out[e, : len(result)] = c
        else:
            out[start : start + len(result)] = c


# ---------------------------------------------------------------------------------------
# the activation quantizer


def _quantize_check(x, global_scale, routing, index, form: str):
    """The quantizer problem of a call (nvfp4_aot.quantize_layout.QuantizeProblem) from its
    form, dtypes and shapes; raises InvalidProblemError naming the operand. A real call's
    devices and contiguity: :func:`_quantize_signature`."""
    import torch

    from .quantize_layout import FORMS
    from .quantizer import make_problem

    if form not in FORMS:
        raise InvalidProblemError(f"form must be one of {FORMS}, got {form!r}")
    dtypes = {torch.bfloat16: "bfloat16", torch.float16: "float16"}
    if x.dtype not in dtypes:
        raise InvalidProblemError(f"x must have dtype bfloat16 or float16, got {x.dtype}")
    if global_scale.dtype != torch.float32 or global_scale.numel() != 1:
        raise InvalidProblemError(
            f"global_scale must be float32 with one element, got {global_scale.dtype} of "
            f"shape {_shape(global_scale)}"
        )
    for name, t in (("routing", routing), ("index", index)):
        if t is not None and (t.dtype != torch.int32 or t.dim() != 1):
            raise InvalidProblemError(
                f"{name} must be a 1-D int32 tensor, got {t.dtype} of shape {_shape(t)}"
            )
    if form != "contiguous" and index is not None:
        raise InvalidProblemError(f"index is not an operand of the {form} form; pass None")
    if form == "plain":
        if routing is not None:
            raise InvalidProblemError("routing is not an operand of the plain form; pass None")
        if x.dim() != 2:
            raise InvalidProblemError(f"x must be (T, k) for the plain form, got {_shape(x)}")
        rows, capacity, experts = int(x.shape[0]), None, 1
    elif routing is None:
        raise InvalidProblemError(
            f"routing is required by the {form} form "
            f"({'offsets[E + 1]' if form == 'contiguous' else 'masked_m[E]'}, int32)"
        )
    elif form == "contiguous":
        if x.dim() != 2:
            raise InvalidProblemError(
                f"x must be (rows, k) for the contiguous form, got {_shape(x)}"
            )
        rows, experts = int(x.shape[0]), int(routing.shape[0]) - 1
        capacity = rows if index is None else int(index.shape[0])
    else:
        if x.dim() != 3:
            raise InvalidProblemError(
                f"x must be (experts, max_m, k) for the masked form, got {_shape(x)}"
            )
        if routing.shape[0] != x.shape[0]:
            raise InvalidProblemError(
                f"routing must be int32 masked_m[E] of shape ({x.shape[0]},), got {_shape(routing)}"
            )
        experts, capacity, rows = int(x.shape[0]), int(x.shape[1]), None
    # int(): a symbolic size (torch.compile, dynamic shapes) is specialised here
    return make_problem(int(x.shape[-1]), form, rows, capacity, experts, dtypes[x.dtype], None)


def _check_placement(first_name: str, first, others) -> None:
    """``first`` and the (name, tensor or None) ``others`` contiguous and on first's
    device (errors name the operand)."""
    if not first.is_contiguous():
        raise InvalidProblemError(f"{first_name} must be contiguous, got strides {first.stride()}")
    device = first.device
    for name, t in others:
        if t is None:
            continue
        if t.device != device:
            raise InvalidProblemError(f"{name} is on {t.device}, {first_name} is on {device}")
        if not t.is_contiguous():
            raise InvalidProblemError(f"{name} must be contiguous, got strides {t.stride()}")


def _quantize_shapes(problem) -> tuple[tuple, int]:
    """(packed's shape, the scales' bytes) of a problem."""
    if problem.form == "masked":
        shape = (problem.experts, problem.capacity, problem.k // 2)
    else:
        shape = (problem.output_rows, problem.k // 2)
    return shape, problem.operand_bytes()["scales"]


def _quantize_outputs(x, shape: tuple, scale_bytes: int):
    """Empty (packed, scales) of the given shapes (:func:`_quantize_shapes`), on x's device."""
    import torch

    return x.new_empty(shape, dtype=torch.uint8), x.new_empty((scale_bytes,), dtype=torch.uint8)


def _quantize_fake(x, global_scale, routing=None, index=None, form="plain"):
    problem = _quantize_check(x, global_scale, routing, index, form)
    return _quantize_outputs(x, *_quantize_shapes(problem))


def _quantize_cuda(x, global_scale, routing=None, index=None, form="plain"):
    import torch

    p, packed_shape, scale_bytes = _quantize_signature(x, global_scale, routing, index, form)
    packed, scales = _quantize_outputs(x, packed_shape, scale_bytes)
    device = x.device
    key = ("quantize", device.index, p.form, p.rows, p.capacity, p.experts, p.k, p.dtype)
    capturing = torch.cuda.is_current_stream_capturing()
    plan = _plans.get(key)
    if plan is None:
        if capturing:
            raise RuntimeError(
                f"nvfp4_aot::quantize: no plan yet for the {p.form} form, k={p.k}, rows "
                f"{p.rows}, capacity {p.capacity}, {p.experts} experts, {p.dtype}; a plan "
                "cannot be created during CUDA graph capture: run the module once eagerly "
                "before capturing"
            )
        from .quantizer import QuantizePlan

        plan = _keep(key, QuantizePlan(
            p.k, form=p.form, rows=p.rows, capacity=p.capacity, experts=p.experts,
            dtype=p.dtype, device=device.index or 0,
        ))  # fmt: skip
    if capturing:
        with _lock:
            _captured.add(key)
    plan.run(
        x.data_ptr(), packed.data_ptr(), scales.data_ptr(), global_scale.data_ptr(),
        None if routing is None else routing.data_ptr(),
        None if index is None else index.data_ptr(),
        stream=_current_stream(torch, device),
    )  # fmt: skip
    return packed, scales


_QUANTIZE_SIGNATURES: dict[tuple, tuple] = {}  # a call's signature -> its checked problem
MAX_SIGNATURES = 1024


def _quantize_signature(x, global_scale, routing, index, form: str):
    """(problem, packed shape, scale bytes) of a real call. What the problem depends on
    (form, dtypes and shapes) is checked once per signature; devices and contiguity,
    which any call may change, every call."""
    key = (
        form, x.dtype, tuple(x.shape), global_scale.dtype, global_scale.numel(),
        None if routing is None else (routing.dtype, tuple(routing.shape)),
        None if index is None else (index.dtype, tuple(index.shape)),
    )  # fmt: skip
    found = _QUANTIZE_SIGNATURES.get(key)
    if found is None:
        problem = _quantize_check(x, global_scale, routing, index, form)
        found = (problem, *_quantize_shapes(problem))
        if len(_QUANTIZE_SIGNATURES) >= MAX_SIGNATURES:
            _QUANTIZE_SIGNATURES.clear()
        _QUANTIZE_SIGNATURES[key] = found
    _check_placement(
        "x", x, (("global_scale", global_scale), ("routing", routing), ("index", index))
    )
    return found


def _quantize_cpu(x, global_scale, routing=None, index=None, form="plain"):
    """The numpy reference (nvfp4_aot.quantize.quantize through the kernel's row map):
    the kernel's bytes where a run writes, zero elsewhere."""
    import numpy as np
    import torch

    from .quantize_routing import expected_outputs

    p, packed_shape, scale_bytes = _quantize_signature(x, global_scale, routing, index, form)
    packed, scales = _quantize_outputs(x, packed_shape, scale_bytes)
    rows = x.reshape(-1, p.k)
    if p.dtype == "bfloat16":
        x_rows = rows.view(torch.int16).numpy().view(np.uint16)
    else:
        x_rows = rows.numpy()
    expected = expected_outputs(
        p, x_rows, np.float32(global_scale.reshape(()).item()),
        None if routing is None else routing.numpy(),
        None if index is None else index.numpy(),
    )  # fmt: skip
    packed.copy_(torch.from_numpy(expected.out.reshape(packed.shape)))
    scales.copy_(torch.from_numpy(expected.scales))
    return packed, scales


if "torch" in sys.modules:  # torch is there already: registering costs no import
    register()
