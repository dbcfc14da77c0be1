"""NVFP4 activation quantization on the GPU: one baked kernel, three forms, no host sync.

A :class:`QuantizePlan` is made once per (form, rows / capacity, k, experts, input dtype);
its :meth:`~QuantizePlan.run` turns BF16 or FP16 activations into what the grouped GEMMs
read as A: packed E2M1 codes (rows, k/2) and E4M3 block scales in the blocked layout, with
the rules and bytes of :func:`nvfp4_aot.quantize.quantize` (the numpy reference) for a
device FP32 global scale ``g``. One launch, no allocation, nothing read back; graph
capturable once for every routing written into the same device arrays.

Forms (``x`` row stride ``row_stride`` elements; rows of ``out`` are k/2 bytes)::

    plain       x (T, k)          -> out (T, k/2), scales blocked for T rows
                                      (rows T .. round_up(T, 128) of scales zero)
    contiguous  x (rows, k)       -> out (capacity, k/2): row i reads x[index[i]] (or x[i]),
                routing = offsets int32[E + 1]; expert e owns out rows offsets[e] ..
                offsets[e + 1] and scale rows sf_offset[e] .. + round_up(m_e, 128),
                sf_offset[e] = sum_{j<e} round_up(m_j, 128), padding rows zero: exactly the
                contiguous MoE GEMM's A and SFA (nvfp4_aot.moe)
    masked      x (E, max_m, k)   -> out (E, max_m, k/2), scales E x blocked(max_m, k);
                routing = masked_m int32[E]; expert e's rows >= masked_m[e] are not
                written, codes or scales (the masked GEMM writes no C row there)

What a run writes, and nothing else: the routed rows of ``out`` and, of ``scales``, the
routed rows and (plain, contiguous) the padding rows of each 128-row segment. Device
counts are clamped to the plan's capacity and index entries to x's rows, as the MoE
routing kernel clamps them, so no routing, however hostile, makes the kernel read or
write outside the arrays the plan checked; results for an inconsistent routing
(overlapping experts) are unspecified.
"""

from __future__ import annotations

from math import prod

from . import driver, loader
from .errors import InvalidProblemError
from .intake import array_pointer
from .launcher import CheckedTables, LaunchedPlan, Launcher
from .manifest import ROLE_QUANTIZE
from .operands import (
    FP4_DTYPES,
    SCALE_DTYPES,
    check_scales,
    stream_handle,
)
from .quantize_layout import DTYPES, FORMS, RUN_FIELDS, QuantizeLayout, QuantizeProblem

__all__ = ["FORMS", "QuantizePlan"]

_ALIGN = {"x": 16, "out": 8, "scales": 1, "global_scale": 4, "routing": 4, "index": 4}
_X_DTYPES = {"bfloat16": ("bf16", "u2"), "float16": ("f2",)}
_OUTPUTS = ("out", "scales")


