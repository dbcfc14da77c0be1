"""Plans: everything about a list of problem sizes that can be prepared once.

A :class:`GroupedGemmPlan` checks the problem sizes once, picks the kernel family
(:mod:`nvfp4_aot.selection`), lays out its launches and buffers
(:mod:`nvfp4_aot.launch_layout`), loads the kernels and hands them to a
:class:`~nvfp4_aot.launcher.Launcher`, which owns the device buffer, the ring of
pointer-table slots and the launches (ordering, CUDA graphs, lifetime).

Running turns the operands into checked pointers (:mod:`nvfp4_aot.intake`), packs them
into a slot table and launches it. A pointer set that passed validation is remembered
with its table, so a run with known int pointers is a dict lookup, one slice copy into
pinned memory and five driver calls through their C entry points
(:class:`driver.DirectCalls`); the path imports no numpy. Measurements:
``bench/host_path.py``, ``docs/H200_RESULTS.md``.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from . import driver, loader, selection, validation
from .errors import InvalidProblemError
from .intake import OperandIntake, describe, infer_problem_sizes
from .launch_layout import LaunchLayout
from .launcher import CheckedTables, LaunchedPlan, Launcher
from .manifest import Epilogue
from .operands import out_dtype_name, stream_handle
from .stacked import StackedIntake


class GroupedGemmPlan(LaunchedPlan):
    """A prepared grouped GEMM for fixed problem sizes on one device.

    Parameters
    ----------
    problem_sizes : sequence of (m, n, k) or (m, n, k, l)
        One entry per group; see :mod:`nvfp4_aot.validation` for the rules.
    device : int
        CUDA device ordinal.
    artifacts : path, optional
        Artifacts directory (default: :func:`nvfp4_aot.paths.artifacts_dir`).
    ring_slots : int
        Pointer-table slots, i.e. runs that may be queued before :meth:`run` waits.
    capture_slots : int
        Runs of this plan that CUDA graphs may hold at once (each keeps its own table).
    kernel : str, optional
        Kernel family to run (``nvfp4-aot info`` lists them); by default the plan
        picks one for its problem sizes (:mod:`nvfp4_aot.selection`).
    out_dtype : "float16" or "bfloat16" (or such a numpy / torch / JAX dtype)
        C's dtype. Conversion rounds to nearest even; values past the format's range
        become +-inf (float16: |x| >= 65520).
    alpha : bool
        Whether every run passes a float32 ``alpha`` array, one value per group, read
        on the GPU: C_g = alpha[g] * A_g @ B_g^T. Without it nothing is multiplied.

    Examples
    --------
    >>> with GroupedGemmPlan([(128, 256, 512)]) as plan:   # doctest: +SKIP
    ...     plan.run([a], [b], [c], [sfa], [sfb], stream=torch.cuda.current_stream())
    """

    def __init__(
        self, problem_sizes, device: int = 0, *, artifacts=None, ring_slots: int = 8,
        kernel: str | None = None, capture_slots: int = 8, out_dtype="float16",
        alpha: bool = False,
    ):  # fmt: skip
        if ring_slots < 1:
            raise ValueError(f"ring_slots must be >= 1, got {ring_slots}")
        if capture_slots < 1:
            raise ValueError(f"capture_slots must be >= 1, got {capture_slots}")
        self.problem_sizes = validation.problem_sizes(problem_sizes)
        self.device = int(device)
        self.out_dtype = out_dtype_name(out_dtype)
        self.alpha = bool(alpha)
        manifest = loader.load_manifest(artifacts)
        found = loader.variants_for(
            manifest, loader.device_capability(self.device), self.device,
            epilogue=Epilogue(self.out_dtype, self.alpha),
        )  # fmt: skip
        self.sm_count = driver.sm_count(self.device)
        #: the kernel family this plan runs
        self.family = selection.choose_family(found, self.problem_sizes, kernel)
        by_groups = {v.num_groups: v for v in found if v.family == self.family}
        #: where the launches, tables and workspaces lie (:mod:`nvfp4_aot.launch_layout`)
        self.layout = LaunchLayout.build(
            self.problem_sizes, by_groups, self.sm_count, ring_slots, capture_slots
        )
        self._intake = OperandIntake(self.problem_sizes, self.device, self.out_dtype, self.alpha)
        kernels = [loader.load_kernel(v, self.device, artifacts) for v in self.layout.variants]
        self._launcher = Launcher(self.device, self.layout, kernels)
        self._tables = CheckedTables(self._intake.check_pointers, self.layout.pointer_table)
        self._stacked = StackedIntake(self._intake)
        self._stacked_tables = CheckedTables(
            self._stacked.check,
            lambda bases: self.layout.pointer_table(self._stacked.expand(bases)),
        )

    # facts ------------------------------------------------------------------------------

    @property
    def num_groups(self) -> int:
        return len(self.problem_sizes)

    @property
    def ring_slots(self) -> int:
        return self.layout.ring_slots

    @property
    def graph_slot(self) -> int:
        return self.layout.graph_slot

    @property
    def launches(self):
        return self.layout.launches

    @property
    def variants(self):
        return self.layout.variants

    @property
    def workspace_bytes(self) -> int:
        return self.layout.workspace_bytes

    @property
    def device_bytes(self) -> int:
        return self.layout.device_bytes

    def kernel_inputs(self, slot: int = 0) -> list[dict[str, int]]:
        """The kernel inputs of every sub-launch for ring slot ``slot`` (for inspection)."""
        return self._launcher.kernel_inputs(slot)

    # running ----------------------------------------------------------------------------

    def run(self, a, b, c, sfa, sfb, stream=None, alpha=None) -> None:
        """Launch the grouped GEMM on ``stream``; returns without waiting.

        Parameters
        ----------
        a, b, c, sfa, sfb : sequences, one entry per group
            Device pointers (int), ``__cuda_array_interface__`` or ``__dlpack__``
            objects: A (m, k/2) and B (n, k/2) packed FP4 bytes, C (m, n) in the plan's
            ``out_dtype``, SFA/SFB the blocked E4M3 scales (>= ``blocked_scale_bytes``).
        stream : stream object or handle, optional
            None is the legacy default stream.
        alpha : float32 device array (>= one value per group) or pointer, optional
            Exactly when the plan was made with ``alpha=True``.

        Raises
        ------
        InvalidProblemError
            Naming the group, the operand, expected and actual value.
        """
        handle = stream if type(stream) is int and stream >= 0 else stream_handle(stream)
        table = self._known_table(a, b, c, sfa, sfb, alpha)
        if table is not None:
            self._launcher.launch(table, handle)
            return
        flat, producers = self._intake.pointers(a, b, c, sfa, sfb, handle, alpha)
        self._launcher.launch(self._tables.table(tuple(flat)), handle, producers)

    def _known_table(self, a, b, c, sfa, sfb, alpha) -> bytes | None:
        """Steady state: the packed table of int pointers that passed validation before,
        else None. Only int operands are looked up: arrays go to the intake unhashed (a
        torch tensor's ``__hash__`` is Python code, and the tables hold int tuples)."""
        try:
            if type(a[0]) is not int:
                return None
            key = (*a, *b, *c, *sfa, *sfb, alpha) if self.alpha else (*a, *b, *c, *sfa, *sfb)
            table = self._tables.get(key)
            if table is not None and not len(a) == len(b) == len(c) == len(sfa) == self.num_groups:
                return None
        except (TypeError, LookupError):  # not sequences, unhashable: the intake says why
            return None
        return table if (alpha is None) != self.alpha else None

    def run_stacked(self, a, b, c, sfa, sfb, stream=None, alpha=None) -> None:
        """:meth:`run` with one array per operand holding every group's operand, at the
        byte offsets :attr:`stacked_offsets` gives (:mod:`nvfp4_aot.stacked`): five
        arrays are looked at per call, whatever the number of groups.

        Parameters
        ----------
        a, b, c, sfa, sfb : device arrays or int pointers, one each
            Of at least :attr:`stacked_bytes` bytes; A, B packed FP4 bytes, C in the
            plan's ``out_dtype``, SFA, SFB blocked E4M3 scales. A, B and C are
            C-contiguous with rows of k/2 (A, B) or n (C) elements where the groups
            share k or n; scales dense.
        stream, alpha : as for :meth:`run`

        Raises
        ------
        InvalidProblemError
            Naming the stacked operand (or the group whose pointer is wrong).
        """
        handle = stream if type(stream) is int and stream >= 0 else stream_handle(stream)
        bases, producers = self._stacked.bases(a, b, c, sfa, sfb, handle, alpha)
        self._launcher.launch(self._stacked_tables.table(bases), handle, producers)

    @property
    def stacked_offsets(self) -> dict[str, tuple[int, ...]]:
        """Per operand ("a", "b", "c", "sfa", "sfb"): the byte offset of each group's
        operand in the array :meth:`run_stacked` takes."""
        return self._stacked.offsets

    @property
    def stacked_bytes(self) -> dict[str, int]:
        """Per operand: the bytes the array :meth:`run_stacked` takes must hold."""
        return self._stacked.required

    def set_graph_stacked(self, a, b, c, sfa, sfb, alpha=None) -> None:
        """:meth:`set_graph_pointers` for a graph that captured :meth:`run_stacked`."""
        bases, _producers = self._stacked.bases(a, b, c, sfa, sfb, 0, alpha)
        self._launcher.stage_graph(self._stacked_tables.table(bases))

    def pointers(
        self, a, b, c, sfa, sfb, stream: int = 0, alpha=None
    ) -> tuple[list[int], set[int]]:
        """Validate operands; returns the flat (A, B, C, SFA, SFB) x group pointer list
        (then alpha's address, for a plan with alpha) and the producer streams
        (``__cuda_array_interface__`` v3) to order after."""
        flat, producers = self._intake.pointers(a, b, c, sfa, sfb, stream, alpha)
        self._tables.table(tuple(flat))
        return flat, producers

    def launch_pointers(self, pointers, stream: int = 0, producer_streams=()) -> None:
        """Launch with a flat pointer list as :meth:`pointers` returns it (validated here
        too, unless the same set was validated before)."""
        self._launcher.launch(self._tables.table(tuple(pointers)), stream, producer_streams)

    def set_graph_pointers(self, a, b, c, sfa, sfb, alpha=None) -> None:
        """Point the next replay of a CUDA graph that captured :meth:`run` at new operands.

        Validates like :meth:`run` and rewrites the graph slot's table on the device, which
        the graph's launches read when it replays. Call it only while no replay of the
        graph is pending (e.g. after synchronising the stream it was launched on): a replay
        in flight may otherwise read half-written tables.
        """
        flat, _producers = self._intake.pointers(a, b, c, sfa, sfb, 0, alpha)
        self._launcher.stage_graph(self._tables.table(tuple(flat)))

    def __repr__(self) -> str:
        names = ", ".join(v.name for v in self.variants) or "no kernel"
        return (
            f"GroupedGemmPlan({self.num_groups} groups on device {self.device}, "
            f"{len(self.launches)} launch(es) of {names})"
        )


# plan cache and the one-call API ----------------------------------------------------------

_PLAN_CACHE_SIZE = 64
_plans: OrderedDict = OrderedDict()
_plans_lock = threading.Lock()


def get_plan(
    problem_sizes, device: int = 0, *, artifacts=None, out_dtype="float16", alpha: bool = False
) -> GroupedGemmPlan:
    """A cached plan for ``problem_sizes`` on ``device`` with that epilogue (the most recent
    64 are kept)."""
    sizes = validation.problem_sizes(problem_sizes)
    out_dtype = out_dtype_name(out_dtype)
    key = (int(device), sizes, None if artifacts is None else str(artifacts), out_dtype, alpha)
    with _plans_lock:
        plan = _plans.get(key)
        if plan is not None and not plan.closed:
            _plans.move_to_end(key)
            return plan
        plan = GroupedGemmPlan(  # sizes checked above
            sizes, device, artifacts=artifacts, out_dtype=out_dtype, alpha=alpha
        )
        _plans[key] = plan
        while len(_plans) > _PLAN_CACHE_SIZE:
            _plans.popitem(last=False)  # freed once its last user drops it
        return plan


def clear_plan_cache() -> None:
    with _plans_lock:
        _plans.clear()


def grouped_gemm(
    a, b, c, sfa, sfb, problem_sizes=None, stream=None, device=None, alpha=None, out_dtype=None
) -> None:
    """C_g = A_g @ B_g^T (times alpha[g], where given) for every group g, on ``stream``,
    through a cached plan.

    Problem sizes are inferred from the shapes of A and B when not given; the device
    from the operands (DLPack, CuPy, PyTorch), else 0; the output dtype from C (float16
    where C are raw pointers and ``out_dtype`` is not given).
    """
    handle = stream_handle(stream)
    columns = []
    for field, column in zip(validation.OPERAND_FIELDS, (a, b, c, sfa, sfb)):
        columns.append([describe(g, field, obj, handle) for g, obj in enumerate(column)])
    if problem_sizes is None:
        if len(columns[0]) != len(columns[1]):
            raise InvalidProblemError(
                f"a has {len(columns[0])} operands and b has {len(columns[1])}"
            )
        problem_sizes = infer_problem_sizes(columns[0], columns[1])
    if device is None:
        found = [arr.device for col in columns for arr in col if arr.device is not None]
        device = found[0] if found else 0
    if out_dtype is None:
        codes = {arr.dtype for arr in columns[2] if arr.shape is not None}
        out_dtype = "bfloat16" if codes == {"bf16"} else "float16"  # mixed: C's check says
    plan = get_plan(problem_sizes, device, out_dtype=out_dtype, alpha=alpha is not None)
    plan.run(*columns, stream=handle, alpha=alpha)
