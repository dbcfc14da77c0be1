"""Plans: everything about a list of problem sizes that can be prepared once.

A :class:`GroupedGemmPlan` checks the problem sizes, picks the kernel family
(:mod:`nvfp4_aot.selection`), lays out its launches and buffers
(:mod:`nvfp4_aot.launch_layout`), loads the kernels and allocates, once, one device
buffer (problem sizes and CTA prefix uploaded at creation, the tensormap workspaces, a
ring of pointer-table slots) plus pinned host staging for the slots. Every slot has its
kernel parameters packed at creation, since the addresses they hold never change.

Running turns the operands into checked pointers (:mod:`nvfp4_aot.intake`), writes them
into a free slot's staging, copies that slot to the device with one
``cuMemcpyHtoDAsync`` on the caller's stream, launches (one ``cuLaunchKernelEx`` per
sub-launch) and records the slot's event. Nothing is allocated and nothing waits on the
steady-state path; when a ring slot still holds the run's pointer table (the same
operands as one of the last ``ring_slots`` distinct sets), the run launches from that
slot and the staging and the copy are skipped too.

Host cost. A pointer set that passed validation is remembered with its packed slot table,
so a run with known int pointers is a dict lookup, one slice copy into pinned memory and
five driver calls through their C entry points (:class:`driver.DirectCalls`); the path
imports no numpy. Measurements: ``bench/host_path.py``, ``docs/H200_RESULTS.md``.

Concurrency. The kernel writes its tensormap workspace, so two launches of one plan must
never overlap on the GPU. A plan therefore orders its own launches: when a run uses a
different stream than the previous one, the new stream first waits for the previous
run's event (``cuStreamWaitEvent``). Runs of one plan on several streams are thus
serialised, while different plans (each with its own workspace) run concurrently. Host
threads may share a plan; a lock guards the ring.

Ring slots. A slot's staging may be rewritten only after the copy that read it has run.
Since a plan's launches complete in order, knowing that run ``s`` completed proves every
earlier run did: the plan remembers the newest run known to be complete and queries an
event only when a slot is not yet known to be free, waiting on it only when every slot is
in flight (``ring_slots`` runs queued on the GPU).
"""

from __future__ import annotations

import ctypes
import threading
import weakref
from collections import OrderedDict

from . import driver, loader, selection, validation
from .errors import InvalidProblemError, Nvfp4Error
from .intake import OperandIntake, describe, infer_problem_sizes
from .intmath import round_up
from .launch_layout import LaunchLayout
from .operands import stream_handle

_VALIDATED_SETS = 64  # pointer sets remembered as valid per plan
_PARAM_ALIGN = 64  # kernel parameter buffers start at cache-line boundaries


