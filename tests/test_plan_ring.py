"""The plan's ring of pointer-table slots, streams and graph capture
(nvfp4_aot.plan) against the fake driver: which driver calls a steady-state run makes,
when a slot is reused or waited for, stream ordering, the graph slot."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from cuda.bindings import driver as real

from nvfp4_aot import plan
from nvfp4_aot.errors import InvalidProblemError, Nvfp4Error
from support import (
    address_of,
    operands_for,
)


def test_steady_state_calls(make_fake, artifacts):
    """A new table: one copy, one launch, one event record. A table a ring slot still
    holds (same operands as a recent run): no staging, no copy, launched from that slot.
    A slot is rewritten only once the runs that used it are known to be complete."""
    fake = make_fake()
    sizes = [(128, 256, 512)] * 2
    launch_only = ["cuLaunchKernelEx", "cuEventRecord"]
    copy = ["cuMemcpyHtoDAsync", *launch_only]

    def calls_of(operands):
        start = len(fake.calls)
        p.run(*operands, stream=5)
        return [n for n in fake.names()[start:] if n != "cuCtxSetCurrent"]

    def slot_launched():
        launched = b"".join(fake.launches[-1].params)
        inputs = [p.kernel_inputs(slot)[0]["abc_pointers"] for slot in range(2)]
        return [s for s, a in enumerate(inputs) if a.to_bytes(8, "little") in launched]

    with plan.GroupedGemmPlan(sizes, artifacts=artifacts, ring_slots=2) as p:
        ops, other, third = (operands_for(sizes, base=b << 36) for b in (1, 2, 3))
        assert calls_of(ops) == copy and slot_launched() == [0]
        assert calls_of(ops) == launch_only and slot_launched() == [0]
        assert calls_of(other) == copy and slot_launched() == [1]  # never used: no query
        assert calls_of(ops) == launch_only and slot_launched() == [0]  # slot 0 holds it
        # a third set takes slot 0 (round robin): one query of the newest run proves
        # every run complete (a plan's runs complete in order)
        assert calls_of(third) == ["cuEventQuery", *copy] and slot_launched() == [0]
        assert calls_of(other) == launch_only and slot_launched() == [1]
        assert calls_of(ops) == ["cuEventQuery", *copy] and slot_launched() == [1]
        table = struct.unpack("<6Q", fake.read(p.kernel_inputs(1)[0]["abc_pointers"], 48))
        assert list(table) == [x.__cuda_array_interface__["data"][0]
                               for g in range(2) for x in (ops[0][g], ops[1][g], ops[2][g])]  # fmt: skip


def test_graph_capture_uses_its_own_slot_and_workspace(make_fake, artifacts):
    """Under stream capture: graph slot + graph workspace, no ring events, the slot's table
    written at capture time on a private stream (the graph holds only the launch); then
    set_graph_pointers rewrites that table on the device the same way."""
    fake = make_fake()
    sizes = [(128, 256, 512)] * 2
    with plan.GroupedGemmPlan(sizes, artifacts=artifacts, ring_slots=2) as p:
        ops = operands_for(sizes)
        p.run(*ops, stream=5)  # an eager run first
        eager = p.kernel_inputs(0)[0]
        graph = p.kernel_inputs(p.graph_slot)[0]
        assert graph["tensormap_workspace"] != eager["tensormap_workspace"]
        assert graph["abc_pointers"] not in {
            p.kernel_inputs(s)[0]["abc_pointers"] for s in range(2)
        }
        fake.capturing_streams = {9}
        start = len(fake.calls)
        p.run(*ops, stream=9)
        relaxed = real.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED
        assert [n for n in fake.names()[start:] if n != "cuCtxSetCurrent"] == [
            "cuThreadExchangeStreamCaptureMode", "cuStreamCreate", "cuMemcpyHtoDAsync",
            "cuStreamSynchronize", "cuThreadExchangeStreamCaptureMode", "cuLaunchKernelEx",
        ]  # fmt: skip
        dst, _data, side = fake.copies[-1]
        assert dst == graph["abc_pointers"] and side != 9  # not recorded into the graph
        assert ("cuStreamSynchronize", (side,)) in fake.calls[start:]
        modes = [args[0] for name, args in fake.calls[start:] if "CaptureMode" in name]
        assert modes == [relaxed, real.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_GLOBAL]
        assert fake.capture_mode == modes[-1]  # restored
        launched = b"".join(fake.launches[-1].params)
        assert graph["tensormap_workspace"].to_bytes(8, "little") in launched
        assert eager["tensormap_workspace"].to_bytes(8, "little") not in launched

        other = operands_for(sizes, base=0x20_0000_0000)
        start = len(fake.calls)
        p.set_graph_pointers(*other)
        assert fake.names()[start:] == [
            "cuThreadExchangeStreamCaptureMode", "cuMemcpyHtoDAsync", "cuStreamSynchronize",
            "cuThreadExchangeStreamCaptureMode",
        ]  # fmt: skip
        dst, data, stream = fake.copies[-1]
        assert (dst, stream) == (graph["abc_pointers"], side)
        words = memoryview(data).cast("Q").tolist()
        assert other[0][1].__cuda_array_interface__["data"][0] in words
        with pytest.raises(InvalidProblemError, match="a has 1 operands"):
            p.set_graph_pointers(other[0][:1], *other[1:])


def test_ring_waits_only_when_every_slot_is_in_flight(make_fake, artifacts):
    fake = make_fake()
    fake.events_ready = False
    sizes = [(128, 256, 512)]
    with plan.GroupedGemmPlan(sizes, artifacts=artifacts, ring_slots=2) as p:
        for i in range(3):
            p.run(*operands_for(sizes, base=0x10_0000_0000 * (i + 1)), stream=5)
        # runs 1 and 2 took free slots; run 3 had to wait for run 1's slot
        assert fake.names().count("cuEventSynchronize") == 1
        slots = {dst for dst, _data, _stream in fake.copies}
        assert len(slots) == 2


def test_stream_change_orders_after_previous_run(make_fake, artifacts):
    fake = make_fake()
    sizes = [(128, 256, 512)]
    with plan.GroupedGemmPlan(sizes, artifacts=artifacts) as p:
        ops = operands_for(sizes)
        p.run(*ops, stream=5)
        p.run(*ops, stream=6)
        waits = [args for name, args in fake.calls if name == "cuStreamWaitEvent"]
        assert len(waits) == 1 and waits[0][0] == 6


def test_producer_stream_is_waited_for(make_fake, artifacts):
    fake = make_fake()
    sizes = [(128, 256, 512)]
    with plan.GroupedGemmPlan(sizes, artifacts=artifacts) as p:
        a, b, c, sfa, sfb = operands_for(sizes)
        a[0].__cuda_array_interface__["stream"] = 99
        p.run(a, b, c, sfa, sfb, stream=5)
        records = [args for name, args in fake.calls if name == "cuEventRecord"]
        waits = [args for name, args in fake.calls if name == "cuStreamWaitEvent"]
        assert records[0][1] == 99 and waits[0][0] == 5


def test_known_pointers_in_an_iterator_are_refused_cleanly(make_fake, artifacts):
    """The steady-state lookup consumes iterables; a validated set passed as an iterator
    still gets the sequence error, nothing is launched."""
    fake = make_fake()
    sizes = [(128, 256, 512)]
    with plan.GroupedGemmPlan(sizes, artifacts=artifacts) as p:
        ops = [[address_of(x) for x in column] for column in operands_for(sizes)]
        p.run(*ops)
        launches = len(fake.launches)
        with pytest.raises(InvalidProblemError, match="a must be a sequence .* list_iterator"):
            p.run(iter(ops[0]), *ops[1:])
        assert len(fake.launches) == launches


def test_each_captured_run_keeps_its_own_table(make_fake, artifacts):
    """Two layers of one shape captured into one graph through one plan keep their own
    operands (a capture slot each); past the last slot a capture is refused until the
    slots are released; set_graph_pointers re-points the latest capture."""
    fake = make_fake()
    sizes = [(64, 128, 256), (32, 128, 256)]
    first, second, third = (operands_for(sizes, base=0x10_0000_0000 * (i + 1)) for i in range(3))
    with plan.GroupedGemmPlan(sizes, artifacts=artifacts, capture_slots=2) as p:
        fake.capturing_streams = {9}
        p.run(*first, stream=9)
        p.run(*second, stream=9)
        copies = fake.copies[-2:]
        assert copies[0][0] != copies[1][0]  # two device tables
        a_of = [np.frombuffer(data, np.int64)[0] for _dst, data, _s in copies]
        assert a_of == [x[0].__cuda_array_interface__["data"][0] for x in (first[0], second[0])]
        inputs = [p.kernel_inputs(p.graph_slot + i)[0]["abc_pointers"] for i in range(2)]
        assert [launch.params for launch in fake.launches[-2:]] != [] and inputs[0] != inputs[1]
        with pytest.raises(
            Nvfp4Error, match=r"captured into CUDA graphs 2 times.*release_graph_slots"
        ):
            p.run(*third, stream=9)
        p.set_graph_pointers(*third)  # the latest capture (the second slot) now reads these
        staged = np.frombuffer(bytes(p._launcher._staging[p.graph_slot + 1]), np.int64)
        assert staged[0] == third[0][0].__cuda_array_interface__["data"][0]
        p.release_graph_slots()
        p.run(*third, stream=9)  # the first slot again
        assert fake.copies[-1][0] == copies[0][0]
