"""MoE grouped GEMM with the routing on the GPU: one plan, any routing, no host sync.

In a MoE layer a router decides on the GPU, every step, how many tokens each expert
gets. A :class:`MoeGemmPlan` is made once per (experts E, n, k, layout, capacity); its
:meth:`~MoeGemmPlan.run` reads no sizes on the host, allocates nothing, never waits, and
costs the same host work for any E. The device counts become the grouped GEMM's tables
on the GPU: on sm_90a (up to 256 experts) each CTA of one *routed* GEMM launch builds
them itself (:mod:`nvfp4_aot.kernels.routed_groups`), elsewhere a small baked kernel
writes them on the same stream before the GEMM; experts with no tokens cost no tiles, and
a routing that sends nothing anywhere writes nothing. Captured once in a CUDA graph, a
run serves every later routing written into the same device arrays.

Two layouts, those serving engines use (E experts; B, SFB stacked per expert in both)::

    contiguous  (vLLM / SGLang CUTLASS MoE, torch._grouped_mm with offs)
      routing = offsets int32[E + 1]       expert e owns rows offsets[e] .. offsets[e+1]
      A  (T, k/2) uint8    rows: | e0 | e1 ...... | e3 | ... |   T <= capacity
      C  (T, n)   float16  rows: | e0 | e1 ...... | e3 | ... |   (same rows as A)
      SFA blocked, one buffer; expert e's scales start at row
          sf_offset[e] = sum_{j<e} round_up(m_j, 128)            (scale_offsets())
          | e0 + pad to 128 | e1 .... + pad | e3 + pad | ...    padding rows' scales 0
      B  (E, n, k/2), SFB E x blocked_scale_bytes(n, k)

    masked  (DeepGEMM / FlashInfer masked grouped GEMM, DeepEP low-latency dispatch)
      routing = masked_m int32[E]          expert e owns rows 0 .. masked_m[e] of its block
      A  (E, max_m, k/2)   C  (E, max_m, n)   rows >= masked_m[e] are never written
      SFA E x blocked_scale_bytes(max_m, k), B (E, n, k/2), SFB as above

``capacity`` is the most tokens a run may route: T (contiguous) or max_m (masked). The
routing (kernel or routed GEMM) clamps every expert's rows to it, so no routing, however
hostile (offsets out of order, counts past max_m, negative), makes a kernel read or write
outside the buffers the plan checked; results for such a routing are unspecified.
"""

from __future__ import annotations

from dataclasses import replace
from math import prod

from . import driver, loader, selection, validation
from .errors import InvalidProblemError
from .intake import array_pointer
from .launcher import CheckedTables, LaunchedPlan, Launcher
from .manifest import ROLE_ROUTED_GEMM, ROLE_ROUTING, ROUTED_SUFFIX, Epilogue
from .moe_layout import (
    LAYOUTS,
    RUN_FIELDS,
    MoeLayout,
    check_moe_problem,
    contiguous_scale_rows,
    scale_offsets,
)
from .operands import (
    FP4_DTYPES,
    OUT_DTYPE_CODES,
    SCALE_DTYPES,
    TORCH_ALPHA_DTYPES,
    TORCH_FP4_DTYPES,
    TORCH_OUT_DTYPES,
    TORCH_SCALE_DTYPES,
    TorchOperands,
    check_alpha,
    check_matrix,
    check_scales,
    is_c_contiguous,
    out_dtype_name,
    stream_handle,
)

__all__ = [
    "LAYOUTS",
    "MoeGemmPlan",
    "contiguous_scale_rows",
    "scale_offsets",
]

_POINTER_ALIGN = dict.fromkeys(RUN_FIELDS, validation.POINTER_ALIGN) | {
    "routing": 4,
    "alpha": validation.ALPHA_ALIGN,
}
_TORCH_DTYPES = {
    "routing": ("torch.int32",),
    "a": TORCH_FP4_DTYPES,
    "b": TORCH_FP4_DTYPES,
    "sfa": TORCH_SCALE_DTYPES,
    "sfb": TORCH_SCALE_DTYPES,
    "alpha": TORCH_ALPHA_DTYPES,
}