class GroupedGemmPlan:
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
    kernel : str, optional
        Kernel family to run (``nvfp4-aot info`` lists them); by default the plan
        picks one for its problem sizes (:mod:`nvfp4_aot.selection`).

    Examples
    --------
    >>> with GroupedGemmPlan([(128, 256, 512)]) as plan:   # doctest: +SKIP
    ...     plan.run([a], [b], [c], [sfa], [sfb], stream=torch.cuda.current_stream())
    """

    def __init__(
        self, problem_sizes, device: int = 0, *, artifacts=None, ring_slots: int = 8,
        kernel: str | None = None,
    ):  # fmt: skip
        if ring_slots < 1:
            raise ValueError(f"ring_slots must be >= 1, got {ring_slots}")
        self.problem_sizes = validation.problem_sizes(problem_sizes)
        self.device = int(device)
        manifest = loader.load_manifest(artifacts)
        found = loader.variants_for(manifest, loader.device_capability(self.device), self.device)
        self.sm_count = driver.sm_count(self.device)
        #: the kernel family this plan runs
        self.family = selection.choose_family(found, self.problem_sizes, kernel)
        by_groups = {v.num_groups: v for v in found if v.family == self.family}
        #: where the launches, tables and workspaces lie (:mod:`nvfp4_aot.launch_layout`)
        self.layout = LaunchLayout.build(self.problem_sizes, by_groups, self.sm_count, ring_slots)
        self._intake = OperandIntake(self.problem_sizes, self.device)
        self._kernels = tuple(
            loader.load_kernel(variant, self.device, artifacts) for variant in self.layout.variants
        )
        self._lock = threading.Lock()
        driver.activate(self.device)
        self._resources = _Resources()
        self._finalizer = weakref.finalize(self, self._resources.release)
        self._finalizer.atexit = False  # at exit the process frees everything anyway
        try:
            self._allocate()
        except BaseException:
            self._finalizer()
            raise
        self._prepare_launches()
        # pointer sets that passed validation (flat tuple -> slot table), newest last
        self._validated: OrderedDict = OrderedDict()
        # ring state: which run last used each slot, the newest run known complete
        self._slot_seq = [0] * self.ring_slots
        self._seq = 0
        self._done_seq = 0
        self._next = 0
        self._last_slot = None
        self._last_stream = None
        # which table each ring slot holds on the device, and the reverse: a run whose
        # table a slot still holds launches from that slot without staging or a copy
        self._slot_table: list[bytes | None] = [None] * self.ring_slots
        self._table_slot: dict[bytes, int] = {}
        self._closed = False

    # setup ------------------------------------------------------------------------------

    def _allocate(self) -> None:
        """The device buffer (static tables uploaded, workspaces zeroed where a kernel
        needs it, slots zero), pinned staging per slot, events."""
        layout, res = self.layout, self._resources
        res.device = self.device
        res.device_ptr = driver.mem_alloc(layout.device_bytes)
        staging_bytes = layout.slots * layout.slot_bytes
        res.host_ptr = driver.host_alloc(staging_bytes)
        ctypes.memset(res.host_ptr, 0, staging_bytes)
        self._staging_addresses = tuple(
            res.host_ptr + slot * layout.slot_bytes for slot in range(layout.slots)
        )
        # a writable view of each slot's pinned staging: a whole table is one slice copy
        self._staging = tuple(
            memoryview((ctypes.c_char * layout.slot_bytes).from_address(address)).cast("B")
            for address in self._staging_addresses
        )
        static = layout.static_tables()
        image = (ctypes.c_char * len(static)).from_buffer(static)
        driver.memcpy_htod(res.device_ptr, ctypes.addressof(image), len(static))
        if layout.zero_workspace:
            # both workspaces (eager and graph), done before any stream can launch
            start = layout.workspace_offset
            end = layout.graph_workspace_offset + layout.workspace_bytes
            driver.memset_d8(res.device_ptr + start, 0, end - start)
            driver.synchronize()
        for slot in range(layout.slots):  # padding words of the tables stay zero
            driver.memcpy_htod(
                self._slot_address(slot), self._staging_addresses[slot], layout.slot_bytes
            )
        res.events = [driver.event_create() for _ in range(self.ring_slots)]
        res.sync_event = driver.event_create()

    def _prepare_launches(self) -> None:
        """Kernel parameters packed once per (slot, sub-launch) (the addresses they hold
        never change) and the prepared launches, with every handle in the form the
        per-run calls take (:func:`driver.run_calls`)."""
        layout, res = self.layout, self._resources
        self._params = []  # [slot][launch] -> kernelParams address
        for slot in range(layout.slots):
            per_launch = []
            for launch, kernel in zip(layout.launches, self._kernels):
                inputs = layout.kernel_inputs(launch, res.device_ptr, slot)
                per_launch.append(_packed_params(kernel.packer, inputs, res.keep))
            self._params.append(tuple(per_launch))
        calls = self._calls = driver.run_calls()
        self._launch_specs = tuple(
            calls.launch_spec(
                k.function,
                launch.grid,
                k.variant.block,
                k.variant.dynamic_smem_bytes,
                [(a.id, a.values) for a in k.variant.launch_attributes],
            )
            for launch, k in zip(layout.launches, self._kernels)
        )
        self._context = calls.handle(driver.current_context(self.device))
        self._events = tuple(calls.handle(e) for e in res.events)
        self._sync_event = calls.handle(res.sync_event)

    def _slot_address(self, slot: int) -> int:
        return self._resources.device_ptr + self.layout.slot_offset(slot)

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
        base = self._resources.device_ptr
        return [self.layout.kernel_inputs(launch, base, slot) for launch in self.launches]

    # running ----------------------------------------------------------------------------

    def run(self, a, b, c, sfa, sfb, stream=None) -> None:
        """Launch the grouped GEMM on ``stream``; returns without waiting.

        Parameters
        ----------
        a, b, c, sfa, sfb : sequences, one entry per group
            Device pointers (int), ``__cuda_array_interface__`` or ``__dlpack__``
            objects: A (m, k/2) and B (n, k/2) packed FP4 bytes, C (m, n) float16,
            SFA/SFB the blocked E4M3 scales (>= ``blocked_scale_bytes`` bytes).
        stream : stream object or handle, optional
            None is the legacy default stream.

        Raises
        ------
        InvalidProblemError
            Naming the group, the operand, expected and actual value.
        """
        handle = stream if type(stream) is int and stream >= 0 else stream_handle(stream)
        # Steady state: int pointers that passed validation before (remembered with their
        # packed table) go straight to the launch.
        try:
            table = self._validated.get((*a, *b, *c, *sfa, *sfb))
            if table is not None and not len(a) == len(b) == len(c) == len(sfa) == self.num_groups:
                table = None
        except TypeError:  # not sequences, or unhashable operands: the intake says why
            table = None
        if table is not None:
            self._launch(table, handle, ())
            return
        flat, producers = self._intake.pointers(a, b, c, sfa, sfb, handle)
        self._launch(self._table(flat), handle, producers)

    def pointers(self, a, b, c, sfa, sfb, stream: int = 0) -> tuple[list[int], set[int]]:
        """Validate operands; returns the flat (A, B, C, SFA, SFB) x group pointer list
        and the producer streams (``__cuda_array_interface__`` v3) to order after."""
        flat, producers = self._intake.pointers(a, b, c, sfa, sfb, stream)
        self._table(flat)
        return flat, producers

    def launch_pointers(self, pointers, stream: int = 0, producer_streams=()) -> None:
        """Launch with a flat pointer list as :meth:`pointers` returns it (validated here
        too, unless the same set was validated before)."""
        self._launch(self._table(pointers), stream, producer_streams)

    def set_graph_pointers(self, a, b, c, sfa, sfb) -> None:
        """Point the next replay of a CUDA graph that captured :meth:`run` at new operands.

        Validates like :meth:`run` and rewrites the graph slot's pinned staging, which the
        graph's copy node reads when it replays. Call it only while no replay of the graph
        is pending (e.g. after synchronising the stream it was launched on): a replay in
        flight may otherwise read half-written tables.
        """
        flat, _producers = self._intake.pointers(a, b, c, sfa, sfb, 0)
        table = self._table(flat)
        with self._lock:
            if self._closed:
                raise Nvfp4Error("the plan is closed")
            self._staging[self.graph_slot][:] = table

    def _table(self, flat) -> bytes:
        """The slot table of pointer set ``flat``, checked on first sight; sets seen
        before (buffers are usually reused) are not checked again."""
        key = tuple(flat)
        table = self._validated.get(key)
        if table is not None:
            self._validated.move_to_end(key)
            return table
        self._intake.check_pointers(key)
        table = self.layout.pointer_table(key)
        self._validated[key] = table
        if len(self._validated) > _VALIDATED_SETS:
            self._validated.popitem(last=False)
        return table

    def _launch(self, table: bytes, stream: int, producer_streams) -> None:
        """Stage ``table`` in a free ring slot (unless a slot still holds it), copy it to
        the device, launch, and record the slot's event; all on ``stream``."""
        calls = self._calls
        with self._lock:
            if self._closed:
                raise Nvfp4Error("the plan is closed")
            if calls.stream_is_capturing(stream):
                self._launch_captured(table, stream)
                return
            calls.set_context(self._context)
            if producer_streams or stream != self._last_stream:
                self._order_after(producer_streams, stream)
            slot = self._table_slot.get(table)
            if slot is None:
                slot = self._free_slot()
                self._stage(slot, table, stream)
            try:
                for spec, params in zip(self._launch_specs, self._params[slot]):
                    calls.launch(spec, stream, params)
            finally:  # after a failed launch too: the slot's copy may be queued
                calls.event_record(self._events[slot], stream)
                self._seq += 1
                self._slot_seq[slot] = self._seq
                self._last_slot = slot
                self._last_stream = stream

    def _launch_captured(self, table: bytes, stream: int) -> None:
        """A run recorded into a CUDA graph: the graph slot and the graph workspace, no
        ring events. The captured copy reads the graph slot's pinned staging at each
        replay, which :meth:`set_graph_pointers` rewrites between replays."""
        calls = self._calls
        calls.set_context(self._context)  # as eager runs: the plan's device current
        slot = self.graph_slot
        self._stage(slot, table, stream)
        for spec, params in zip(self._launch_specs, self._params[slot]):
            calls.launch(spec, stream, params)

    def _stage(self, slot: int, table: bytes, stream: int) -> None:
        """Write ``table`` into the slot's pinned staging and copy it to the device on
        ``stream``. (Letting the kernels read mapped pinned memory instead saves the
        copy but costs GPU time per run: docs/H200_RESULTS.md.)"""
        self._staging[slot][:] = table
        self._calls.memcpy_htod_async(
            self._slot_address(slot), self._staging_addresses[slot], self.layout.slot_bytes,
            stream,
        )  # fmt: skip
        if slot < self.ring_slots:  # a ring slot (not the graph slot) now holds this table
            self._table_slot.pop(self._slot_table[slot], None)
            self._slot_table[slot] = table
            self._table_slot[table] = slot

    def _order_after(self, producer_streams, stream: int) -> None:
        """Make ``stream`` wait for the producers' queued work (``__cuda_array_interface__``
        v3) and for this plan's previous run when that ran on another stream."""
        calls = self._calls
        for producer in producer_streams:
            calls.event_record(self._sync_event, producer)
            calls.stream_wait_event(stream, self._sync_event)
        if self._last_stream is not None and stream != self._last_stream:
            calls.stream_wait_event(stream, self._events[self._last_slot])

    def _free_slot(self) -> int:
        """The next ring slot (round robin) that no queued run still uses, so that its
        staging and its device table may be rewritten."""
        slot = self._next
        self._next = (slot + 1) % self.ring_slots
        seq = self._slot_seq[slot]
        if seq <= self._done_seq:
            return slot
        query = self._calls.event_query
        if query(self._events[self._last_slot]):
            self._done_seq = self._seq  # launches of a plan complete in order
        elif query(self._events[slot]):
            self._done_seq = max(self._done_seq, seq)
        else:
            self._calls.event_synchronize(self._events[slot])
            self._done_seq = max(self._done_seq, seq)
        return slot

    def synchronize(self) -> None:
        """Wait until every run of this plan has completed."""
        with self._lock:
            if self._last_slot is not None and not self._closed:
                self._calls.event_synchronize(self._events[self._last_slot])
                self._done_seq = self._seq

    # lifetime ---------------------------------------------------------------------------

    def close(self) -> None:
        """Wait for queued runs, then free the plan's device, pinned and event resources."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._resources.last_slot = self._last_slot
            self._finalizer()

    def __enter__(self) -> GroupedGemmPlan:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        names = ", ".join(v.name for v in self.variants)
        return (
            f"GroupedGemmPlan({self.num_groups} groups on device {self.device}, "
            f"{len(self.launches)} launch(es) of {names})"
        )


def _packed_params(packer, inputs: dict[str, int], keep: list) -> int:
    """A parameter buffer packed for ``inputs`` and the ``kernelParams`` array of pointers
    into it; returns the array's address (both kept alive in ``keep``)."""
    size = len(packer.template)
    raw = (ctypes.c_char * (size + _PARAM_ALIGN))()
    base = round_up(ctypes.addressof(raw), _PARAM_ALIGN)
    buffer = (ctypes.c_char * size).from_address(base)
    buffer[:] = packer.template
    packer.pack_into(buffer, inputs)
    pointers = (ctypes.c_void_p * len(packer.offsets))(*[base + o for o in packer.offsets])
    keep.extend((raw, pointers))
    return ctypes.addressof(pointers)


