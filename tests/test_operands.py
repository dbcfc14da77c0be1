"""Operand intake (nvfp4_aot.operands, through the plan where it checks them):
``__cuda_array_interface__`` and DLPack operands, raw pointers, per-field checks, stream
handles."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from nvfp4_aot import operands, plan
from nvfp4_aot.errors import InvalidProblemError
from nvfp4_aot.layouts import blocked_scale_bytes
from support import (
    DLPackArray,
    FakeArray,
    operands_for,
)


def _bad_operands(sizes, field, replacement):
    ops = operands_for(sizes)
    ops["a b c sfa sfb".split().index(field)][0] = replacement
    return ops


M, N, K = 96, 128, 256
BASE = 0x7000_0000_0000


@pytest.mark.parametrize(
    "field, replacement, message",
    [("a", FakeArray(BASE, (M, K // 2), "<f2"), r"group 0: a must have dtype .*got f2"),
     ("a", FakeArray(BASE, (M, K), "|u1"), r"group 0: a must have shape \(96, 128\), got \(96, 256\)"),
     ("b", FakeArray(BASE, (N, K // 2), "|u1", strides=(256, 1)), r"group 0: b must be C-contiguous"),
     ("c", FakeArray(BASE, (M, N), "<f2", readonly=True), r"group 0: c is read-only"),
     ("c", FakeArray(BASE, (M, N), "<f8"), r"group 0: c: unsupported dtype \(typestr '<f8'\)"),
     ("sfa", FakeArray(BASE, (100,), "|u1"), r"group 0: sfa must hold at least 2048 bytes .*got 100"),
     ("sfb", FakeArray(BASE, (128, 8), "|u1", strides=(16, 1)), r"group 0: sfb must be dense"),
     ("a", FakeArray(BASE + 16, (M, K // 2), "|u1"), r"group 0: a must be 32-byte aligned, got address 0x700000000010"),
     ("b", 0, r"group 0: b is a null pointer"),
     ("sfa", 0x1234, r"group 0: sfa must be 32-byte aligned"),
     ("a", "nope", r"group 0: a: expected a device pointer"),
     ("a", FakeArray(BASE, (M, K // 2), "|u1", device=1), r"group 0: a is on device 1, the plan runs on device 0")],
)  # fmt: skip
def test_operand_validation(make_fake, artifacts, field, replacement, message):
    fake = make_fake()
    with plan.GroupedGemmPlan([(M, N, K)], artifacts=artifacts) as p:
        with pytest.raises(InvalidProblemError, match=message):
            p.run(*_bad_operands([(M, N, K)], field, replacement))
        assert not fake.launches


def test_operand_count_and_overlap(make_fake, artifacts):
    make_fake()
    sizes = [(M, N, K)] * 2
    with plan.GroupedGemmPlan(sizes, artifacts=artifacts) as p:
        a, b, c, sfa, sfb = operands_for(sizes)
        with pytest.raises(InvalidProblemError, match=r"b has 1 operands, the plan has 2 groups"):
            p.run(a, b[:1], c, sfa, sfb)
        c[1] = FakeArray(c[0].__cuda_array_interface__["data"][0] + 1024, (M, N), "<f2")
        with pytest.raises(InvalidProblemError, match=r"group 1: c overlaps group 0's c"):
            p.run(a, b, c, sfa, sfb)


def test_gpu_mode_style_operands_accepted(make_fake, artifacts):
    """(m, k/2, 1) views with l == 1 and permuted-but-dense blocked scales."""
    fake = make_fake()
    with plan.GroupedGemmPlan([(M, N, K)], artifacts=artifacts) as p:
        a, b, c, sfa, sfb = operands_for([(M, N, K)])
        a[0] = FakeArray(BASE, (M, K // 2, 1), "|u1", strides=(K // 2, 1, M * K // 2))
        c[0] = FakeArray(BASE + (1 << 30), (M, N, 1), "<f2", strides=(2 * N, 2, 2 * M * N))
        # (32, 4, rest_m, 4, rest_k, l) permuted view of a dense blocked buffer
        sfa[0] = FakeArray(BASE + (2 << 30), (32, 4, 1, 4, 4, 1), "|u1",
                           strides=(16, 4, 2048, 1, 512, 2048))  # fmt: skip
        p.run(a, b, c, sfa, sfb)
        assert len(fake.launches) == 1


class _CudaStreamProtocol:
    def __cuda_stream__(self):
        return (0, 0xABC)


class _TorchLike:
    cuda_stream = 0xDEF


class _CupyLike:
    ptr = 0x123


def test_stream_handles():
    from cuda.bindings import driver as real

    assert operands.stream_handle(None) == 0
    assert operands.stream_handle(42) == 42
    assert operands.stream_handle(real.CUstream(77)) == 77
    assert operands.stream_handle(_CudaStreamProtocol()) == 0xABC
    assert operands.stream_handle(_TorchLike()) == 0xDEF
    assert operands.stream_handle(_CupyLike()) == 0x123
    with pytest.raises(TypeError, match=r"cannot get a CUDA stream handle from str"):
        operands.stream_handle("stream")
    assert operands.interface_stream(0) == 1


@pytest.mark.parametrize("versioned", [False, True])
def test_dlpack_operand(versioned):
    array = DLPackArray(
        0x7000_0000, (96, 64), (1, 8, 1), device=(2, 1), byte_offset=256, versioned=versioned
    )
    described = operands.device_array(array, stream=0)
    assert described == operands.DeviceArray(0x7000_0100, (96, 64), None, "u1", False, 1)
    assert array.streams == [1]  # legacy default stream is 1 in DLPack


def test_dlpack_fp4_and_fp8_dtypes():
    fp4 = operands.device_array(DLPackArray(256, (96, 128), (17, 4, 1)), stream=5)
    assert fp4.dtype == "e2m1" and operands.check_matrix(fp4, ("e2m1",), 96, 64) is None
    fp8 = operands.device_array(DLPackArray(256, (512,), (10, 8, 1)), stream=5)
    assert fp8.dtype == "e4m3"


def test_dlpack_rejects_host_memory_and_odd_dtypes():
    with pytest.raises(ValueError, match=r"lives on a CPU device, expected a CUDA device"):
        operands.device_array(DLPackArray(256, (4,), (1, 8, 1), device=(1, 0)))
    with pytest.raises(
        ValueError, match=r"unsupported DLPack dtype \(code, bits, lanes\) = \(2, 64, 1\)"
    ):
        operands.device_array(DLPackArray(256, (4,), (2, 64, 1)))


def test_dlpack_operand_in_plan(make_fake, artifacts):
    fake = make_fake()
    with plan.GroupedGemmPlan([(M, N, K)], artifacts=artifacts) as p:
        a, b, c, sfa, sfb = operands_for([(M, N, K)])
        a[0] = DLPackArray(BASE, (M, K // 2), (1, 8, 1))
        p.run(a, b, c, sfa, sfb, stream=9)
        assert a[0].streams == [9]
        table = np.frombuffer(fake.copies[-1][1], np.int64)
        assert table[0] == BASE


def test_many_raw_pointers(make_fake, artifacts):
    """From 32 groups pointers are checked and staged as one int64 array."""
    fake = make_fake()
    sizes = [(64, 128, 256)] * 40
    with plan.GroupedGemmPlan(sizes, artifacts=artifacts) as p:
        ops = [[0x10_0000_0000 + (f << 32) + g * 0x10_0000 for g in range(40)] for f in range(5)]
        p.run(*ops)
        table = np.frombuffer(fake.copies[-1][1], np.int64)
        assert table[: 120 * 3].reshape(120, 3)[:40].tolist() == [list(r) for r in zip(*ops[:3])]
        ops[3][17] += 8
        with pytest.raises(InvalidProblemError, match=r"group 17: sfa must be 32-byte aligned"):
            p.run(*ops)
        ops[3][17] = -32
        with pytest.raises(
            InvalidProblemError, match=r"group 17: sfa is not a device address: -32"
        ):
            p.run(*ops)


def test_overlapping_c_among_many_groups(make_fake, artifacts):
    make_fake()
    sizes = [(64, 128, 256)] * 40
    with plan.GroupedGemmPlan(sizes, artifacts=artifacts) as p:
        ops = [[0x10_0000_0000 + (f << 32) + g * 0x10_0000 for g in range(40)] for f in range(5)]
        ops[2][30] = ops[2][7] + 64
        with pytest.raises(InvalidProblemError, match=r"group 30: c overlaps group 7's c"):
            p.run(*ops)


# the per-column hot path of array operands (issue #17) -----------------------------------


class _Dtype:
    """A dtype object as torch has them: one per dtype, str() its name."""

    def __init__(self, name: str, size: int):
        self.name, self.size = name, size

    def __str__(self) -> str:
        return self.name


UINT8, FLOAT16 = _Dtype("torch.uint8", 1), _Dtype("torch.float16", 2)


class TensorLike:
    """Duck-typed like a CUDA torch tensor (``is_cuda`` at class level), with a CAI dict
    for the full path; counts how often it is hashed."""

    is_cuda = True
    hashed = 0

    def __init__(self, pointer, shape, dtype, device=0):
        self.shape, self.dtype, self._device, self._pointer = tuple(shape), dtype, device, pointer
        self.device = SimpleNamespace(type="cuda", index=device)
        self.__cuda_array_interface__ = {
            "version": 3, "shape": self.shape, "typestr": "|u1" if dtype is UINT8 else "<f2",
            "data": (pointer, False), "strides": None, "stream": None,
        }  # fmt: skip

    def __hash__(self):
        TensorLike.hashed += 1
        return id(self)

    def get_device(self):
        return self._device

    def is_contiguous(self):
        return True

    def numel(self):
        return int(np.prod(self.shape))

    def element_size(self):
        return self.dtype.size

    def data_ptr(self):
        return self._pointer


def _tensor_like_columns(sizes, base=0x10_0000_0000):
    columns = [[], [], [], [], []]
    for g, (m, n, k) in enumerate(sizes):
        at = base + g * 0x100_0000
        columns[0].append(TensorLike(at, (m, k // 2), UINT8))
        columns[1].append(TensorLike(at + (1 << 32), (n, k // 2), UINT8))
        columns[2].append(TensorLike(at + (2 << 32), (m, n), FLOAT16))
        sfa, sfb = blocked_scale_bytes(max(m, 1), k), blocked_scale_bytes(n, k)
        columns[3].append(TensorLike(at + (3 << 32), (sfa,), UINT8))
        columns[4].append(TensorLike(at + (4 << 32), (sfb,), UINT8))
    return columns


def test_tensor_like_operands_read_inline_never_hashed(make_fake, artifacts):
    """run() looks array operands up in no table (hashing a torch tensor runs Python code)
    and reads each one's attributes; dtype objects are accepted per field."""
    fake = make_fake()
    sizes = [(M, N, K), (0, N, K), (32, N, K)]
    with plan.GroupedGemmPlan(sizes, artifacts=artifacts) as p:
        columns = _tensor_like_columns(sizes)
        TensorLike.hashed = 0
        for _ in range(3):
            p.run(*columns)
        assert TensorLike.hashed == 0
        table = np.frombuffer(fake.copies[-1][1], np.int64)
        assert table[0] == columns[0][0].data_ptr()
        assert len(fake.launches) == 3
        bad = [x for x in columns[2]]
        bad[2] = TensorLike(bad[2].data_ptr(), (32, N), UINT8)  # uint8: fine for a, not c
        with pytest.raises(InvalidProblemError, match=r"group 2: c must have dtype f2, got u1"):
            p.run(columns[0], columns[1], bad, columns[3], columns[4])
        small = list(columns[3])
        small[2] = TensorLike(small[2].data_ptr(), (100,), UINT8)
        with pytest.raises(InvalidProblemError, match=r"group 2: sfa must hold at least"):
            p.run(columns[0], columns[1], columns[2], small, columns[4])
        other = list(columns[1])
        other[0] = TensorLike(other[0].data_ptr(), (N, K // 2), UINT8, device=1)
        with pytest.raises(InvalidProblemError, match=r"group 0: b is on device 1"):
            p.run(columns[0], other, columns[2], columns[3], columns[4])
        assert len(fake.launches) == 3


def test_cai_without_shape_is_named_not_crashed(make_fake, artifacts):
    make_fake()
    with plan.GroupedGemmPlan([(M, N, K)], artifacts=artifacts) as p:
        bad = FakeArray(BASE, (4096,), "|u1")
        del bad.__cuda_array_interface__["shape"]
        with pytest.raises(InvalidProblemError, match=r"group 0: sfa: malformed"):
            p.run(*_bad_operands([(M, N, K)], "sfa", bad))


def test_run_stacked_reads_tensor_like_operands(make_fake, artifacts):
    """run_stacked's fast path: five torch-like arrays, their row length checked."""
    fake = make_fake()
    sizes = [(M, N, K), (32, N, K)]
    with plan.GroupedGemmPlan(sizes, artifacts=artifacts) as p:
        need = p.stacked_bytes
        a = TensorLike(BASE, (M + 32, K // 2), UINT8)
        b = TensorLike(BASE + (1 << 32), (2 * N, K // 2), UINT8)
        c = TensorLike(BASE + (2 << 32), (M + 32, N), FLOAT16)
        sfa = TensorLike(BASE + (3 << 32), (need["sfa"],), UINT8)
        sfb = TensorLike(BASE + (4 << 32), (need["sfb"],), UINT8)
        p.run_stacked(a, b, c, sfa, sfb)
        table = np.frombuffer(fake.copies[-1][1], np.int64)
        assert BASE + M * K // 2 in table  # group 1's A
        wide = TensorLike(BASE, ((M + 32) // 2, K), UINT8)  # the bytes, in rows of K bytes
        with pytest.raises(InvalidProblemError, match=r"stacked a must have rows of 128 bytes"):
            p.run_stacked(wide, b, c, sfa, sfb)
        assert len(fake.launches) == 1
