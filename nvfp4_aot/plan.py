"""Plans: everything about a list of problem sizes that can be prepared once.

A :class:`GroupedGemmPlan` validates the problem sizes, picks and loads the kernel
variant(s), computes the CTA prefix, total tiles and persistent_blocks, and allocates —
once — one device buffer holding the problem sizes and CTA prefix (uploaded at
creation), the tensormap workspace and a ring of pointer-table slots, plus pinned host
staging for the slots. Every slot has its parameter buffers packed at creation, since
the addresses they hold never change.

Running writes the operand pointers into a free slot's staging, copies that slot to the
device with one ``cuMemcpyHtoDAsync`` on the caller's stream, launches (one
``cuLaunchKernelEx`` per sub-launch; more than the largest baked group count splits the
groups) and records the slot's event. Nothing is allocated and nothing waits on the
steady-state path; when a ring slot still holds the run's pointer table (the same
operands as one of the last ``ring_slots`` distinct sets), the run launches from that
slot and the staging and the copy are skipped too.

Host cost. A pointer set that passed validation is remembered with its packed slot table,
so a run with known int pointers is a dict lookup, one slice copy into pinned memory and
five driver calls through their C entry points (:class:`driver.DirectCalls`); the path
imports no numpy. Measured on H200 machines: 9.8-15.8 us per run with a table upload, the
same driver calls made from C taking 4.4-6.8 us on those hosts (``bench/host_path.py``,
``docs/H200_RESULTS.md``).

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
import struct
import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from math import prod

from . import driver, loader, selection, validation
from .errors import InvalidProblemError, Nvfp4Error
from .operands import (
    DeviceArray,
    check_matrix,
    check_scales,
    cuda_array_interface,
    device_array,
    device_of,
    stream_handle,
)
from .packing import launch_geometry

_ALIGN = 128
_AB_DTYPES = ("u1", "i1", "e2m1x2", "e2m1", "v1")
_SCALE_DTYPES = ("u1", "i1", "e4m3", "v1")
_FIELDS = ("a", "b", "c", "sfa", "sfb")
# __cuda_array_interface__ typestrs taken on the fast path, per field
_TYPESTRS = (
    ("|u1", "|i1", "|V1"),
    ("|u1", "|i1", "|V1"),
    ("<f2",),
    ("|u1", "|i1", "|V1"),
    ("|u1", "|i1", "|V1"),
)
# torch dtypes taken on the duck-typed tensor fast path, per field
_TORCH_DTYPES = (
    ("torch.uint8", "torch.int8", "torch.float4_e2m1fn_x2"),
    ("torch.uint8", "torch.int8", "torch.float4_e2m1fn_x2"),
    ("torch.float16",),
    ("torch.uint8", "torch.int8", "torch.float8_e4m3fn"),
    ("torch.uint8", "torch.int8", "torch.float8_e4m3fn"),
)
_ADDRESS_MASK = validation.POINTER_ALIGN - 1
_ADDRESS_END = 1 << 63  # int64 pointer tables
_VALIDATED_SETS = 64  # pointer sets remembered as valid per plan


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


@dataclass(frozen=True)
class SubLaunch:
    """One kernel launch of a plan: groups ``[start, stop)`` on a variant of G groups."""

    start: int
    stop: int
    num_groups: int  # the variant's baked group count (>= stop - start)
    tiles: tuple[int, ...]  # per real group
    cta_prefix: tuple[int, ...]  # G + 1 entries, padded with the total
    total_tiles: int
    persistent_blocks: int
    grid: tuple[int, int, int]
    # byte offsets in the plan's device buffer / in a ring slot
    sizes_offset: int
    prefix_offset: int
    abc_offset: int
    scales_offset: int


def cta_prefix(tiles: list[int], num_groups: int) -> tuple[int, ...]:
    """Prefix sum of tiles per group, padded to ``num_groups + 1`` entries with the total."""
    prefix = [0]
    for count in tiles:
        prefix.append(prefix[-1] + count)
    prefix.extend([prefix[-1]] * (num_groups + 1 - len(prefix)))
    return tuple(prefix)


def persistent_blocks(total_tiles: int, sm_count: int) -> int:
    """One CTA per SM at most, never more CTAs than tiles, at least one."""
    return max(1, min(total_tiles, sm_count))


def split_groups(num_groups: int, baked: list[int]) -> list[tuple[int, int, int]]:
    """Chunks ``(start, stop, variant groups)`` covering ``num_groups`` groups.

    Full chunks use the largest baked variant; the rest the smallest that holds it.
    """
    baked = sorted(baked)
    largest = baked[-1]
    chunks, start = [], 0
    while start < num_groups:
        count = min(largest, num_groups - start)
        fit = next(g for g in baked if g >= count)
        chunks.append((start, start + count, fit))
        start += count
    return chunks


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
        self.ring_slots = ring_slots
        manifest = loader.load_manifest(artifacts)
        capability = loader.device_capability(self.device)
        found = loader.variants_for(manifest, capability, self.device)
        self.sm_count = driver.sm_count(self.device)
        #: the kernel family this plan runs
        self.family = selection.choose_family(found, self.problem_sizes, kernel)
        variants = {v.num_groups: v for v in found if v.family == self.family}
        self._lock = threading.Lock()

        # Layout of the device buffer: [sizes, prefix per sub-launch][workspace][ring].
        launches, kernels, offset, slot_bytes, workspace_bytes = [], [], 0, 0, 0
        for start, stop, g in split_groups(len(self.problem_sizes), list(variants)):
            variant = variants[g]
            tile_m, tile_n, _tile_k = variant.tile_mnk
            tiles = [
                validation.tiles(m, n, tile_m, tile_n)
                for m, n, _k, _l in self.problem_sizes[start:stop]
            ]
            prefix = cta_prefix(tiles, g)
            validation.check_total_tiles(prefix[-1])
            blocks = persistent_blocks(prefix[-1], self.sm_count)
            sizes_offset = offset
            prefix_offset = _round_up(sizes_offset + g * 16, _ALIGN)
            offset = _round_up(prefix_offset + (g + 1) * 4, _ALIGN)
            abc_offset = slot_bytes
            scales_offset = _round_up(abc_offset + g * 24, _ALIGN)
            slot_bytes = _round_up(scales_offset + g * 16, _ALIGN)
            inputs = {"persistent_blocks": blocks, "total_tiles": prefix[-1]}
            grid = launch_geometry(variant, _with_null_pointers(inputs)).grid
            launches.append(
                SubLaunch(start, stop, g, tuple(tiles), prefix, prefix[-1], blocks, grid,
                          sizes_offset, prefix_offset, abc_offset, scales_offset)
            )  # fmt: skip
            kernels.append(loader.load_kernel(variant, self.device, artifacts))
            # sub-launches run one after another and share the workspace
            workspace_bytes = max(
                workspace_bytes,
                variant.workspace.bytes_for(self.problem_sizes[start:stop], blocks),
            )
        self.launches = tuple(launches)
        self._kernels = tuple(kernels)
        self.workspace_bytes = _round_up(workspace_bytes, _ALIGN)
        self._zero_workspace = any(k.variant.workspace.zero_once for k in kernels)
        self._workspace_offset = offset
        # CUDA graphs get a slot and a workspace of their own, so that replays never
        # share a workspace with eager runs of the plan (see capture in launch_pointers).
        self._graph_workspace_offset = _round_up(offset + self.workspace_bytes, _ALIGN)
        self._ring_offset = _round_up(self._graph_workspace_offset + self.workspace_bytes, _ALIGN)
        self._slot_bytes = slot_bytes
        self.graph_slot = ring_slots
        self.device_bytes = self._ring_offset + (ring_slots + 1) * slot_bytes

        driver.activate(self.device)
        self._resources = _Resources()
        self._finalizer = weakref.finalize(self, self._resources.release)
        self._finalizer.atexit = False  # at exit the process frees everything anyway
        try:
            self._allocate()
        except BaseException:
            self._finalizer()
            raise
        self._closed = False

    # setup ------------------------------------------------------------------------------

    def _allocate(self) -> None:
        res = self._resources
        res.device_ptr = driver.mem_alloc(self.device_bytes)
        slots = self.ring_slots + 1  # the ring and the graph slot
        res.host_ptr = driver.host_alloc(slots * self._slot_bytes)
        ctypes.memset(res.host_ptr, 0, slots * self._slot_bytes)
        self._staging_addresses = tuple(
            res.host_ptr + slot * self._slot_bytes for slot in range(slots)
        )
        # a writable view of each slot's pinned staging: a whole table is one slice copy
        self._staging = tuple(
            memoryview((ctypes.c_char * self._slot_bytes).from_address(address)).cast("B")
            for address in self._staging_addresses
        )
        # flat pointer index (field * G + group) -> int64 word of a ring slot; the words
        # of padding groups stay zero
        count = len(self.problem_sizes)
        scatter = [0] * (5 * count)
        for launch in self.launches:
            for local, g in enumerate(range(launch.start, launch.stop)):
                for f in range(3):
                    scatter[f * count + g] = launch.abc_offset // 8 + 3 * local + f
                for f in range(2):
                    scatter[(3 + f) * count + g] = launch.scales_offset // 8 + 2 * local + f
        self._scatter = tuple(scatter)
        self._table_format = struct.Struct(f"<{self._slot_bytes // 8}Q")

        static = bytearray(self._workspace_offset)
        for launch in self.launches:
            padded = list(self.problem_sizes[launch.start : launch.stop])
            padded += [(0, 0, 0, 0)] * (launch.num_groups - len(padded))
            struct.pack_into(
                f"<{4 * launch.num_groups}i", static, launch.sizes_offset,
                *(v for row in padded for v in row),
            )  # fmt: skip
            struct.pack_into(
                f"<{len(launch.cta_prefix)}i", static, launch.prefix_offset, *launch.cta_prefix
            )
        buffer = (ctypes.c_char * len(static)).from_buffer(static)
        driver.memcpy_htod(res.device_ptr, ctypes.addressof(buffer), len(static))
        if self._zero_workspace:
            # both workspaces (eager and graph), done before any stream can launch
            end = self._graph_workspace_offset + self.workspace_bytes
            driver.memset_d8(res.device_ptr + self._workspace_offset, 0, end - self._workspace_offset)
            driver.synchronize()
        for slot in range(slots):  # padding rows of the tables stay zero
            driver.memcpy_htod(
                self._slot_address(slot), self._staging_addresses[slot], self._slot_bytes
            )

        # parameters: one packed buffer per (slot, sub-launch), addresses fixed for life
        self._params = []  # [slot][launch] -> kernelParams address
        res.keep = []
        for slot in range(slots):
            per_launch = []
            for launch, kernel in zip(self.launches, self._kernels):
                inputs = self._inputs(launch, slot)
                size = kernel.variant.param_bytes
                raw = (ctypes.c_char * (size + 64))()
                base = _round_up(ctypes.addressof(raw), 64)
                buffer = (ctypes.c_char * size).from_address(base)
                buffer[:] = kernel.packer.template
                kernel.packer.pack_into(buffer, inputs)
                pointers = (ctypes.c_void_p * len(kernel.packer.offsets))(
                    *[base + o for o in kernel.packer.offsets]
                )
                res.keep.extend((raw, pointers))
                per_launch.append(ctypes.addressof(pointers))
            self._params.append(tuple(per_launch))
        res.events = [driver.event_create() for _ in range(self.ring_slots)]
        res.sync_event = driver.event_create()
        res.device = self.device
        self._events = res.events

        # the per-run driver calls (direct entry points on a real driver)
        calls = self._calls = driver.run_calls()
        self._launch_specs = tuple(
            calls.launch_spec(
                k.function,
                launch.grid,
                k.variant.block,
                k.variant.dynamic_smem_bytes,
                [(a.id, a.values) for a in k.variant.launch_attributes],
            )
            for launch, k in zip(self.launches, self._kernels)
        )
        self._context = calls.handle(driver.current_context(self.device))
        self._event_handles = tuple(calls.handle(e) for e in res.events)

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
        # pointer sets that passed validation (flat tuple -> packed slot table), newest last
        self._validated: OrderedDict = OrderedDict()
        # per field: expected (rows, cols) shape for A, B, C; minimum bytes for SFA, SFB
        bytes_of = [validation.operand_bytes(m, n, k) for m, n, k, _l in self.problem_sizes]
        self._expected = (
            [(m, k // 2) for m, _n, k, _l in self.problem_sizes],
            [(n, k // 2) for _m, n, k, _l in self.problem_sizes],
            [(m, n) for m, n, _k, _l in self.problem_sizes],
            [b["sfa"] for b in bytes_of],
            [b["sfb"] for b in bytes_of],
        )
        # bytes the kernel touches per operand, field-major like the flat pointer list
        self._operand_sizes = tuple(b[f] for f in _FIELDS for b in bytes_of)

    def _slot_address(self, slot: int) -> int:
        return self._resources.device_ptr + self._ring_offset + slot * self._slot_bytes

    def _inputs(self, launch: SubLaunch, slot: int) -> dict[str, int]:
        base = self._resources.device_ptr
        slot_base = self._slot_address(slot)
        return {
            "problem_sizes": base + launch.sizes_offset,
            "abc_pointers": slot_base + launch.abc_offset,
            "scale_pointers": slot_base + launch.scales_offset,
            "cta_prefix": base + launch.prefix_offset,
            "tensormap_workspace": base
            + (self._graph_workspace_offset if slot == self.graph_slot else self._workspace_offset),
            "total_tiles": launch.total_tiles,
            "persistent_blocks": launch.persistent_blocks,
        }

    def kernel_inputs(self, slot: int = 0) -> list[dict[str, int]]:
        """The kernel inputs of every sub-launch for ring slot ``slot`` (for inspection)."""
        return [self._inputs(launch, slot) for launch in self.launches]

    @property
    def num_groups(self) -> int:
        return len(self.problem_sizes)

    @property
    def variants(self):
        return tuple(k.variant for k in self._kernels)

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
        count = len(self.problem_sizes)
        try:
            table = self._validated.get((*a, *b, *c, *sfa, *sfb))
            if table is not None and not len(a) == len(b) == len(c) == len(sfa) == count:
                table = None
        except TypeError:  # not sequences, or unhashable operands: described below
            table = None
        if table is None:
            table, producers = self._table(a, b, c, sfa, sfb, handle)
            self._launch(table, handle, producers)
        else:
            self._launch(table, handle, ())

    def pointers(self, a, b, c, sfa, sfb, stream: int = 0) -> tuple[list[int], set[int]]:
        """Validate operands; returns the flat (A, B, C, SFA, SFB) x group pointer list
        and the producer streams (``__cuda_array_interface__`` v3) to order after.

        Raw pointers and plain C-contiguous ``__cuda_array_interface__`` arrays of the
        expected shape take a fast path; anything else is described in full
        (:mod:`nvfp4_aot.operands`), which either accepts it or says what is wrong.
        """
        flat, producers = self._flat_pointers(a, b, c, sfa, sfb, stream)
        self._packed(flat)
        return flat, producers

    def _table(self, a, b, c, sfa, sfb, stream: int) -> tuple[bytes, set[int]]:
        flat, producers = self._flat_pointers(a, b, c, sfa, sfb, stream)
        return self._packed(flat), producers

    def _flat_pointers(self, a, b, c, sfa, sfb, stream: int) -> tuple[list[int], set[int]]:
        count = len(self.problem_sizes)
        columns = (a, b, c, sfa, sfb)
        for f, column in enumerate(columns):
            try:
                length = len(column)
            except TypeError:
                raise InvalidProblemError(
                    f"{_FIELDS[f]} must be a sequence with one operand per group, got "
                    f"{type(column).__name__}"
                ) from None
            if length != count:
                raise InvalidProblemError(
                    f"{_FIELDS[f]} has {length} operands, the plan has {count} groups"
                )
        producers: set[int] = set()
        flat = [*a, *b, *c, *sfa, *sfb]
        if not all(type(x) is int for x in flat):  # arrays (or junk): describe each one
            launch_stream = 1 if stream == 0 else stream
            flat = [
                x if type(x) is int else self._pointer_of(f, g, x, stream, launch_stream, producers)
                for f, column in enumerate(columns)
                for g, x in enumerate(column)
            ]
        return flat, producers

    def _packed(self, flat) -> bytes:
        """The slot table for validated pointers ``flat``; a set checked before (buffers
        are usually reused) is not rechecked."""
        key = tuple(flat)
        table = self._validated.get(key)
        if table is not None:
            self._validated.move_to_end(key)
            return table
        count = len(self.problem_sizes)
        if len(key) != 5 * count or not all(type(x) is int for x in key):
            raise InvalidProblemError(
                f"expected {5 * count} int pointers (a, b, c, sfa, sfb of {count} groups), "
                f"got {len(key)} values"
            )
        if _misaligned(key):
            i = next(i for i, x in enumerate(key) if x & _ADDRESS_MASK or not 0 < x < _ADDRESS_END)
            validation.check_pointer(i % count, _FIELDS[i // count], key[i])
        validation.check_outputs_disjoint(key, self._operand_sizes, count)
        words = [0] * (self._slot_bytes // 8)
        for i, word in enumerate(self._scatter):
            words[word] = key[i]
        table = self._table_format.pack(*words)
        self._validated[key] = table
        if len(self._validated) > _VALIDATED_SETS:
            self._validated.popitem(last=False)
        return table

    def _pointer_of(self, f: int, g: int, obj, stream: int, launch_stream: int, producers) -> int:
        if getattr(obj, "is_cuda", False) and hasattr(obj, "data_ptr"):
            # PyTorch tensors, duck-typed (the runtime never imports torch): their
            # __cuda_array_interface__ costs ~10 us a tensor, these attributes ~1 us.
            expected = self._expected[f][g]
            if (
                str(obj.dtype) in _TORCH_DTYPES[f]
                and obj.device.index == self.device
                and obj.is_contiguous()
                and (
                    tuple(obj.shape) == expected
                    if f < 3
                    else obj.numel() * obj.element_size() >= expected
                )
            ):
                return obj.data_ptr()
        interface = cuda_array_interface(obj)
        if type(interface) is dict:
            expected = self._expected[f][g]
            shape = interface.get("shape")
            if (
                interface.get("typestr") in _TYPESTRS[f]
                and type(interface.get("data")) is tuple
                and interface.get("strides") is None
                and interface.get("mask") is None
                and (shape == expected if f < 3 else prod(shape) >= expected)
                and (f != 2 or not interface["data"][1])
                and device_of(obj) in (None, self.device)
            ):
                producer = interface.get("stream")
                if producer is not None and producer != launch_stream:
                    producers.add(producer)
                return interface["data"][0]
        array = _describe(g, _FIELDS[f], obj, stream)
        m, n, k, _l = self.problem_sizes[g]
        self._check_array(g, _FIELDS[f], array, m, n, k)
        if array.stream is not None and array.stream != launch_stream:
            producers.add(array.stream)
        return array.pointer

    def _check_array(self, g: int, field: str, array: DeviceArray, m: int, n: int, k: int) -> None:
        if array.device is not None and array.device != self.device:
            raise InvalidProblemError(
                f"group {g}: {field} is on device {array.device}, the plan runs on device "
                f"{self.device}; create the plan with device={array.device} or move the data"
            )
        if field == "a":
            problem = check_matrix(array, _AB_DTYPES, m, k // 2)
        elif field == "b":
            problem = check_matrix(array, _AB_DTYPES, n, k // 2)
        elif field == "c":
            problem = check_matrix(array, ("f2",), m, 2 * n, writable=True)
        elif field == "sfa":
            problem = check_scales(array, _SCALE_DTYPES, validation.operand_bytes(m, n, k)["sfa"])
        else:
            problem = check_scales(array, _SCALE_DTYPES, validation.operand_bytes(m, n, k)["sfb"])
        if problem:
            raise InvalidProblemError(f"group {g}: {field} {problem}")

    def launch_pointers(self, pointers, stream: int = 0, producer_streams=()) -> None:
        """Launch with a flat pointer list as :meth:`pointers` returns it (validated here
        too, unless the same set was validated before)."""
        self._launch(self._packed(pointers), stream, producer_streams)

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
                calls.event_record(self._event_handles[slot], stream)
                self._seq += 1
                self._slot_seq[slot] = self._seq
                self._last_slot = slot
                self._last_stream = stream

    def _stage(self, slot: int, table: bytes, stream: int) -> None:
        """Write ``table`` into the slot's pinned staging and copy it to the device on
        ``stream``. (Letting the kernels read mapped pinned memory instead saves the
        copy but costs 4-9 us of GPU time per run on an H200: docs/H200_RESULTS.md.)"""
        self._staging[slot][:] = table
        self._calls.memcpy_htod_async(
            self._slot_address(slot), self._staging_addresses[slot], self._slot_bytes, stream
        )
        if slot < self.ring_slots:  # a ring slot (not the graph slot) now holds this table
            self._table_slot.pop(self._slot_table[slot], None)
            self._slot_table[slot] = table
            self._table_slot[table] = slot

    def _order_after(self, producer_streams, stream: int) -> None:
        """Make ``stream`` wait for the producers' queued work (``__cuda_array_interface__``
        v3) and for this plan's previous run when that ran on another stream."""
        res = self._resources
        for producer in producer_streams:
            driver.event_record(res.sync_event, producer)
            driver.stream_wait_event(stream, res.sync_event)
        if self._last_stream is not None and stream != self._last_stream:
            driver.stream_wait_event(stream, self._events[self._last_slot])

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

    def set_graph_pointers(self, a, b, c, sfa, sfb) -> None:
        """Point the next replay of a CUDA graph that captured :meth:`run` at new operands.

        Validates like :meth:`run` and rewrites the graph slot's pinned staging, which the
        graph's copy node reads when it replays. Call it only while no replay of the graph
        is pending (e.g. after synchronising the stream it was launched on): a replay in
        flight may otherwise read half-written tables.
        """
        table, _producers = self._table(a, b, c, sfa, sfb, 0)
        with self._lock:
            if self._closed:
                raise Nvfp4Error("the plan is closed")
            self._staging[self.graph_slot][:] = table

    def _free_slot(self) -> int:
        """The next ring slot (round robin) that no queued run still uses, so that its
        staging and its device table may be rewritten."""
        slot = self._next
        self._next = (slot + 1) % self.ring_slots
        seq = self._slot_seq[slot]
        if seq <= self._done_seq:
            return slot
        query = self._calls.event_query
        if query(self._event_handles[self._last_slot]):
            self._done_seq = self._seq  # launches of a plan complete in order
        elif query(self._event_handles[slot]):
            self._done_seq = max(self._done_seq, seq)
        else:
            driver.event_synchronize(self._events[slot])
            self._done_seq = max(self._done_seq, seq)
        return slot

    def synchronize(self) -> None:
        """Wait until every run of this plan has completed."""
        with self._lock:
            if self._last_slot is not None and not self._closed:
                driver.event_synchronize(self._events[self._last_slot])
                self._done_seq = self._seq

    # lifetime ---------------------------------------------------------------------------

    def close(self) -> None:
        """Wait for queued runs, then free the plan's device, pinned and event resources."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._last_slot is not None:
                self._resources.last_event = self._events[self._last_slot]
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


class _Resources:
    """What a plan owns; released once, by close() or when the plan is collected."""

    def __init__(self):
        self.device = None
        self.device_ptr = 0
        self.host_ptr = 0
        self.events = []
        self.sync_event = None
        self.last_event = None
        self.keep = []

    def release(self) -> None:
        if self.device is not None:
            driver.activate(self.device)
        if self.last_event is not None:
            driver.event_synchronize(self.last_event)
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


def _misaligned(pointers: list[int]) -> bool:
    """Any pointer null, negative, past 2**63 or not 32-byte aligned (a plain loop: the hot
    path; a numpy round trip costs more below a few hundred pointers)."""
    for x in pointers:
        if x & _ADDRESS_MASK or not 0 < x < _ADDRESS_END:
            return True
    return False


def _with_null_pointers(inputs: dict[str, int]) -> dict[str, int]:
    return {
        "problem_sizes": 0, "abc_pointers": 0, "scale_pointers": 0, "cta_prefix": 0,
        "tensormap_workspace": 0, **inputs,
    }  # fmt: skip


def _describe(g: int, field: str, obj, stream: int) -> DeviceArray:
    try:
        return device_array(obj, stream)
    except (TypeError, ValueError) as exc:
        raise InvalidProblemError(f"group {g}: {field}: {exc}") from exc


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
        plan = GroupedGemmPlan(sizes, device, artifacts=artifacts)
        _plans[key] = plan
        while len(_plans) > _PLAN_CACHE_SIZE:
            _plans.popitem(last=False)  # freed once its last user drops it
        return plan


def clear_plan_cache() -> None:
    with _plans_lock:
        _plans.clear()


def infer_problem_sizes(a, b) -> list[tuple[int, int, int, int]]:
    """(m, n, k, 1) per group from the shapes of A (m, k/2) and B (n, k/2)."""
    sizes = []
    for g, (a_g, b_g) in enumerate(zip(a, b, strict=True)):
        shapes = []
        for field, operand in (("a", a_g), ("b", b_g)):
            if operand.shape is None:
                raise InvalidProblemError(
                    f"group {g}: {field} is a raw pointer, so problem_sizes must be given"
                )
            if len(operand.shape) < 2:
                raise InvalidProblemError(
                    f"group {g}: {field} must be 2-D (rows, k/2), got shape {operand.shape}"
                )
            k = operand.shape[1] * (2 if operand.dtype != "e2m1" else 1)
            shapes.append((operand.shape[0], k))
        (m, k_a), (n, k_b) = shapes
        if k_a != k_b:
            raise InvalidProblemError(f"group {g}: a implies k = {k_a}, b implies k = {k_b}")
        sizes.append((m, n, k_a, 1))
    return sizes


def grouped_gemm(a, b, c, sfa, sfb, problem_sizes=None, stream=None, device=None) -> None:
    """C_g = A_g @ B_g^T for every group g, on ``stream``, through a cached plan.

    Problem sizes are inferred from the shapes of A and B when not given; the device
    from the operands (DLPack, CuPy, PyTorch), else 0.
    """
    handle = stream_handle(stream)
    columns = []
    for field, column in zip(_FIELDS, (a, b, c, sfa, sfb)):
        columns.append([_describe(g, field, obj, handle) for g, obj in enumerate(column)])
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
