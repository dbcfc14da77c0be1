"""bench_common.same_bytes_copy_pdl on CPU (needs torch; skipped without it): the PTX
assembles for sm_90 (where ptxas is installed), and the helper loads it through
nvfp4_aot.driver and launches it with programmatic stream serialization, one 16-byte
vector a thread, against a fake driver whose launch does the kernel's work on the host
tensors (a launch that does not is caught by the helper's byte check)."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
import sys

import numpy as np
import pytest

from fake_driver import FakeDriver, installed
from nvfp4_aot import driver
from support import REPO

torch = pytest.importorskip("torch")
import cuda_stubs  # noqa: E402  (needs torch)


class CopyingDriver(FakeDriver):
    """Runs the copy kernel's work at launch: vectors x 16 bytes of the source,
    inverted, into the destination (the tensors live on the host here)."""

    def cuLaunchKernelEx(self, config, function, kernel_params, extra):
        result = super().cuLaunchKernelEx(config, function, kernel_params, extra)
        source, destination, vectors = (
            int.from_bytes(p, "little") for p in self.launches[-1].params
        )
        data = np.frombuffer(ctypes.string_at(source, 16 * vectors), dtype=np.uint8)
        ctypes.memmove(destination, np.invert(data).tobytes(), 16 * vectors)
        return result


@pytest.fixture
def bench_common(monkeypatch):
    cuda_stubs.install(monkeypatch)
    monkeypatch.syspath_prepend(str(REPO / "bench"))
    import bench_common

    yield bench_common
    sys.modules.pop("bench_common", None)


def copy_driver(bench_common, kind=CopyingDriver):
    params = [(0, 8), (8, 8), (16, 8)]
    return kind(capability=(9, 0), kernel_params={bench_common.PDL_COPY_SYMBOL: params})


@pytest.mark.parametrize("moved", [32, 5_400_000, 16 * 256 * 70_000])
def test_the_pdl_copy_launches_like_our_kernels(bench_common, moved):
    fake = copy_driver(bench_common)
    with installed(fake):
        copy = bench_common.same_bytes_copy_pdl(moved, torch.device("cpu"))
        copy()
    first, second = fake.launches
    vectors = -(-moved // 32)
    ctas = min(-(-vectors // 256), 65535)
    assert first.function.symbol == bench_common.PDL_COPY_SYMBOL
    assert first.grid == (ctas, 1, 1) and first.block == (256, 1, 1)
    assert first.shared_bytes == 0 and second.grid == first.grid
    pdl = [
        v for i, v in first.attributes if i == driver.LAUNCH_ATTR_PROGRAMMATIC_STREAM_SERIALIZATION
    ]
    assert len(pdl) == 1 and pdl[0].programmaticStreamSerializationAllowed == 1
    src, dst, _, _, _ = copy.keeps
    assert src.numel() * 4 == 16 * vectors  # half of the moved bytes, read
    assert [int.from_bytes(p, "little") for p in first.params] == [
        src.data_ptr(),
        dst.data_ptr(),
        vectors,
    ]
    assert torch.equal(dst, torch.bitwise_not(src))
    loads = [args for name, args in fake.calls if name == "cuLibraryLoadData"]
    assert loads == [(len(bench_common.PDL_COPY_PTX) + 1,)]


def test_a_copy_that_writes_nothing_is_refused(bench_common):
    with installed(copy_driver(bench_common, FakeDriver)):
        with pytest.raises(RuntimeError, match="wrote wrong bytes"):
            bench_common.same_bytes_copy_pdl(4096, torch.device("cpu"))


def test_the_pdl_copy_waits_before_it_reads(bench_common, tmp_path):
    """launch_dependents first, the wait before the first load (in the PTX and, where
    ptxas is installed, assembled for sm_90)."""
    ptx = bench_common.PDL_COPY_PTX
    assert ptx.index("griddepcontrol.launch_dependents") < ptx.index("griddepcontrol.wait")
    assert ptx.index("griddepcontrol.wait") < ptx.index("ld.global")
    ptxas = shutil.which("ptxas") or shutil.which("/usr/local/cuda/bin/ptxas")
    if ptxas is None:
        pytest.skip("ptxas is not installed")
    source = tmp_path / "copy.ptx"
    source.write_text(ptx)
    subprocess.run([ptxas, "-arch=sm_90", str(source), "-o", str(tmp_path / "copy.cubin")],
                   check=True, capture_output=True)  # fmt: skip
    assert (tmp_path / "copy.cubin").stat().st_size > 0


def test_the_copy_on_a_given_grid_and_shared_memory(bench_common):
    """ctas / shared_bytes / pdl=False (docs/h200/session33/boundary.py): the grid as
    given, the shared memory allowed and asked for, no PDL attribute; moved=0 copies
    nothing."""
    fake = copy_driver(bench_common)
    with installed(fake):
        copy = bench_common.same_bytes_copy_pdl(
            4096, torch.device("cpu"), ctas=7, shared_bytes=79104, pdl=False
        )
        empty = bench_common.same_bytes_copy_pdl(0, torch.device("cpu"), ctas=5)
    launch, empty_launch = fake.launches
    assert launch.grid == (7, 1, 1) and launch.shared_bytes == 79104
    assert launch.attributes == []
    assert ("cuFuncSetAttribute", (bench_common.PDL_COPY_SYMBOL,
            driver.FUNC_ATTR_MAX_DYNAMIC_SHARED_SIZE_BYTES, 79104)) in fake.calls  # fmt: skip
    src, dst, *_ = copy.keeps
    assert src.numel() * 4 == 4096 // 2 and torch.equal(dst, torch.bitwise_not(src))
    assert empty_launch.grid == (5, 1, 1) and empty_launch.shared_bytes == 0
    assert int.from_bytes(empty_launch.params[2], "little") == 0
    assert empty.keeps[0].numel() == 0
    set_attribute = [args for name, args in fake.calls if name == "cuFuncSetAttribute"]
    assert len(set_attribute) == 1  # none for the copy without shared memory