class MoeGemmPlan(LaunchedPlan):
    """A prepared MoE grouped GEMM: C = A_e @ B_e^T for the rows the routing gives expert e.

    Parameters
    ----------
    experts : int
        Number of experts E (any; more than the largest baked group count runs several
        GEMM launches inside one run).
    n, k : int
        Output columns (n % 32 == 0) and reduction length (k % 64 == 0).
    layout : "contiguous" or "masked"
        See the module docstring.
    capacity : int
        Most rows a run may route: tokens T (contiguous) or max_m per expert (masked).
    out_dtype : "float16" or "bfloat16" (or such a numpy / torch / JAX dtype)
        C's dtype.
    alpha : bool
        Whether every run passes a per-expert FP32 ``alpha`` (E values, read on the
        GPU): C = alpha[e] * A_e @ B_e^T.
    rows_per_expert : float, optional
        The rows you expect an expert to get per run (decode: a few tokens each); it
        picks the kernel family (:mod:`nvfp4_aot.selection`: 16-row tiles when at most
        16). By default capacity / experts (contiguous) or capacity (masked: max_m).
    routed : bool, optional
        Whether the GEMM launch builds its group tables from the device counts itself
        (a routed variant, :mod:`nvfp4_aot.kernels.routed_groups`: one launch a run, no
        routing kernel before it; ~2 µs less in a 1-token decode step on the H200).
        By default where the artifacts have one for the chosen family, the device and up
        to ``experts`` groups; True requires one, False runs the routing kernel.
    device, artifacts, ring_slots, kernel, capture_slots
        As for :class:`nvfp4_aot.GroupedGemmPlan`.
    """

    def __init__(
        self, experts: int, n: int, k: int, *, layout: str = "contiguous", capacity: int,
        device: int = 0, artifacts=None, ring_slots: int = 8, kernel: str | None = None,
        capture_slots: int = 8, out_dtype="float16", alpha: bool = False,
        rows_per_expert: float | None = None, routed: bool | None = None,
    ):  # fmt: skip
        if ring_slots < 1:
            raise ValueError(f"ring_slots must be >= 1, got {ring_slots}")
        if capture_slots < 1:
            raise ValueError(f"capture_slots must be >= 1, got {capture_slots}")
        check_moe_problem(experts, n, k, layout, capacity)
        self.experts, self.n, self.k = experts, n, k
        self.layout_name, self.capacity = layout, capacity
        self.out_dtype = out_dtype_name(out_dtype)
        self.alpha = bool(alpha)
        self.device = int(device)
        manifest = loader.load_manifest(artifacts)
        capability = loader.device_capability(self.device)
        epilogue = Epilogue(self.out_dtype, self.alpha)
        gemms = loader.variants_for(manifest, capability, self.device, epilogue=epilogue)
        routing = loader.variants_for(manifest, capability, self.device, role=ROLE_ROUTING)
        if rows_per_expert is None:
            rows_per_expert = capacity / experts if layout == "contiguous" else capacity
        elif (
            isinstance(rows_per_expert, bool)
            or not isinstance(rows_per_expert, (int, float))
            or not rows_per_expert >= 0
        ):
            raise InvalidProblemError(
                f"rows_per_expert must be a number >= 0, got {rows_per_expert!r}"
            )
        #: the GEMM kernel family this plan runs (by n, k and the rows per expert expected)
        self.family = selection.choose_family(gemms, [(rows_per_expert, n, k)], kernel)
        by_groups = {v.num_groups: v for v in gemms if v.family == self.family}
        routed_variant = _routed_variant(
            manifest, capability, self.family, epilogue, experts, routed
        )
        #: where the launches, words, tables and workspaces lie (:mod:`nvfp4_aot.moe_layout`)
        self.layout = MoeLayout.build(
            experts, n, k, layout, capacity, by_groups, {v.num_groups: v for v in routing},
            driver.sm_count(self.device), ring_slots, capture_slots, routed_variant,
        )  # fmt: skip
        self._required = self.layout.operand_bytes()
        # shapes taken on the PyTorch fast path (packed FP4 as uint8 bytes); scales by size
        rows = capacity if layout == "contiguous" else experts * capacity
        leading = ((capacity,),) if layout == "contiguous" else ((experts, capacity), (rows,))
        torch_shapes = {
            "routing": ((experts + 1,) if layout == "contiguous" else (experts,),),
            "a": tuple((*lead, k // 2) for lead in leading),
            "c": tuple((*lead, n) for lead in leading),
            "b": ((experts, n, k // 2), (experts * n, k // 2)),
            "alpha": ((experts,),),
        }
        torch_dtypes = _TORCH_DTYPES | {"c": TORCH_OUT_DTYPES[self.out_dtype]}
        self._fields = self.layout.run_fields
        self._torch = TorchOperands(
            self.device, self._fields, torch_dtypes, torch_shapes, self._required
        )
        # per field in run-word order: (alignment, bytes); the last pointer set checked
        self._pointer_rules = tuple((_POINTER_ALIGN[f], self._required[f]) for f in self._fields)
        self._c_word = self._fields.index("c")
        self._checked: tuple | None = None
        kernels = [loader.load_kernel(v, self.device, artifacts) for v in self.layout.variants]
        self._launcher = Launcher(self.device, self.layout, kernels)
        self._tables = CheckedTables(self._check_pointers, self.layout.run_table)

    # running ----------------------------------------------------------------------------

    def run(self, a, b, c, sfa, sfb, routing, stream=None, alpha=None) -> None:
        """Launch on ``stream``; returns without waiting.

        Parameters
        ----------
        a, b, c, sfa, sfb : device arrays or int pointers (one each, not per expert)
            In the plan's layout (module docstring): A packed FP4, B (E, n, k/2), C
            in the plan's ``out_dtype``, SFA/SFB blocked E4M3 scales.
        routing : int32 device array or pointer
            offsets[E + 1] (contiguous) or masked_m[E] (masked), read on the GPU.
        stream : stream object or handle, optional
        alpha : float32 device array of E values or pointer; exactly when the plan was
            made with ``alpha=True``. Read on the GPU (a graph replay sees new values).
        """
        handle = stream if type(stream) is int and stream >= 0 else stream_handle(stream)
        if self.alpha:
            if alpha is None:
                validation.check_alpha_given(alpha, True, "expert")
            self._launch_operands((routing, a, b, c, sfa, sfb, alpha), handle)
        else:
            if alpha is not None:
                validation.check_alpha_given(alpha, False, "expert")
            self._launch_operands((routing, a, b, c, sfa, sfb), handle)

    def set_graph_operands(self, a, b, c, sfa, sfb, routing, alpha=None) -> None:
        """Point the next replay of a CUDA graph that captured :meth:`run` at new operands
        (call it while no replay is pending). New routings and alpha values need no
        call: a replay reads those arrays' current contents."""
        pointers, _producers = self._pointers(self._operands(a, b, c, sfa, sfb, routing, alpha), 0)
        self._launcher.stage_graph(self._tables.table(pointers))

    def _operands(self, a, b, c, sfa, sfb, routing, alpha) -> tuple:
        """The operands in run-word order; alpha given exactly when the plan has it."""
        validation.check_alpha_given(alpha, self.alpha, "expert")
        if self.alpha:
            return (routing, a, b, c, sfa, sfb, alpha)
        return (routing, a, b, c, sfa, sfb)

    def _pointers(self, operands, stream: int) -> tuple[tuple[int, ...], set[int]]:
        """Describe and check every operand; (pointers in run-word order, producers).
        Ints and CUDA torch tensors that plainly fit take one pass (:class:`TorchOperands`);
        anything else is described in full (:func:`array_pointer`), which names it."""
        pointers = self._torch.pointers(operands)
        producers = set()
        if None in pointers:
            for i, (field, obj) in enumerate(zip(self._fields, operands)):
                if pointers[i] is None:
                    pointers[i] = array_pointer(
                        field, obj, stream, producers, self.device, self._check_array
                    )
        return tuple(pointers), producers

    def _check_array(self, field: str, array) -> None:
        if array.shape is not None:
            problem = self._array_problem(field, array)
            if problem:
                raise InvalidProblemError(f"{field} {problem}")

    def _array_problem(self, field: str, array) -> str | None:
        """Why ``array`` cannot be operand ``field`` of this plan, or None."""
        e, n, k, cap = self.experts, self.n, self.k, self.capacity
        masked = self.layout_name == "masked"
        if field in ("sfa", "sfb"):
            return check_scales(array, SCALE_DTYPES, self._required[field])
        if field == "alpha":
            return check_alpha(array, e)
        if field == "routing":
            need = e if masked else e + 1
            if tuple(array.shape) != (need,):
                what = "masked_m[E]" if masked else "offsets[E + 1]"
                return f"must be int32 {what} of shape ({need},), got shape {array.shape}"
            return check_matrix(replace(array, shape=(1, need)), ("i4",), 1, 4 * need)
        # A, B, C: row-major over their leading axes
        dtypes = (OUT_DTYPE_CODES[self.out_dtype],) if field == "c" else FP4_DTYPES
        row_bytes = 2 * n if field == "c" else k // 2
        leading = tuple(array.shape[:-1])
        if field == "b":
            allowed = ((e, n), (e * n,))
        elif masked:
            allowed = ((e, cap), (e * cap,))
        else:
            allowed = (leading,) if len(leading) == 1 and leading[0] >= cap else ()
        if leading not in allowed:
            last = row_bytes // 2 if field == "c" else row_bytes
            if field == "b" or masked:
                expected = f"({e}, {n if field == 'b' else cap}, {last})"
            else:
                expected = f"(rows >= capacity = {cap}, {last})"
            return f"must have shape {expected}, got {array.shape}"
        if not is_c_contiguous(array.shape, array.strides):
            return f"must be C-contiguous, got strides {array.strides} (elements)"
        rows = prod(leading)
        matrix = replace(array, shape=(rows, array.shape[-1]), strides=None)
        return check_matrix(matrix, dtypes, rows, row_bytes, writable=field == "c")

    def _check_pointers(self, pointers) -> None:
        """Addresses, alignment and no aliasing of c, for the pointers that differ from
        the last set checked (all of them when c does): a new routing each run re-checks
        the routing alone. Each check depends only on its field's pointer and c's."""
        last, c_word = self._checked, self._c_word
        c = pointers[c_word]
        if last is None or last[c_word] != c or len(last) != len(pointers):
            changed = range(len(pointers))
        else:
            changed = [i for i, (p, q) in enumerate(zip(pointers, last)) if p != q]
        for i in changed:
            self._check_address(i, pointers[i])
        c_end = c + self._required["c"]
        for i in changed:
            pointer, size = pointers[i], self._pointer_rules[i][1]
            if i != c_word and pointer < c_end and c < pointer + size:
                raise InvalidProblemError(
                    f"c overlaps {self._fields[i]} (0x{pointer:x} + {size} bytes); "
                    "the output must not alias an input"
                )
        self._checked = pointers  # only a set that passed every check

    def _check_address(self, word: int, pointer: int) -> None:
        """Operand ``word``'s pointer is a device address with its field's alignment."""
        align = self._pointer_rules[word][0]
        if not 0 < pointer < 1 << 63:
            raise InvalidProblemError(f"{self._fields[word]} is not a device address: {pointer}")
        if pointer % align:
            raise InvalidProblemError(
                f"{self._fields[word]} must be {align}-byte aligned, got address 0x{pointer:x}"
            )

    def __repr__(self) -> str:
        return (
            f"MoeGemmPlan({self.experts} experts, n={self.n}, k={self.k}, {self.layout_name}, "
            f"capacity {self.capacity}, {len(self.layout.chunks)} GEMM launch(es) of "
            f"{self.layout.gemm_variant.family} ({self.layout.gemm_variant.epilogue}) on "
            f"device {self.device})"
        )


def _routed_variant(manifest, capability, family: str, epilogue, experts: int, wanted):
    """The routed twin of ``family`` with ``epilogue`` and the fewest groups >= ``experts``
    for ``capability``, or None (``wanted`` False, or none baked; True: one is required)."""
    if wanted is not None and not isinstance(wanted, bool):
        raise InvalidProblemError(f"routed must be None, True or False, got {wanted!r}")
    if wanted is False:
        return None
    found = [
        v
        for v in manifest.variants
        if v.role == ROLE_ROUTED_GEMM
        and v.family == family + ROUTED_SUFFIX
        and tuple(v.compute_capability) == tuple(capability)
        and v.epilogue == epilogue
        and v.num_groups >= experts
    ]
    if not found:
        if wanted:
            raise InvalidProblemError(
                f"routed=True: no routed variant of {family} writing {epilogue} for "
                f"{experts} experts on compute capability {capability[0]}.{capability[1]} "
                "in the artifacts"
            )
        return None
    return min(found, key=lambda v: v.num_groups)
