"""The resources, ring of table slots and launches of one plan, for any launch layout.

A :class:`Launcher` owns one device buffer laid out by a launch layout (static tables
uploaded at creation, workspaces zeroed where a kernel needs it, table slots), pinned
staging per slot, kernel parameters packed once per (slot, launch) since the addresses
they hold never change, and one event per ring slot. :meth:`Launcher.launch` stages a
slot table, copies it to the device with one ``cuMemcpyHtoDAsync`` on the caller's
stream, makes the layout's launches and records the slot's event. Nothing is allocated
and nothing waits on the steady-state path; when a ring slot still holds the table
(the same operands as one of the last ``ring_slots`` distinct sets), the launch goes
from that slot and the staging and the copy are skipped too.

Concurrency. Kernels write their workspace, so two launches of one plan must never
overlap on the GPU. The launcher therefore orders its own launches: when a run uses a
different stream than the previous one, the new stream first waits for the previous
run's event. Runs of one plan on several streams are thus serialised, while different
plans (each with its own buffer) run concurrently. Host threads may share a launcher; a
lock guards the ring.

Ring slots. A slot's staging may be rewritten only after the copy that read it has run.
Since a plan's launches complete in order, knowing that run ``s`` completed proves every
earlier run did: the launcher remembers the newest run known to be complete and queries
an event only when a slot is not yet known to be free, waiting on it only when every
slot is in flight.

Several launches per run (a MoE plan's routing setup and GEMM chunks, or groups split
over several sub-launches) are recorded at creation, per ring slot, into one CUDA graph
with the slot's copy, so that an eager run costs one ``cuGraphLaunch`` whatever the
number of launches.

CUDA graphs. A run inside stream capture takes a capture slot of its own (and, through
the layout's kernel inputs, the graphs' workspace and tables), so replays never share
them with eager runs, and two captured runs of one plan (two layers of one shape in one
graph, say) keep their own operands. The slot's table is copied to the device at capture
time, on a private stream outside the capture, so the graph holds only the launches (a
copy node from pinned memory cost microseconds per replay); :meth:`Launcher.stage_graph`
rewrites it between replays the same way. Captured
runs of one plan share the graphs' workspace, so like eager runs they must run one after
another (one stream, or ordered by events). When every capture slot is taken, a further
capture is refused with an error until :meth:`Launcher.release_capture_slots`.

The layout protocol: ``ring_slots``, ``capture_slots``, ``slots`` (ring + capture),
``graph_slot`` (the first capture slot),
``slot_bytes``, ``device_bytes``, ``slot_offset(slot)``, ``static_tables(base)`` (the
bytes at offset 0 of the buffer at ``base``), ``zero_once()`` (``(offset, bytes)`` regions zeroed before any launch),
``launches`` (each with a ``grid``) and ``kernel_inputs(launch, base, slot)``.
"""

from __future__ import annotations

import ctypes
import threading
import weakref
from collections import OrderedDict

from . import driver
from .errors import Nvfp4Error
from .intmath import round_up

_PARAM_ALIGN = 64  # kernel parameter buffers start at cache-line boundaries


