"""A catalogue of bad inputs, each refused before anything reaches the GPU.

Every case goes through the public API (``GroupedGemmPlan``, ``.run``,
``.set_graph_pointers``, ``get_plan``, ``grouped_gemm``) or the CLI against the fake
driver (tests/fake_driver.py) and asserts three things: the exception class, a message
naming the group and the field (or the option), and that nothing was launched or copied
(no cuLaunchKernel / cuLaunchKernelEx / cuMemcpyHtoDAsync / cuMemcpyHtoD after the bad
call). Operand cases also check that the plan is still sound afterwards: the next good
run launches once and uploads the good pointers.

Cases the runtime did not catch at first were marked ``xfail(strict=True)`` with the fix in
their reason; a fix makes them pass, and strict mode then asks for the mark to go.

Related cases already in test_validation.py (test_problem_size_validation) and
test_operands.py (test_operand_validation, test_operand_count_and_overlap,
test_many_raw_pointers, test_overlapping_c_among_many_groups) are not repeated here; the
cases below use other groups, fields, values or code paths.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from click.testing import CliRunner

from fake_driver import FakeDriver, installed
from nvfp4_aot import cli, driver, loader, plan
from nvfp4_aot.errors import InvalidProblemError, Nvfp4Error, UnsupportedDeviceError
from support import DLPackArray, FakeArray, kernel_params_of, operands_for

REPO = Path(__file__).resolve().parents[1]
FIELDS = ("a", "b", "c", "sfa", "sfb")
WORK = {"cuLaunchKernel", "cuLaunchKernelEx", "cuMemcpyHtoDAsync", "cuMemcpyHtoD", "cuGraphLaunch"}
# Three groups of different shapes, so that every message must name the right one.
SIZES = [(96, 128, 256), (128, 256, 512), (200, 64, 128)]
M1, N1, K1 = SIZES[1]  # most cases break group 1: A (128, 256), B (256, 256), C (128, 256)
SFA1, SFB1 = 4096, 8192  # blocked_scale_bytes(128, 512), blocked_scale_bytes(256, 512)


# ---------------------------------------------------------------------------------------
# fixtures and helpers


@pytest.fixture
def fake(artifacts, monkeypatch):
    """A FakeDriver of compute capability 10.0 (sm_100a variants), installed for one test
    (``artifacts``: the synthetic artifacts of conftest.py)."""
    monkeypatch.setenv("NVFP4_AOT_ARTIFACTS", str(artifacts))
    backend = FakeDriver(kernel_params=kernel_params_of(loader.load_manifest(artifacts)))
    with installed(backend):
        yield backend


def work_after(fake: FakeDriver, start: int) -> list[str]:
    """The launches and copies the fake saw since call number ``start``."""
    return [name for name in fake.names()[start:] if name in WORK]


def address(operand) -> int:
    return operand.__cuda_array_interface__["data"][0]


def as_raw(ops):
    """The same operands as raw device pointers (ints): the all-int fast path."""
    return [[address(x) for x in column] for column in ops]


class TorchLike:
    """Duck-typed like a PyTorch CUDA tensor (the plan's torch fast path), plus CAI."""

    is_cuda = True

    def __init__(self, pointer, shape, typestr, dtype, device_index):
        self.shape = tuple(shape)
        self.dtype = dtype
        self.device = SimpleNamespace(type="cuda", index=device_index)
        self._pointer = pointer
        self.__cuda_array_interface__ = {
            "version": 3, "shape": self.shape, "typestr": typestr, "data": (pointer, False),
            "strides": None, "stream": None,
        }  # fmt: skip

    def data_ptr(self):
        return self._pointer

    def is_contiguous(self):
        return True

    def get_device(self):
        return self.device.index


class BadStreamProtocol:
    def __cuda_stream__(self):
        return 5  # should be (version, handle)


def _read_only_dlpack(pointer, shape, dtype):
    array = DLPackArray(pointer, shape, dtype, versioned=True)
    array._managed.flags = 1  # DLPACK_FLAG_BITMASK_READ_ONLY
    return array


def _cai_without_data(pointer, shape, typestr):
    array = FakeArray(pointer, shape, typestr)
    del array.__cuda_array_interface__["data"]
    return array


def _masked(pointer, shape, typestr):
    array = FakeArray(pointer, shape, typestr)
    array.__cuda_array_interface__["mask"] = FakeArray(pointer, shape, "|b1")
    return array


def put(field: str, group: int, make, *, raw: bool = False):
    """A mutation of the good operands: replace ``field`` of ``group`` by
    ``make(address_of_the_good_operand, ops)``; ``raw`` turns all operands into ints first."""

    def mutate(ops):
        f = FIELDS.index(field)
        good = address(ops[f][group])
        if raw:
            ops[:] = as_raw(ops)
        ops[f][group] = make(good, ops)
        return ops

    return mutate


def alias(field: str, group: int, target_field: str, target_group: int, offset: int = 0):
    """``field`` of ``group`` at the address of ``target_field`` of ``target_group``."""
    shape = {"a": (SIZES[group][0], SIZES[group][2] // 2), "c": SIZES[group][:2]}

    def make(_good, ops):
        target = address(ops[FIELDS.index(target_field)][target_group]) + offset
        typestr = "<f2" if field == "c" else "|u1"
        return FakeArray(target, shape[field], typestr)

    return put(field, group, make)


# ---------------------------------------------------------------------------------------
# the operand catalogue: (mutation, message); the exception is InvalidProblemError

OPERAND_CASES = [
    # dtypes
    pytest.param(put("a", 1, lambda p, o: FakeArray(p, (M1, K1 // 2), "<f2")),
                 r"group 1: a must have dtype u1 or i1 or e2m1x2 or e2m1 or v1, got f2",
                 id="a-float16-typestr"),
    pytest.param(put("b", 1, lambda p, o: DLPackArray(p, (N1, K1 // 2), (10, 8, 1))),
                 r"group 1: b must have dtype .*, got e4m3", id="b-fp8-dlpack"),
    pytest.param(put("c", 1, lambda p, o: FakeArray(p, (M1, 2 * N1), "|u1")),
                 r"group 1: c must have dtype f2, got u1", id="c-uint8-bytes"),
    pytest.param(put("c", 1, lambda p, o: FakeArray(p, (M1, N1), "<i2")),
                 r"group 1: c: unsupported dtype \(typestr '<i2'\)", id="c-int16-typestr"),
    pytest.param(put("c", 1, lambda p, o: DLPackArray(p, (M1, N1), (4, 16, 1))),
                 r"group 1: c must have dtype f2, got bf16",
                 id="c-bfloat16-dlpack"),
    pytest.param(put("sfa", 1, lambda p, o: FakeArray(p, (SFA1 // 2,), "<f2")),
                 r"group 1: sfa must have dtype u1 or i1 or e4m3 or v1, got f2",
                 id="sfa-float16-typestr"),
    # shapes
    pytest.param(put("a", 1, lambda p, o: FakeArray(p, (K1 // 2, M1), "|u1")),
                 r"group 1: a must have shape \(128, 256\), got \(256, 128\)", id="a-transposed"),
    pytest.param(put("a", 1, lambda p, o: DLPackArray(p, (M1, K1 // 2), (17, 4, 1))),
                 r"group 1: a must have shape \(128, 512\), got \(128, 256\)",
                 id="a-fp4-elements-counted-as-bytes"),
    pytest.param(put("b", 1, lambda p, o: FakeArray(p, (N1 + 1, K1 // 2), "|u1")),
                 r"group 1: b must have shape \(256, 256\), got \(257, 256\)", id="b-one-row-too-many"),
    pytest.param(put("c", 1, lambda p, o: FakeArray(p, (N1, M1), "<f2")),
                 r"group 1: c must have shape \(128, 256\), got \(256, 128\)", id="c-transposed"),
    pytest.param(put("c", 1, lambda p, o: FakeArray(p, (M1, N1, 2), "<f2")),
                 r"group 1: c must have shape \(128, 256\), got \(128, 256, 2\)", id="c-batch-of-two"),
    # strides
    pytest.param(put("a", 1, lambda p, o: FakeArray(p, (M1, K1 // 2), "|u1", strides=(K1 // 2 + 32, 1))),
                 r"group 1: a must be C-contiguous", id="a-padded-rows"),
    pytest.param(put("b", 1, lambda p, o: FakeArray(p, (N1, K1 // 2), "|u1", strides=(-(K1 // 2), 1))),
                 r"group 1: b must be C-contiguous", id="b-negative-row-stride"),
    pytest.param(put("c", 1, lambda p, o: FakeArray(p, (M1, N1), "<f2", strides=(2, 2 * M1))),
                 r"group 1: c must be C-contiguous", id="c-fortran-order"),
    pytest.param(put("c", 1, lambda p, o: FakeArray(p, (M1, N1), "<f2", strides=(2 * N1, 3))),
                 r"group 1: c: strides \(512, 3\) bytes are not multiples of the item size 2",
                 id="c-stride-not-item-multiple"),
    pytest.param(put("sfb", 1, lambda p, o: FakeArray(p, (N1, 32), "|u1", strides=(64, 1))),
                 r"group 1: sfb must be dense", id="sfb-gapped"),
    # scale sizes
    pytest.param(put("sfa", 1, lambda p, o: FakeArray(p, (SFA1 - 1,), "|u1")),
                 r"group 1: sfa must hold at least 4096 bytes .*got 4095", id="sfa-one-byte-short"),
    pytest.param(put("sfa", 2, lambda p, o: FakeArray(p, (200, 8), "|u1")),
                 r"group 2: sfa must hold at least 2048 bytes .*got 1600 \(shape \(200, 8\)\)",
                 id="sfa-row-major-not-blocked"),
    # addresses
    pytest.param(put("a", 1, lambda p, o: FakeArray(p + 16, (M1, K1 // 2), "|u1")),
                 r"group 1: a must be 32-byte aligned, got address 0x[0-9a-f]+ \(offset 16\)",
                 id="a-misaligned-16"),
    pytest.param(put("c", 1, lambda p, o: p + 2, raw=True),
                 r"group 1: c must be 32-byte aligned, got address 0x[0-9a-f]+ \(offset 2\)",
                 id="c-misaligned-raw"),
    pytest.param(put("c", 2, lambda p, o: p + 8),
                 r"group 2: c must be 32-byte aligned, got address 0x[0-9a-f]+ \(offset 8\)",
                 id="c-raw-int-among-arrays"),
    pytest.param(put("b", 2, lambda p, o: 0, raw=True),
                 r"group 2: b is a null pointer", id="b-null-raw"),
    pytest.param(put("sfb", 1, lambda p, o: FakeArray(0, (SFB1,), "|u1")),
                 r"group 1: sfb is a null pointer", id="sfb-null-cai"),
    pytest.param(put("a", 1, lambda p, o: -256, raw=True),
                 r"group 1: a is not a device address: -256", id="a-negative-raw"),
    pytest.param(put("sfa", 1, lambda p, o: True),
                 r"group 1: sfa: expected a device pointer .*got bool", id="sfa-bool"),
    pytest.param(put("c", 1, lambda p, o: 1 << 63, raw=True),
                 r"group 1: c is not a device address", id="c-at-2**63-raw"),
    pytest.param(put("a", 1, lambda p, o: FakeArray(1 << 64, (M1, K1 // 2), "|u1")),
                 r"group 1: a is not a device address", id="a-at-2**64-cai"),
    # host memory and other devices
    pytest.param(put("a", 1, lambda p, o: np.zeros((M1, K1 // 2), np.uint8)),
                 r"group 1: a: the array lives on a CPU device, expected a CUDA device",
                 id="a-host-numpy"),
    pytest.param(put("a", 1, lambda p, o: np.zeros((M1, K1 // 2), np.uint8), raw=True),
                 r"group 1: a: the array lives on a CPU device", id="a-host-numpy-among-raw-pointers"),
    pytest.param(put("c", 1, lambda p, o: DLPackArray(p, (M1, N1), (2, 16, 1), device=(3, 0))),
                 r"group 1: c: the array lives on a CUDA host device, expected a CUDA device",
                 id="c-cuda-host-dlpack"),
    pytest.param(put("c", 1, lambda p, o: DLPackArray(p, (M1, N1), (2, 16, 1), device=(2, 1))),
                 r"group 1: c is on device 1, the plan runs on device 0; create the plan with "
                 r"device=1 or move the data", id="c-other-device-dlpack"),
    pytest.param(put("sfb", 1, lambda p, o: FakeArray(p, (SFB1,), "|u1", device=1)),
                 r"group 1: sfb is on device 1, the plan runs on device 0", id="sfb-other-device-cai"),
    pytest.param(put("b", 1, lambda p, o: TorchLike(p, (N1, K1 // 2), "|u1", "torch.uint8", 1)),
                 r"group 1: b is on device 1, the plan runs on device 0", id="b-other-device-torch-like"),
    # malformed descriptions
    pytest.param(put("c", 1, lambda p, o: _read_only_dlpack(p, (M1, N1), (2, 16, 1))),
                 r"group 1: c is read-only", id="c-read-only-dlpack"),
    pytest.param(put("a", 1, lambda p, o: _masked(p, (M1, K1 // 2), "|u1")),
                 r"group 1: a: masked arrays .* are not supported", id="a-masked-cai"),
    pytest.param(put("a", 1, lambda p, o: _cai_without_data(p, (M1, K1 // 2), "|u1")),
                 r"group 1: a: malformed __cuda_array_interface__", id="a-cai-without-data"),
    pytest.param(put("b", 1, lambda p, o: object()),
                 r"group 1: b: expected a device pointer \(int\), an object with "
                 r"__cuda_array_interface__ or with __dlpack__, got object", id="b-plain-object"),
    pytest.param(put("sfb", 2, lambda p, o: "0x7f0000000000"),
                 r"group 2: sfb: expected a device pointer .*got str", id="sfb-hex-string"),
    # aliasing
    pytest.param(alias("c", 2, "c", 0),
                 r"group 2: c overlaps group 0's c .*every group needs its own output",
                 id="c-same-buffer-as-group-0"),
    pytest.param(alias("c", 1, "c", 2, offset=-4096),
                 r"group 2: c overlaps group 1's c", id="c-runs-into-group-2"),
    pytest.param(alias("c", 1, "a", 1),
                 r"group 1: c overlaps group 1's a", id="c-aliases-own-a"),
    pytest.param(alias("c", 2, "sfb", 0),
                 r"group 2: c overlaps group 0's sfb", id="c-aliases-sfb-of-group-0"),
    # the operand lists themselves
    pytest.param(lambda ops: [*ops[:4], [*ops[4], ops[4][0]]],
                 r"sfb has 4 operands, the plan has 3 groups", id="sfb-list-too-long"),
    pytest.param(lambda ops: [iter(ops[0]), *ops[1:]],
                 r"a must be a sequence with one operand per group, got list_iterator",
                 id="a-iterator-not-sequence"),
    pytest.param(lambda ops: [*ops[:2], None, *ops[3:]],
                 r"c must be a sequence with one operand per group, got NoneType", id="c-none"),
    pytest.param(lambda ops: [[], [], [], [], []],
                 r"a has 0 operands, the plan has 3 groups", id="all-lists-empty"),
    pytest.param(lambda ops: operands_for([(96, 128, 256), (256, 256, 512), (200, 64, 128)]),
                 r"group 1: a must have shape \(128, 256\), got \(256, 256\)",
                 id="operands-of-other-shapes"),
]  # fmt: skip


@pytest.mark.parametrize("mutate, message", OPERAND_CASES)
def test_run_refuses_bad_operand(fake, artifacts, mutate, message):
    with plan.GroupedGemmPlan(SIZES, artifacts=artifacts, ring_slots=2) as p:
        good = operands_for(SIZES)
        p.run(*good, stream=5)  # a good run first: the plan's caches hold good state
        start = len(fake.calls)
        with pytest.raises(InvalidProblemError, match=message):
            p.run(*mutate(operands_for(SIZES)), stream=5)
        assert work_after(fake, start) == []
        # still sound: the next run (new pointers) uploads them and launches once
        other = operands_for(SIZES, base=0x20_0000_0000)
        start = len(fake.calls)
        p.run(*other, stream=5)
        assert work_after(fake, start) == ["cuMemcpyHtoDAsync", "cuLaunchKernelEx"]
        table = np.frombuffer(fake.copies[-1][1], np.int64)
        assert table[:9].reshape(3, 3).tolist() == [
            [address(x) for x in (other[0][g], other[1][g], other[2][g])] for g in range(3)
        ]


@pytest.mark.parametrize("mutate, message", OPERAND_CASES)
def test_set_graph_pointers_refuses_bad_operand(fake, artifacts, mutate, message):
    """The same catalogue through set_graph_pointers: refused, staging left unchanged."""
    with plan.GroupedGemmPlan(SIZES, artifacts=artifacts, ring_slots=2) as p:
        p.set_graph_pointers(*operands_for(SIZES))
        staged = bytes(p._launcher._staging[p.graph_slot])
        start = len(fake.calls)
        with pytest.raises(InvalidProblemError, match=message):
            p.set_graph_pointers(*mutate(operands_for(SIZES)))
        assert fake.names()[start:] == []
        assert bytes(p._launcher._staging[p.graph_slot]) == staged


# ---------------------------------------------------------------------------------------
# streams


@pytest.mark.parametrize(
    "stream, error, message",
    [pytest.param("stream", TypeError, r"cannot get a CUDA stream handle from str", id="stream-str"),
     pytest.param(1.5, TypeError, r"cannot get a CUDA stream handle from float", id="stream-float"),
     pytest.param(object(), TypeError, r"cannot get a CUDA stream handle from object",
                  id="stream-unknown-object"),
     pytest.param(True, TypeError, r"stream must be a stream object or handle, got True",
                  id="stream-bool"),
     pytest.param(-1, ValueError, r"stream handle must be >= 0, got -1", id="stream-negative"),
     pytest.param(BadStreamProtocol(), TypeError,
                  r"__cuda_stream__ of BadStreamProtocol must give \(version, handle\), got 5",
                  id="stream-bad-cuda-stream-protocol")],
)  # fmt: skip
def test_run_refuses_bad_stream(fake, artifacts, stream, error, message):
    with plan.GroupedGemmPlan(SIZES, artifacts=artifacts) as p:
        start = len(fake.calls)
        with pytest.raises(error, match=message):
            p.run(*operands_for(SIZES), stream=stream)
        assert work_after(fake, start) == []


# ---------------------------------------------------------------------------------------
# problem sizes: refused before any driver call at all


SIZE_CASES = [
    pytest.param([(96, 128, 256), (128, 256, 512), (200, 64, 16)],
                 r"group 2: k must be a multiple of 32 .*got 16", id="k-16-multiple-of-16-only"),
    pytest.param([(96, 128, 256), (128, 256, 33)], r"group 1: k must be a multiple of 32 .*got 33",
                 id="k-odd"),
    pytest.param([(96, 128, 256), (128, 48, 512)], r"group 1: n must be a multiple of 32 .*got 48",
                 id="n-48"),
    pytest.param([(96, 128, 0)], r"group 0: k must be >= 1, got 0", id="k-zero"),
    pytest.param([(96, 128, 256), (128, 256, 512), (-128, 64, 128)],
                 r"group 2: m must be >= 0 \(an empty group\), got -128", id="m-negative"),
    pytest.param([(96, 128, 256), (1 << 31, 32, 32)], r"group 1: m must be < 2\*\*31",
                 id="m-2**31"),
    pytest.param([(128, 65536, 32768)], r"group 0: n \* k must be < 2\*\*31 .*got 2147483648",
                 id="n*k-int32-overflow"),
    pytest.param([(96, 128, 256), (65536, 32768, 32)],
                 r"group 1: m \* n must be < 2\*\*31 .*got 2147483648", id="m*n-int32-overflow"),
    pytest.param([(96, 128, 256), (128, 256, 512, 0)], r"group 1: l must be 1 .*got 0", id="l-zero"),
    pytest.param([(96, 128, 256, 1, 1)], r"group 0: problem size must have 3 .* got 5",
                 id="five-entries"),
    pytest.param([("128", "256", "512")], r"group 0: problem size must be integers", id="strings"),
    pytest.param(None, r"problem_sizes must be a sequence of \(m, n, k\)", id="none"),
    pytest.param([128, 256, 512], r"group 0: problem size must be integers .*got 128",
                 id="flat-triple-not-nested"),
]  # fmt: skip


@pytest.mark.parametrize("sizes, message", SIZE_CASES)
@pytest.mark.parametrize("entry", ["GroupedGemmPlan", "get_plan"])
def test_bad_problem_sizes_touch_no_driver(fake, artifacts, entry, sizes, message):
    create = {"GroupedGemmPlan": plan.GroupedGemmPlan, "get_plan": plan.get_plan}[entry]
    with pytest.raises(InvalidProblemError, match=message):
        create(sizes, artifacts=artifacts)
    assert fake.calls == []


def test_ring_slots_zero(fake, artifacts):
    with pytest.raises(ValueError, match=r"ring_slots must be >= 1, got 0"):
        plan.GroupedGemmPlan(SIZES, artifacts=artifacts, ring_slots=0)
    assert fake.calls == []


def test_negative_device(fake, artifacts):
    with pytest.raises(
        UnsupportedDeviceError, match=r"device -1 does not exist; this machine has 1"
    ):
        plan.GroupedGemmPlan(SIZES, device=-1, artifacts=artifacts)
    assert not {"cuMemAlloc", "cuLibraryLoadData"} & set(fake.names())
    assert work_after(fake, 0) == []


# ---------------------------------------------------------------------------------------
# the plan's lifetime


def test_closed_plan_refuses_runs(fake, artifacts):
    p = plan.GroupedGemmPlan(SIZES, artifacts=artifacts)
    p.run(*operands_for(SIZES))
    p.close()
    start = len(fake.calls)
    with pytest.raises(Nvfp4Error, match=r"the plan is closed"):
        p.run(*operands_for(SIZES))
    with pytest.raises(Nvfp4Error, match=r"the plan is closed"):
        p.set_graph_pointers(*operands_for(SIZES))
    with pytest.raises(Nvfp4Error, match=r"the plan is closed"):
        p.launch_pointers(p.pointers(*operands_for(SIZES))[0])
    p.synchronize()  # a no-op once closed
    assert work_after(fake, start) == []
    assert not fake.memory and not fake.host


def test_closed_plan_checks_operands_first(fake, artifacts):
    """A bad operand on a closed plan names the operand (validation comes first)."""
    p = plan.GroupedGemmPlan(SIZES, artifacts=artifacts)
    p.close()
    start = len(fake.calls)
    ops = put("c", 1, lambda ptr, o: ptr + 2)(operands_for(SIZES))
    with pytest.raises(InvalidProblemError, match=r"group 1: c must be 32-byte aligned"):
        p.run(*ops)
    assert fake.names()[start:] == []


def test_closed_plan_is_not_served_from_the_cache(fake, artifacts):
    p1 = plan.get_plan(SIZES)
    p1.close()
    p2 = plan.get_plan(SIZES)
    assert p2 is not p1
    p2.run(*operands_for(SIZES))
    assert len(fake.launches) == 1


# ---------------------------------------------------------------------------------------
# grouped_gemm: the one-call API infers sizes and the device from the operands

G0 = (96, 128, 256)


def _gg(**changes):
    """Good grouped_gemm arguments for groups G0 and (128, 256, 512), then ``changes``."""
    a, b, c, sfa, sfb = operands_for([G0, (128, 256, 512)])
    args = {"a": a, "b": b, "c": c, "sfa": sfa, "sfb": sfb}
    for key, value in changes.items():
        args[key] = value(args) if callable(value) else value
    return args


GROUPED_GEMM_CASES = [
    pytest.param(_gg(b=lambda x: x["b"][:1]), InvalidProblemError,
                 r"a has 2 operands and b has 1", id="a-b-count-mismatch"),
    pytest.param(_gg(b=lambda x: [FakeArray(address(x["b"][0]), (128, 64), "|u1"), x["b"][1]]),
                 InvalidProblemError, r"group 0: a implies k = 256, b implies k = 128",
                 id="a-b-disagree-on-k"),
    pytest.param(_gg(a=lambda x: [FakeArray(address(x["a"][0]), (96 * 128,), "|u1"), x["a"][1]]),
                 InvalidProblemError, r"group 0: a must be 2-D \(rows, k/2\), got shape \(12288,\)",
                 id="a-1d"),
    pytest.param(_gg(c=lambda x: x["c"][:1]), InvalidProblemError,
                 r"c has 1 operands, the plan has 2 groups", id="c-missing-a-group"),
    pytest.param(_gg(a=lambda x: [FakeArray(address(x["a"][0]), (96, 128), "|u1", device=0),
                                  x["a"][1]],
                     b=lambda x: [FakeArray(address(x["b"][0]), (128, 128), "|u1", device=1),
                                  x["b"][1]]),
                 InvalidProblemError, r"group 0: b is on device 1, the plan runs on device 0",
                 id="mixed-devices"),
    pytest.param(_gg(a=lambda x: [FakeArray(address(x["a"][0]), (96, 8), "|u1")],
                     b=lambda x: [FakeArray(address(x["b"][0]), (128, 8), "|u1")]),
                 InvalidProblemError, r"group 0: k must be a multiple of 32 .*got 16",
                 id="inferred-k-16"),
    pytest.param(_gg(sfa=lambda x: [np.zeros(2048, np.uint8), x["sfa"][1]]), InvalidProblemError,
                 r"group 0: sfa: the array lives on a CPU device", id="host-numpy-scales"),
    pytest.param(_gg(a=[], b=[], c=[], sfa=[], sfb=[]), InvalidProblemError,
                 r"problem_sizes is empty", id="empty-lists"),
    pytest.param(_gg(a=lambda x: [123_456_789_000, x["a"][1]]), InvalidProblemError,
                 r"group 0: a is a raw pointer, so problem_sizes must be given",
                 id="raw-pointer-without-sizes"),
    pytest.param(_gg(stream=object()), TypeError, r"cannot get a CUDA stream handle from object",
                 id="unknown-stream-object"),
]  # fmt: skip


@pytest.mark.parametrize("kwargs, error, message", GROUPED_GEMM_CASES)
def test_grouped_gemm_refuses(fake, kwargs, error, message):
    with pytest.raises(error, match=message):
        plan.grouped_gemm(**kwargs)
    # a plan may have been created (its setup copies are synchronous); nothing ran
    assert not {"cuLaunchKernelEx", "cuLaunchKernel", "cuMemcpyHtoDAsync"} & set(fake.names())


def test_grouped_gemm_explicit_sizes_disagreeing_with_operands(fake):
    with pytest.raises(InvalidProblemError, match=r"group 1: a must have shape \(64, 256\)"):
        plan.grouped_gemm(**_gg(), problem_sizes=[G0, (64, 256, 512)])
    assert fake.launches == [] and fake.copies == []


# ---------------------------------------------------------------------------------------
# the CLI: bad shapes and options are usage errors (exit 2) before any GPU work


@pytest.fixture
def cli_fake():
    committed = loader.load_manifest(REPO / "artifacts")
    backend = FakeDriver(capability=(9, 0), kernel_params=kernel_params_of(committed))
    loader.clear_caches()
    plan.clear_plan_cache()
    previous = driver.use_backend(backend)
    yield backend
    driver.use_backend(previous)
    loader.clear_caches()


def _shapes_file(tmp_path: Path, k: int) -> Path:
    path = tmp_path / "shapes.json"
    path.write_text(json.dumps({"benchmarks": [{"m": [128], "n": [256], "k": [k]}]}))
    return path


CLI_CASES = [
    pytest.param(["verify", "--shape", "0,256,512"], r"group 0: m must be >= 1 to verify or time it, got 0", id="m-zero"),
    pytest.param(["verify", "--shape", "128,-256,512"], r"group 0: n must be >= 1, got -256",
                 id="n-negative"),
    pytest.param(["verify", "--shape", "128,256,512", "--shape", "128,256,48"],
                 r"group 1: k must be a multiple of 32", id="second-group-k-48"),
    pytest.param(["bench", "--shape", "65536,32768,32"], r"group 0: m \* n must be < 2\*\*31",
                 id="m*n-overflow"),
    pytest.param(["verify", "--groups-json", "[]"], r"problem_sizes is empty", id="groups-json-empty"),
    pytest.param(["verify", "--groups-json", "[[128, 256, 512, 1]]"], r"group 0 must be three integers",
                 id="groups-json-with-l"),
    pytest.param(["verify", "--groups-json", "[[128, 256.0, 512]]"], r"group 0 must be three integers",
                 id="groups-json-float"),
    pytest.param(["verify", "--groups-json", '{"m": [128], "n": [256], "k": [48]}'],
                 r"group 0: k must be a multiple of 32", id="groups-json-k-48"),
    pytest.param(["bench", "--shapes", "{shapes_k48}"], r"case 'shapes.json:benchmarks\[0\]': "
                 r"group 0: k must be a multiple of 32", id="shapes-file-k-48"),
    pytest.param(["verify", "--shape", "128,256,512,1"], r"expected M,N,K", id="shape-with-l"),
    pytest.param(["bench", "--sets", "0"], r"--sets", id="sets-zero"),
    pytest.param(["bench", "--warmup", "-1"], r"--warmup", id="warmup-negative"),
    pytest.param(["verify", "--artifacts", "/nonexistent/artifacts"], r"does not exist",
                 id="artifacts-dir-missing"),
    # MoE problems (--moe E,N,K and the routing options)
    pytest.param(["verify", "--moe", "8,256"], r"Invalid value for '--moe': expected E,N,K",
                 id="moe-two-values"),
    pytest.param(["bench", "--moe", "a,b,c"], r"'--moe': expected E,N,K", id="moe-not-ints"),
    pytest.param(["verify", "--moe", "0,256,512"], r"--moe'?: .*experts must be an int >= 1",
                 id="moe-no-experts"),
    pytest.param(["verify", "--moe", "8,250,512"], r"--moe'?: .*n must be a multiple of 32",
                 id="moe-n-250"),
    pytest.param(["bench", "--moe", "8,256,96"], r"--moe'?: .*k must be a multiple of 64",
                 id="moe-k-96"),
    pytest.param(["bench", "--moe", "2,32768,64", "--tokens", "70000"],
                 r"--moe'?: .*E2-n32768-k64-contiguous-T70000-top1.*m \* n must be < 2\*\*31",
                 id="moe-c-overflow"),
    pytest.param(["verify", "--moe", "4,256,512", "--top-k", "8"],
                 r"--top-k'?: 8 is more than the 4 experts of --moe 4,256,512", id="moe-top-k"),
    pytest.param(["verify", "--moe", "8,256,512", "--top-k", "0"], r"'--top-k'",
                 id="moe-top-k-zero"),
    pytest.param(["verify", "--moe", "8,256,512", "--tokens", "0"], r"'--tokens'",
                 id="moe-no-tokens"),
    pytest.param(["verify", "--moe", "8,256,512", "--layout", "diagonal"], r"'--layout'",
                 id="moe-layout"),
    pytest.param(["bench", "--moe", "8,256,512", "--routing", "zipf"], r"'--routing'",
                 id="moe-routing-kind"),
    pytest.param(["bench", "--moe", "8,256,512", "--routings", "0"], r"'--routings'",
                 id="moe-routings-zero"),
    pytest.param(["verify", "--moe", "256,4096,7168"],
                 r"--moe'?: .*float64 reference .* needs 56.0 GiB of host memory",
                 id="moe-verify-too-big"),
    pytest.param(["verify", "--tokens", "16"], r"--tokens describes a MoE problem: it needs --moe",
                 id="moe-option-without-moe"),
    pytest.param(["bench", "--moe", "8,256,512", "--groups-json", "[[128, 256, 512]]"],
                 r"--moe cannot be combined with", id="moe-and-shapes"),
]  # fmt: skip


@pytest.mark.parametrize("args, message", CLI_CASES)
def test_cli_refuses_before_gpu_work(cli_fake, tmp_path, args, message):
    args = [a.replace("{shapes_k48}", str(_shapes_file(tmp_path, 48))) for a in args]
    result = CliRunner().invoke(cli.main, args, catch_exceptions=False)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert re.search(message, " ".join(result.output.split())), result.output
    assert work_after(cli_fake, 0) == []
    assert not {"cuMemAlloc", "cuLibraryLoadData"} & set(cli_fake.names())