class QuantizePlan(LaunchedPlan):
    """A prepared NVFP4 activation quantizer (the module docstring has the forms).

    Parameters
    ----------
    k : int
        Elements per row, a multiple of 16.
    form : "plain", "contiguous" or "masked"
    rows : int, optional
        Rows of ``x``: T (plain, required); the token rows an index picks from
        (contiguous; default ``capacity``); masked: E * capacity (the default).
    capacity : int, optional
        Output rows: the most routed rows (contiguous, required) or max_m (masked,
        required); plain: ``rows``.
    experts : int
        E (contiguous, masked); 1 for plain.
    dtype : "bfloat16" or "float16"
        ``x``'s element type.
    row_stride : int, optional
        Elements between consecutive rows of ``x`` (default k; a multiple of 8).
    device, artifacts, ring_slots, capture_slots
        As for :class:`nvfp4_aot.MoeGemmPlan`.
    segment_blocks : 128, 64 or 32, optional
        Blocks of a warp's unit of work (default: the widest that still gives half the
        grid's warps a unit at ``capacity`` rows; narrower at decode sizes:
        :func:`nvfp4_aot.quantize_layout.unit_blocks`). A tuning knob; the bytes are the
        same.
    """

    def __init__(
        self, k: int, *, form: str = "plain", rows: int | None = None,
        capacity: int | None = None, experts: int = 1, dtype: str = "bfloat16",
        row_stride: int | None = None, device: int = 0, artifacts=None, ring_slots: int = 8,
        capture_slots: int = 8, segment_blocks: int | None = None,
    ):  # fmt: skip
        if ring_slots < 1:
            raise ValueError(f"ring_slots must be >= 1, got {ring_slots}")
        if capture_slots < 1:
            raise ValueError(f"capture_slots must be >= 1, got {capture_slots}")
        problem = make_problem(k, form, rows, capacity, experts, dtype, row_stride)
        self.device = int(device)
        manifest = loader.load_manifest(artifacts)
        capability = loader.device_capability(self.device)
        (variant,) = loader.variants_for(manifest, capability, self.device, role=ROLE_QUANTIZE)
        self.layout = QuantizeLayout.build(
            problem, variant, driver.sm_count(self.device), ring_slots, capture_slots,
            segment_blocks,
        )  # fmt: skip
        #: the checked plan-time facts (:mod:`nvfp4_aot.quantize_layout`), the unit width too
        self.problem = self.layout.problem
        kernel = loader.load_kernel(variant, self.device, artifacts)
        self._launcher = Launcher(self.device, self.layout, [kernel])
        self._tables = CheckedTables(self._check_pointers, self.layout.run_table)

    # running ----------------------------------------------------------------------------

    def run(self, x, out, scales, global_scale, routing=None, index=None, stream=None) -> None:
        """Quantize on ``stream``; returns without waiting.

        Parameters
        ----------
        x : device array or int pointer
            The activations in the plan's form and dtype (bfloat16 also as uint16 bits).
        out : uint8 device array or pointer
            Packed E2M1 codes, k/2 bytes a row, the even element in the low nibble.
        scales : uint8 (or float8_e4m3fn) device array or pointer
            The blocked E4M3 scales (:attr:`scale_bytes` bytes).
        global_scale : float32 device array or pointer
            ``g`` (one float32, read on the GPU): sf = E4M3((g * amax) / 6).
        routing : int32 device array or pointer
            offsets[E + 1] (contiguous) or masked_m[E] (masked); None for plain.
        index : int32 device array or pointer, optional
            Contiguous only: index[i] is the row of ``x`` that output row i reads
            (default: row i).
        stream : stream object or handle, optional
        """
        handle = stream if type(stream) is int and stream >= 0 else stream_handle(stream)
        self._launch_operands((x, out, scales, global_scale, routing, index), handle)

    def set_graph_operands(self, x, out, scales, global_scale, routing=None, index=None) -> None:
        """Point the next replay of a CUDA graph that captured :meth:`run` at new operands
        (call it while no replay is pending). New routings, indices or global scales need
        no call: a replay reads the arrays' current contents."""
        pointers, _producers = self._pointers((x, out, scales, global_scale, routing, index), 0)
        self._launcher.stage_graph(self._tables.table(pointers))

    @property
    def scale_bytes(self) -> int:
        """Bytes of the blocked scale buffer the plan's form needs."""
        return self.layout.problem.operand_bytes()["scales"]

    @property
    def out_shape(self) -> tuple[int, ...]:
        """The shape of ``out`` (uint8)."""
        p = self.problem
        if p.form == "masked":
            return (p.experts, p.capacity, p.k // 2)
        return (p.output_rows, p.k // 2)

    def _pointers(self, operands, stream: int) -> tuple[tuple[int, ...], set[int]]:
        """Describe and check every operand; (pointers in RUN_FIELDS order, producers)."""
        pointers, producers = [], set()
        for field, obj in zip(RUN_FIELDS, operands):
            if obj is None:
                pointers.append(0)
                continue
            if type(obj) is int:
                pointers.append(obj)
                continue
            pointers.append(
                array_pointer(field, obj, stream, producers, self.device, self._check_array)
            )
        return tuple(pointers), producers

    def _check_array(self, field: str, array) -> None:
        if field in _OUTPUTS and array.readonly:
            raise InvalidProblemError(f"{field} is read-only")
        if array.shape is not None:
            problem = array_problem(self.problem, field, array)
            if problem:
                raise InvalidProblemError(f"{field} {problem}")

    def _check_pointers(self, pointers) -> None:
        check_pointers(self.problem, pointers)

    def __repr__(self) -> str:
        p = self.problem
        return (
            f"QuantizePlan({p.form}, k={p.k}, rows={p.rows}, capacity={p.capacity}, "
            f"experts={p.experts}, {p.dtype}, {self.layout.launch.num_ctas} CTAs on device "
            f"{self.device})"
        )


# checks (pure: tested without a GPU) ---------------------------------------------------


def make_problem(k, form, rows, capacity, experts, dtype, row_stride) -> QuantizeProblem:
    """The plan's :class:`QuantizeProblem` from the constructor's arguments, checked."""
    if form not in FORMS:
        raise InvalidProblemError(f"form must be one of {FORMS}, got {form!r}")
    if dtype not in DTYPES:
        raise InvalidProblemError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    if form == "plain":
        if rows is None:
            raise InvalidProblemError("the plain form needs rows (T)")
        if capacity not in (None, rows):
            raise InvalidProblemError(
                f"the plain form writes its rows: capacity must be rows = {rows}, got {capacity}"
            )
        capacity = rows
    elif capacity is None:
        raise InvalidProblemError(
            f"the {form} form needs capacity (the most routed rows"
            f"{'' if form == 'contiguous' else ' per expert, max_m'})"
        )
    elif form == "contiguous" and rows is None:
        rows = capacity
    elif form == "masked" and rows is None and type(experts) is int and type(capacity) is int:
        rows = experts * capacity  # x is (E, max_m, k)
    problem = QuantizeProblem(
        form=form, rows=rows, k=k, experts=experts, capacity=capacity, dtype=dtype,
        row_stride=k if row_stride is None else row_stride,
    )  # fmt: skip
    problem.check()
    return problem


def array_problem(problem: QuantizeProblem, field: str, array) -> str | None:
    """Why ``array`` cannot be operand ``field`` of a plan for ``problem``, or None."""
    p = problem
    shape = tuple(array.shape)
    if field == "scales":
        return check_scales(array, SCALE_DTYPES, p.operand_bytes()["scales"])
    if field == "global_scale":
        if array.dtype != "f4":
            return f"must have dtype float32 (f4), got {array.dtype}"
        if prod(shape) < 1:
            return f"must hold one float32, got shape {shape}"
        return None
    if field in ("routing", "index"):
        if field == "routing":
            need = {"contiguous": p.experts + 1, "masked": p.experts}.get(p.form)
            what = "offsets[E + 1]" if p.form == "contiguous" else "masked_m[E]"
        else:
            need = p.capacity if p.form == "contiguous" else None
            what = "index[capacity]"
        if need is None:
            return f"is not an operand of the {p.form} form; pass None"
        if array.dtype != "i4":
            return f"must have dtype int32, got {array.dtype}"
        if shape != (need,) or (array.strides is not None and array.strides != (1,)):
            return f"must be int32 {what} of shape ({need},), got shape {shape}"
        return None
    if field == "out":
        if array.dtype not in FP4_DTYPES:
            return f"must have dtype {' or '.join(FP4_DTYPES)}, got {array.dtype}"
        row_bytes = p.k // 2
        allowed = [(p.output_rows, row_bytes)]
        if p.form == "masked":
            allowed.append((p.experts, p.capacity, row_bytes))
        if shape not in allowed or array.strides is not None:
            expected = " or ".join(str(s) for s in allowed)
            return f"must be C-contiguous uint8 of shape {expected}, got shape {shape}"
        return None
    # x: rows of k elements, row_stride apart
    if array.dtype not in _X_DTYPES[p.dtype]:
        return f"must have dtype {p.dtype} ({' or '.join(_X_DTYPES[p.dtype])}), got {array.dtype}"
    allowed = [(p.rows, p.k)]
    if p.form == "masked":
        allowed.append((p.experts, p.capacity, p.k))
    if shape not in allowed:
        return f"must have shape {' or '.join(str(s) for s in allowed)}, got {shape}"
    strides = array.strides
    if strides is None:
        strides = tuple(prod(shape[i + 1 :]) for i in range(len(shape)))
    expected = (
        (p.row_stride, 1) if len(shape) == 2 else (p.capacity * p.row_stride, p.row_stride, 1)
    )
    if any(extent > 1 and s != e for extent, s, e in zip(shape, strides, expected)):
        return (
            f"must have strides {expected} (elements; the plan's row_stride is "
            f"{p.row_stride}), got {strides}"
        )
    return None


def check_pointers(problem: QuantizeProblem, pointers) -> None:
    """Addresses present where the form needs them, aligned, and outputs that alias no
    other operand."""
    needed = {"x", "out", "scales", "global_scale"}
    if problem.form != "plain":
        needed.add("routing")
    for field, pointer in zip(RUN_FIELDS, pointers):
        if pointer == 0:
            if field in needed:
                raise InvalidProblemError(f"{field} is a null pointer")
            continue
        if problem.form == "plain" and field in ("routing", "index"):
            raise InvalidProblemError(f"{field} is not an operand of the plain form; pass None")
        if problem.form == "masked" and field == "index":
            raise InvalidProblemError("index is not an operand of the masked form; pass None")
        if not 0 < pointer < 1 << 63:
            raise InvalidProblemError(f"{field} is not a device address: {pointer}")
        if pointer % _ALIGN[field]:
            raise InvalidProblemError(
                f"{field} must be {_ALIGN[field]}-byte aligned, got address 0x{pointer:x}"
            )
    if problem.form == "contiguous" and pointers[RUN_FIELDS.index("index")] == 0:
        if problem.rows < problem.capacity:
            raise InvalidProblemError(
                f"without an index output row i reads row i of x: the plan's rows "
                f"({problem.rows}) must be >= capacity ({problem.capacity}), or pass index"
            )
    sizes = problem.operand_bytes(has_index=True)
    spans = {
        field: (pointer, pointer + sizes[field])
        for field, pointer in zip(RUN_FIELDS, pointers)
        if pointer and sizes[field]
    }
    for output in _OUTPUTS:
        start, end = spans[output]
        for field, (other_start, other_end) in spans.items():
            if field != output and start < other_end and other_start < end:
                raise InvalidProblemError(
                    f"{output} overlaps {field} (0x{other_start:x} + "
                    f"{other_end - other_start} bytes); the outputs must not alias "
                    "another operand"
                )
