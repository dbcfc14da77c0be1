"""The driver wrapper (nvfp4_aot.driver): errors that name the operation, a missing
driver library, and the direct C entry points (``driver.DirectCalls``) launching exactly
what the bindings launch."""

from __future__ import annotations

import struct

import pytest

from fake_driver import DirectFakeDriver, FakeDriver, installed
from nvfp4_aot import driver, plan
from nvfp4_aot.errors import CudaError
from support import (
    kernel_params_of,
    operands_for,
)


def test_driver_errors_carry_operation_and_name():
    class Failing:
        def cuMemAlloc(self, size):
            from cuda.bindings import driver as real

            return (real.CUresult.CUDA_ERROR_OUT_OF_MEMORY, 0)

        def cuGetErrorString(self, error):
            return (0, b"out of memory")

    previous = driver.use_backend(Failing())
    try:
        with pytest.raises(
            CudaError, match=r"cuMemAlloc failed with CUDA_ERROR_OUT_OF_MEMORY: out of memory"
        ):
            driver.mem_alloc(1 << 40)
    finally:
        driver.use_backend(previous)


def test_missing_driver_library_is_a_clean_error():
    class NoLibrary:
        def cuInit(self, flags):
            raise RuntimeError("libcuda.so.1 not found")

    previous = driver.use_backend(NoLibrary())
    try:
        with pytest.raises(
            CudaError, match=r"cuInit failed with CUDA_ERROR_NO_DEVICE: the NVIDIA driver"
        ):
            driver.init()
    finally:
        driver.use_backend(previous)


def run_with(fake_class, manifest, artifacts, sizes, runs, **fake_kwargs):
    """Install a fake of ``fake_class``, run a plan on ``runs`` operand sets (stream 5)."""
    with installed(fake_class(kernel_params=kernel_params_of(manifest), **fake_kwargs)) as fake:
        with plan.GroupedGemmPlan(sizes, artifacts=artifacts, ring_slots=2) as p:
            for ops in runs:
                p.run(*ops, stream=5)
            calls = type(p._launcher._calls).__name__
    return fake, calls


def test_direct_calls_launch_exactly_what_the_bindings_launch(manifest, artifacts):
    sizes = [(128, 256, 512), (64, 512, 256), (200, 128, 1024)]
    runs = [operands_for(sizes, base=0x10_0000_0000 * (i % 3 + 1)) for i in range(5)]
    bindings, bindings_calls = run_with(FakeDriver, manifest, artifacts, sizes, runs)
    direct, direct_calls = run_with(DirectFakeDriver, manifest, artifacts, sizes, runs)
    assert (bindings_calls, direct_calls) == ("BindingsCalls", "DirectCalls")
    assert direct.entry_calls.count("cuLaunchKernelEx") == 5  # through the entry points
    assert direct.entry_calls.count("cuMemcpyHtoDAsync") == 5
    assert len(bindings.launches) == len(direct.launches) == 5
    for ex, plain in zip(bindings.launches, direct.launches):
        assert (ex.grid, ex.block, ex.shared_bytes, ex.stream, ex.params) == (
            plain.grid, plain.block, plain.shared_bytes, plain.stream, plain.params)  # fmt: skip
    assert bindings.copies == direct.copies  # same slots, same tables, same stream
    records = [args for name, args in direct.calls if name == "cuEventRecord"]
    assert records == [args for name, args in bindings.calls if name == "cuEventRecord"]
    assert len(records) == 5


def test_direct_call_failure_names_the_operation(manifest, artifacts):
    with installed(DirectFakeDriver(kernel_params=kernel_params_of(manifest))) as fake:
        sizes = [(128, 256, 512)]
        with plan.GroupedGemmPlan(sizes, artifacts=artifacts) as p:
            fake.fail["cuLaunchKernelEx"] = 1  # CUDA_ERROR_INVALID_VALUE
            with pytest.raises(CudaError, match="cuLaunchKernelEx.*CUDA_ERROR_INVALID_VALUE"):
                p.run(*operands_for(sizes), stream=5)
            # the table copy was queued: the slot's event still covers it
            assert fake.entry_calls[-3:] == ["cuMemcpyHtoDAsync", "cuLaunchKernelEx",
                                             "cuEventRecord"]  # fmt: skip
            assert p._launcher._slot_seq[0] == p._launcher._seq == 1
            fake.fail["cuLaunchKernelEx"] = 9999  # a code the bindings do not know
            with pytest.raises(CudaError, match="cuLaunchKernelEx.*CUresult 9999"):
                p.run(*operands_for(sizes), stream=5)
            del fake.fail["cuLaunchKernelEx"]
            fake.capturing_streams = {9}  # capture is seen through the direct query too
            records = fake.names().count("cuEventRecord")
            p.run(*operands_for(sizes), stream=9)
            assert fake.copies[-1][0] == p.kernel_inputs(p.graph_slot)[0]["abc_pointers"]
            assert fake.names().count("cuEventRecord") == records  # no ring event captured


def test_direct_launch_passes_the_bindings_launch_config(manifest, artifacts):
    """The direct launch hands the driver the CUlaunchConfig the bindings built: grid,
    block, shared memory, stream and every launch attribute arrive as in the manifest."""
    sizes = [(128, 256, 512)]
    direct, _calls = run_with(DirectFakeDriver, manifest, artifacts, sizes,
                              [operands_for(sizes)])  # fmt: skip
    (launch,) = direct.launches
    variant = next(v for v in manifest.variants if v.kernel_symbol == launch.function.symbol)
    assert launch.stream == 5 and launch.block == variant.block
    assert launch.shared_bytes == variant.dynamic_smem_bytes
    expected = {a.id: a.values for a in variant.launch_attributes}
    assert [i for i, _value in launch.attributes] == list(expected)
    for attr_id, value in launch.attributes:
        words = struct.unpack_from(f"<{len(expected[attr_id])}I", value)
        assert words == tuple(expected[attr_id])
