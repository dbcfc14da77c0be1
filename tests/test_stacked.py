"""Stacked operands (nvfp4_aot.stacked, GroupedGemmPlan.run_stacked) against the fake
driver: offsets, the table equal to the per-group API's, checks naming the stacked
operand, nothing launched on bad input."""

from __future__ import annotations

import numpy as np
import pytest

from nvfp4_aot import plan
from nvfp4_aot.errors import InvalidProblemError
from nvfp4_aot.layouts import blocked_scale_bytes
from support import FakeArray

BASE = 0x10_0000_0000
SIZES = [(96, 128, 256), (0, 128, 256), (40, 128, 256)]
FIELDS = ("a", "b", "c", "sfa", "sfb")


def stacked_arrays(p, sizes, *, typestrs=("|u1", "|u1", "<f2", "|u1", "|u1"), shrink=None):
    """One FakeArray per field (fields 4 GiB apart), sized as the plan asks."""
    k = {s[2] for s in sizes if s[0]}.pop()
    n = {s[1] for s in sizes if s[0]}.pop()
    rows = {"a": k // 2, "b": k // 2, "c": n}
    arrays = []
    for f, field in enumerate(FIELDS):
        need = p.stacked_bytes[field] - (shrink == field) * 64
        item = 2 if typestrs[f] == "<f2" else 1
        if field in rows:
            shape = (need // (rows[field] * item), rows[field])
        else:
            shape = (need,)
        arrays.append(FakeArray(BASE + (f << 32), shape, typestrs[f]))
    return arrays


def test_offsets_and_bytes_pack_the_groups_back_to_back(make_fake, artifacts):
    make_fake()
    with plan.GroupedGemmPlan(SIZES, artifacts=artifacts) as p:
        assert p.stacked_offsets["a"] == (0, 96 * 128, 96 * 128)  # the empty group: no room
        assert p.stacked_offsets["c"] == (0, 96 * 128 * 2, 96 * 128 * 2)
        assert p.stacked_offsets["b"] == (0, 128 * 128, 128 * 128)
        assert p.stacked_offsets["sfa"] == (0, blocked_scale_bytes(96, 256)) * 1 + (
            blocked_scale_bytes(96, 256),
        )
        assert p.stacked_bytes["a"] == 136 * 128
        assert p.stacked_bytes["sfb"] == 2 * blocked_scale_bytes(128, 256)
    # k % 64 == 32 and an odd m: A's next group starts at the next 32-byte boundary
    with plan.GroupedGemmPlan([(3, 64, 96), (5, 64, 96)], artifacts=artifacts) as p:
        assert p.stacked_offsets["a"] == (0, 160)  # 3 * 48 = 144 -> 160
        assert p.stacked_bytes["a"] == 160 + 5 * 48


def test_run_stacked_uploads_the_table_run_would(make_fake, artifacts):
    fake = make_fake()
    with plan.GroupedGemmPlan(SIZES, artifacts=artifacts) as p:
        arrays = stacked_arrays(p, SIZES)
        p.run_stacked(*arrays, stream=5)
        stacked_table = fake.copies[-1][1]
        columns = [
            [BASE + (f << 32) + p.stacked_offsets[field][g] for g in range(len(SIZES))]
            for f, field in enumerate(FIELDS)
        ]
        p.run(*columns, stream=5)
        assert fake.copies[-1][1] == stacked_table
        pointers = np.frombuffer(stacked_table, np.int64)
        assert pointers[0] == BASE and BASE + (2 << 32) + 96 * 128 * 2 in pointers
        ints = [BASE + (f << 32) for f in range(5)]
        p.run_stacked(*ints)  # raw base pointers work too
        assert fake.copies[-1][1] == stacked_table
        assert len(fake.launches) == 3


@pytest.mark.parametrize(
    "change, message",
    [({"shrink": "c"}, r"stacked c must hold at least 34816 bytes"),
     ({"typestrs": ("<f2", "|u1", "<f2", "|u1", "|u1")}, r"stacked a must have dtype"),
     ({"typestrs": ("|u1", "|u1", "|u1", "|u1", "|u1")}, r"stacked c must have dtype f2, got u1")],
)  # fmt: skip
def test_run_stacked_refuses_bad_arrays(make_fake, artifacts, change, message):
    fake = make_fake()
    with plan.GroupedGemmPlan(SIZES, artifacts=artifacts) as p:
        with pytest.raises(InvalidProblemError, match=message):
            p.run_stacked(*stacked_arrays(p, SIZES, **change))
        assert not fake.launches


def test_run_stacked_checks_rows_alignment_overlap_and_device(make_fake, artifacts):
    fake = make_fake()
    with plan.GroupedGemmPlan(SIZES, artifacts=artifacts) as p:
        a, b, c, sfa, sfb = stacked_arrays(p, SIZES)
        wide = FakeArray(BASE, (68, 256), "|u1")  # enough bytes, rows of 256 bytes, not 128
        with pytest.raises(InvalidProblemError, match=r"stacked a must have rows of 128 bytes"):
            p.run_stacked(wide, b, c, sfa, sfb)
        with pytest.raises(InvalidProblemError, match=r"stacked sfa must be a 32-byte aligned"):
            p.run_stacked(a, b, c, BASE + (3 << 32) + 16, sfb)
        inside_a = FakeArray(BASE + 64 * 128, (136, 128), "<f2")  # C over A's rows 64..
        with pytest.raises(InvalidProblemError, match=r"group \d: c overlaps group \d's a"):
            p.run_stacked(a, b, inside_a, sfa, sfb)
        other = FakeArray(BASE + (1 << 32), (256, 128), "|u1", device=1)
        with pytest.raises(InvalidProblemError, match=r"stacked b is on device 1"):
            p.run_stacked(a, other, c, sfa, sfb)
        with pytest.raises(InvalidProblemError, match=r"stacked c: expected a device pointer"):
            p.run_stacked(a, b, "c", sfa, sfb)
        assert not fake.launches


def test_stacked_graph_capture_and_set_graph_stacked(make_fake, artifacts):
    """Captured like run(); set_graph_stacked rewrites the graph slot's table on the device."""
    fake = make_fake()
    with plan.GroupedGemmPlan(SIZES, artifacts=artifacts) as p:
        fake.capturing_streams = {9}
        p.run_stacked(*stacked_arrays(p, SIZES), stream=9)
        graph = p.kernel_inputs(p.graph_slot)[0]
        assert fake.copies[-1][0] == graph["abc_pointers"]
        start = len(fake.calls)
        other = [BASE + (8 << 32) + (f << 32) for f in range(5)]
        p.set_graph_stacked(*other)
        assert "cuMemcpyHtoDAsync" in fake.names()[start:]
        assert fake.copies[-1][0] == graph["abc_pointers"]
        words = memoryview(fake.copies[-1][1]).cast("Q").tolist()
        assert other[2] + p.stacked_offsets["c"][2] in words
        with pytest.raises(InvalidProblemError, match=r"stacked a must be a 32-byte aligned"):
            p.set_graph_stacked(other[0] + 8, *other[1:])