class _Resources:
    """What a plan owns; released once, by close() or when the plan is collected."""

    def __init__(self):
        self.device = None
        self.device_ptr = 0
        self.host_ptr = 0
        self.events = []
        self.sync_event = None
        self.last_slot = None  # set by close(): the run to wait for
        self.keep = []  # parameter buffers and their pointer arrays

    def release(self) -> None:
        if self.device is not None:
            driver.activate(self.device)
        if self.last_slot is not None:
            driver.event_synchronize(self.events[self.last_slot])
        elif self.events:  # collected without close(): wait for whatever may be queued
            for event in self.events:
                driver.event_synchronize(event)
        for event in self.events + ([self.sync_event] if self.sync_event is not None else []):
            driver.event_destroy(event)
        self.events, self.sync_event = [], None
        if self.device_ptr:
            driver.mem_free(self.device_ptr)
            self.device_ptr = 0
        if self.host_ptr:
            driver.host_free(self.host_ptr)
            self.host_ptr = 0
        self.keep = []


# plan cache and the one-call API ----------------------------------------------------------

_PLAN_CACHE_SIZE = 64
_plans: OrderedDict = OrderedDict()
_plans_lock = threading.Lock()


def get_plan(problem_sizes, device: int = 0, *, artifacts=None) -> GroupedGemmPlan:
    """A cached plan for ``problem_sizes`` on ``device`` (the most recent 64 are kept)."""
    sizes = validation.problem_sizes(problem_sizes)
    key = (int(device), sizes, None if artifacts is None else str(artifacts))
    with _plans_lock:
        plan = _plans.get(key)
        if plan is not None and not plan._closed:
            _plans.move_to_end(key)
            return plan
        plan = GroupedGemmPlan(sizes, device, artifacts=artifacts)  # sizes checked above
        _plans[key] = plan
        while len(_plans) > _PLAN_CACHE_SIZE:
            _plans.popitem(last=False)  # freed once its last user drops it
        return plan


def clear_plan_cache() -> None:
    with _plans_lock:
        _plans.clear()


def grouped_gemm(a, b, c, sfa, sfb, problem_sizes=None, stream=None, device=None) -> None:
    """C_g = A_g @ B_g^T for every group g, on ``stream``, through a cached plan.

    Problem sizes are inferred from the shapes of A and B when not given; the device
    from the operands (DLPack, CuPy, PyTorch), else 0.
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
    plan = get_plan(problem_sizes, device)
    plan.run(*columns, stream=handle)