class LaunchedPlan:
    """What every plan kind does with its :class:`Launcher` (``self._launcher``): wait for
    its runs, free capture slots, close, and serve as a context manager."""

    _launcher: Launcher

    def _launch_operands(self, operands: tuple, stream: int) -> None:
        """Launch a whole-array plan's run (MoE, quantizer): a set of operands seen before
        goes straight to its checked table; anything else is described and checked by the
        plan's ``_pointers`` first (``self._tables``: a :class:`CheckedTables`). The
        operands are looked up as they are only when the first is an int: tensors would
        always miss (the tables are keyed by pointers), after hashing each of them
        (``torch.Tensor.__hash__`` is Python code)."""
        table = None
        if type(operands[0]) is int:
            try:
                table = self._tables.get(operands)
            except TypeError:  # unhashable operands (arrays): described below
                pass
        if table is None:
            pointers, producers = self._pointers(operands, stream)
            self._launcher.launch(self._tables.table(pointers), stream, producers)
        else:
            self._launcher.launch(table, stream)

    def synchronize(self) -> None:
        """Wait until every run of this plan has completed."""
        self._launcher.synchronize()

    def release_graph_slots(self) -> None:
        """Free the capture slots of runs recorded into CUDA graphs; only once no graph
        holding such a run will be launched again."""
        self._launcher.release_capture_slots()

    @property
    def closed(self) -> bool:
        return self._launcher.closed

    def close(self) -> None:
        """Wait for queued runs, then free the plan's device, pinned and event resources."""
        self._launcher.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Launcher:
    """Launches ``kernels[i]`` for ``layout.launches[i]`` on ``device``, from table slots."""

    def __init__(self, device: int, layout, kernels):
        self.device = device
        self.layout = layout
        self._kernels = tuple(kernels)
        self._lock = threading.Lock()
        driver.activate(device)
        self._resources = _Resources()
        self._finalizer = weakref.finalize(self, self._resources.release)
        self._finalizer.atexit = False  # at exit the process frees everything anyway
        try:
            self._allocate()
        except BaseException:
            self._finalizer()
            raise
        self._prepare_launches()
        try:
            self._record_slot_graphs()
        except BaseException:
            self._finalizer()
            raise
        self.ring_slots = layout.ring_slots
        self.graph_slot = layout.graph_slot
        self._captures = 0  # capture slots taken
        self._last_capture = layout.graph_slot  # the slot stage_graph rewrites
        # which run last used each slot, the newest run known complete
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
        self.closed = False

    # setup ------------------------------------------------------------------------------

    def _allocate(self) -> None:
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
        static = layout.static_tables(res.device_ptr)
        if static:
            image = (ctypes.c_char * len(static)).from_buffer(static)
            driver.memcpy_htod(res.device_ptr, ctypes.addressof(image), len(static))
        zero = layout.zero_once()
        for offset, size in zero:
            driver.memset_d8(res.device_ptr + offset, 0, size)
        if zero:
            driver.synchronize()  # before any stream can launch
        for slot in range(layout.slots):  # words a table leaves out stay zero
            driver.memcpy_htod(
                self.slot_address(slot), self._staging_addresses[slot], layout.slot_bytes
            )
        res.events = [driver.event_create() for _ in range(layout.ring_slots)]
        res.sync_event = driver.event_create()

    def _prepare_launches(self) -> None:
        """Parameters per (slot, launch), the prepared launches, and every handle in the
        form the per-run calls take (:func:`driver.run_calls`)."""
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

    def _record_slot_graphs(self) -> None:
        """With more than one launch per run: per ring slot, its copy and launches as one
        CUDA graph (captured on a private stream, this thread only)."""
        self._slot_graphs = None
        if len(self.layout.launches) < 2:
            return
        res, calls = self._resources, self._calls
        stream = driver.stream_create()
        try:
            for slot in range(self.layout.ring_slots):
                driver.capture_begin(stream)
                try:
                    calls.memcpy_htod_async(
                        self.slot_address(slot), self._staging_addresses[slot],
                        self.layout.slot_bytes, stream,
                    )  # fmt: skip
                    for spec, params in zip(self._launch_specs, self._params[slot]):
                        calls.launch(spec, stream, params)
                finally:
                    res.graphs.append(driver.capture_end(stream))
                res.graph_execs.append(driver.graph_instantiate(res.graphs[-1]))
        finally:
            driver.stream_destroy(stream)
        self._slot_graphs = tuple(calls.handle(g) for g in res.graph_execs)

    @property
    def base(self) -> int:
        """Device address of the launcher's buffer (the layout's offsets are from here)."""
        return self._resources.device_ptr

    def slot_address(self, slot: int) -> int:
        return self._resources.device_ptr + self.layout.slot_offset(slot)

    def kernel_inputs(self, slot: int = 0) -> list[dict[str, int]]:
        """The kernel inputs of every launch for ``slot`` (for inspection)."""
        return [
            self.layout.kernel_inputs(launch, self.base, slot) for launch in self.layout.launches
        ]

    # running ----------------------------------------------------------------------------

    def launch(self, table: bytes, stream: int, producer_streams=()) -> None:
        """Stage ``table`` in a free ring slot (unless a slot still holds it), copy it to
        the device, launch, and record the slot's event; all on ``stream``."""
        calls = self._calls
        with self._lock:
            if self.closed:
                raise Nvfp4Error("the plan is closed")
            if calls.stream_is_capturing(stream):
                self._launch_captured(table, stream)
                return
            calls.set_context(self._context)
            if producer_streams or stream != self._last_stream:
                self._order_after(producer_streams, stream)
            slot = self._table_slot.get(table)
            graphs = self._slot_graphs
            if slot is None:
                slot = self._free_slot()
                self._stage(slot, table, stream, copy=graphs is None)
            try:
                if graphs is not None:  # the slot's copy and launches, recorded at creation
                    calls.graph_launch(graphs[slot], stream)
                else:
                    for spec, params in zip(self._launch_specs, self._params[slot]):
                        calls.launch(spec, stream, params)
            finally:  # after a failed launch too: the slot's copy may be queued
                calls.event_record(self._events[slot], stream)
                self._seq += 1
                self._slot_seq[slot] = self._seq
                self._last_slot = slot
                self._last_stream = stream

    def stage_graph(self, table: bytes) -> None:
        """Rewrite the table of the most recently captured run on the device, which its
        launches read at each replay (call it while no replay is pending)."""
        with self._lock:
            if self.closed:
                raise Nvfp4Error("the plan is closed")
            self._write_capture_slot(self._last_capture, table)

    def release_capture_slots(self) -> None:
        """Make every capture slot free again: call it only once no graph holding a
        captured run of this plan will be launched again (destroyed, or re-captured)."""
        with self._lock:
            self._captures = 0

    def _launch_captured(self, table: bytes, stream: int) -> None:
        """A run recorded into a CUDA graph: a capture slot of its own, no ring events."""
        taken = self._captures
        if taken == self.layout.capture_slots:
            raise Nvfp4Error(
                f"this plan has been captured into CUDA graphs {taken} times, each run keeping "
                "its operands in a capture slot of its own; once the graphs holding those "
                "runs are destroyed call release_graph_slots(), or make the plan with "
                f"capture_slots > {taken}"
            )
        calls = self._calls
        calls.set_context(self._context)  # as eager runs: the plan's device current
        slot = self.graph_slot + taken
        self._captures = taken + 1
        self._last_capture = slot
        self._write_capture_slot(slot, table)
        for spec, params in zip(self._launch_specs, self._params[slot]):
            calls.launch(spec, stream, params)

    def _write_capture_slot(self, slot: int, table: bytes) -> None:
        """Put a capture slot's table on the device now, outside any capture: on a private
        non-blocking stream that no capture involves, then wait for that stream alone
        (in relaxed capture mode: a global-mode capture, torch's default, forbids the wait)."""
        res = self._resources
        self._staging[slot][:] = table
        with driver.relaxed_capture_mode():
            if res.side_stream is None:
                res.side_stream = driver.stream_create()
            driver.memcpy_htod_async(
                self.slot_address(slot), self._staging_addresses[slot],
                self.layout.slot_bytes, res.side_stream,
            )  # fmt: skip
            driver.stream_synchronize(res.side_stream)

    def _stage(self, slot: int, table: bytes, stream: int, copy: bool = True) -> None:
        """Write ``table`` into the slot's pinned staging and (unless the slot's graph
        does) copy it to the device on ``stream``. (Letting the kernels read mapped
        pinned memory instead saves the copy but costs GPU time per run:
        docs/H200_RESULTS.md.)"""
        self._staging[slot][:] = table
        if copy:
            self._calls.memcpy_htod_async(
                self.slot_address(slot), self._staging_addresses[slot],
                self.layout.slot_bytes, stream,
            )  # fmt: skip
        if slot < self.ring_slots:  # a ring slot (not a capture slot) now holds this table
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
        """Wait until every launch so far has completed."""
        with self._lock:
            if self._last_slot is not None and not self.closed:
                self._calls.event_synchronize(self._events[self._last_slot])
                self._done_seq = self._seq

    # lifetime ---------------------------------------------------------------------------

    def close(self) -> None:
        """Wait for queued launches, then free the device, pinned and event resources."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            self._resources.last_slot = self._last_slot
            self._finalizer()


class CheckedTables:
    """Slot tables of the operand sets seen so far, the newest ``size`` kept: a set is
    checked (``check(key)``) and packed (``pack(key)``) on first sight only, since
    callers usually reuse their buffers."""

    def __init__(self, check, pack, size: int = 64):
        self._check, self._pack, self._size = check, pack, size
        self._tables: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key) -> bytes | None:
        """The table of a set seen before, else None (TypeError for unhashable keys)."""
        return self._tables.get(key)

    def table(self, key: tuple) -> bytes:
        """The table of ``key``, checked and packed when new."""
        table = self._tables.get(key)
        if table is not None:
            self._tables.move_to_end(key)
            return table
        self._check(key)
        table = self._pack(key)
        with self._lock:
            self._tables[key] = table
            if len(self._tables) > self._size:
                self._tables.popitem(last=False)
        return table


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
    """What a launcher owns; released once, by close() or when it is collected."""

    def __init__(self):
        self.device = None
        self.device_ptr = 0
        self.host_ptr = 0
        self.events = []
        self.sync_event = None
        self.last_slot = None  # set by close(): the run to wait for
        self.keep = []  # parameter buffers and their pointer arrays
        self.graphs = []  # per ring slot, when runs launch through graphs
        self.graph_execs = []
        self.side_stream = None  # writes capture slots' tables (made at the first capture)

    def release(self) -> None:
        if self.device is not None:
            driver.activate(self.device)
        if self.last_slot is not None:
            driver.event_synchronize(self.events[self.last_slot])
        elif self.events:  # collected without close(): wait for whatever may be queued
            for event in self.events:
                driver.event_synchronize(event)
        for executable in self.graph_execs:
            driver.graph_exec_destroy(executable)
        for graph in self.graphs:
            driver.graph_destroy(graph)
        self.graphs, self.graph_execs = [], []
        if self.side_stream is not None:
            driver.stream_destroy(self.side_stream)
            self.side_stream = None
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
