"""Multi-GPU (issue 7) without a GPU: the runtime against a faked machine of two devices.

``TwoGpuDriver`` extends tests/fake_driver.py with what a second device changes: device
attributes per ordinal, one primary context per device, the context current on each host
thread (as CUDA keeps it) and, for every call that depends on it, which context was
current. Functions are per context as ``cuKernelGetFunction`` makes them, so a launch
can be checked against the context it was meant for.
"""

from __future__ import annotations

import json
import struct
import threading
from contextlib import ExitStack
from dataclasses import dataclass

import pytest
from click.testing import CliRunner

from fake_driver import SUCCESS, FakeDriver, FakeKernel, installed
from nvfp4_aot import cli, loader, plan
from nvfp4_aot.errors import InvalidProblemError, UnsupportedDeviceError
from support import DLPackArray, FakeArray, kernel_params_of, operands_for

M, N, K = 96, 128, 256


@dataclass
class FakeFunction(FakeKernel):
    """A kernel's function in one context (``cuKernelGetFunction`` in that context)."""

    context: str = ""


class TwoGpuDriver(FakeDriver):
    """Two (or more) fake GPUs; ``capabilities`` gives each one's compute capability."""

    def __init__(self, capabilities=((10, 0), (10, 0)), **kwargs):
        super().__init__(capability=capabilities[0], devices=len(capabilities), **kwargs)
        self.per_device = [
            {**self.attributes, 75: major, 76: minor} for major, minor in capabilities
        ]
        self._current = threading.local()
        self._mutex = threading.RLock()  # the base fake's bookkeeping is not thread-safe
        # (operation, context current at the call, detail) for every context-bound call
        self.log: list[tuple[str, str | None, object]] = []
        self.library_context: dict[int, str | None] = {}
        self.allocation_context: dict[int, str | None] = {}

    def current(self) -> str | None:
        return getattr(self._current, "context", None)

    def _log(self, operation, detail=None):
        self.log.append((operation, self.current(), detail))

    def of(self, operation) -> list[tuple[str | None, object]]:
        return [(ctx, detail) for op, ctx, detail in self.log if op == operation]

    # devices and contexts
    def cuDeviceGetAttribute(self, attribute, device):
        return (SUCCESS, self.per_device[int(device)].get(int(attribute), 0))

    def cuDeviceGetName(self, length, device):
        return (SUCCESS, f"Fake GPU {int(device)}\0".encode())

    def cuDevicePrimaryCtxRetain(self, device):
        with self._mutex:
            return super().cuDevicePrimaryCtxRetain(device)

    def cuCtxSetCurrent(self, context):
        with self._mutex:
            super().cuCtxSetCurrent(context)
        self._current.context = context
        return (SUCCESS,)

    # memory and events: record the context
    def cuMemAlloc(self, size):
        with self._mutex:
            result = super().cuMemAlloc(size)
            self.allocation_context[result[1]] = self.current()
            self._log("cuMemAlloc", result[1])
            return result

    def cuMemFree(self, pointer):
        with self._mutex:
            self._log("cuMemFree", int(pointer))
            return super().cuMemFree(pointer)

    def cuMemHostAlloc(self, size, flags):
        with self._mutex:
            return super().cuMemHostAlloc(size, flags)

    def cuMemFreeHost(self, pointer):
        with self._mutex:
            return super().cuMemFreeHost(pointer)

    def cuMemcpyHtoD(self, dst, src, size):
        with self._mutex:
            self._log("cuMemcpyHtoD", int(dst))
            return super().cuMemcpyHtoD(dst, src, size)

    def cuMemcpyHtoDAsync(self, dst, src, size, stream):
        with self._mutex:
            self._log("cuMemcpyHtoDAsync", int(dst))
            return super().cuMemcpyHtoDAsync(dst, src, size, stream)

    def cuEventCreate(self, flags):
        with self._mutex:
            result = super().cuEventCreate(flags)
            result[1].context = self.current()
            self._log("cuEventCreate", result[1].ident)
            return result

    def cuEventDestroy(self, event):
        with self._mutex:
            return super().cuEventDestroy(event)

    def cuEventRecord(self, event, stream):
        with self._mutex:
            self._log("cuEventRecord", event.context)
            return super().cuEventRecord(event, stream)

    def cuEventQuery(self, event):
        with self._mutex:
            return super().cuEventQuery(event)

    def cuEventSynchronize(self, event):
        with self._mutex:
            return super().cuEventSynchronize(event)

    def cuStreamWaitEvent(self, stream, event, flags):
        with self._mutex:
            return super().cuStreamWaitEvent(stream, event, flags)

    # libraries, functions, launches
    def cuLibraryLoadData(self, image, *options):
        with self._mutex:
            result = super().cuLibraryLoadData(image, *options)
            self.library_context[result[1]] = self.current()
            self._log("cuLibraryLoadData", result[1])
            return result

    def cuLibraryGetKernel(self, library, name):
        with self._mutex:
            return super().cuLibraryGetKernel(library, name)

    def cuKernelGetFunction(self, kernel):
        with self._mutex:
            super().cuKernelGetFunction(kernel)
            self._log("cuKernelGetFunction", kernel.symbol)
            return (SUCCESS, FakeFunction(kernel.library, kernel.symbol, kernel.params,
                                          kernel.ident, self.current()))  # fmt: skip

    def cuFuncSetAttribute(self, function, attribute, value):
        with self._mutex:
            self._log("cuFuncSetAttribute", function.context)
            return super().cuFuncSetAttribute(function, attribute, value)

    def cuLaunchKernelEx(self, config, function, kernel_params, extra):
        with self._mutex:
            result = super().cuLaunchKernelEx(config, function, kernel_params, extra)
            # (function's context, its library's context, workspace pointer)
            buffer = bytearray(max(o + s for o, s in function.params))
            for (offset, size), data in zip(function.params, self.launches[-1].params):
                buffer[offset : offset + size] = data
            workspace = struct.unpack_from("<Q", buffer, WORKSPACE_PARAM_OFFSET)[0]
            detail = (function.context, self.library_context[function.library], workspace)
            self._log("cuLaunchKernelEx", detail)
            return result


# byte offset of the tensormap_workspace slot in the synthetic kernel parameters
WORKSPACE_PARAM_OFFSET = 800


@pytest.fixture
def two_gpus(artifacts):
    """Install a TwoGpuDriver (arguments as given) for the test; restore afterwards
    (``artifacts``: the synthetic artifacts of conftest.py)."""
    manifest = loader.load_manifest(artifacts)
    params = kernel_params_of(manifest)
    for variant in manifest.variants:
        assert variant.slots_for("tensormap_workspace")[0][0] == WORKSPACE_PARAM_OFFSET

    with ExitStack() as stack:

        def make(**kwargs) -> TwoGpuDriver:
            return stack.enter_context(installed(TwoGpuDriver(kernel_params=params, **kwargs)))

        yield make


def ctx(device: int) -> str:
    return f"context{device}"


def plan_range(p: plan.GroupedGemmPlan) -> range:
    base = p._launcher._resources.device_ptr
    return range(base, base + p.device_bytes)


def check_launches_on_their_context(fake: TwoGpuDriver) -> list[tuple]:
    launches = fake.of("cuLaunchKernelEx")
    for current, (function_ctx, library_ctx, _workspace) in launches:
        assert current == function_ctx == library_ctx, (current, function_ctx, library_ctx)
    return launches


# ---------------------------------------------------------------------------------------
# 1. one plan per device


def test_each_device_loads_its_library_once_in_its_own_context(two_gpus, artifacts):
    fake = two_gpus()
    p0 = plan.GroupedGemmPlan([(M, N, K)], device=0, artifacts=artifacts)
    p1 = plan.GroupedGemmPlan([(M, N, K)], device=1, artifacts=artifacts)
    q0 = plan.GroupedGemmPlan([(128, 256, 512)], device=0, artifacts=artifacts)
    q1 = plan.GroupedGemmPlan([(128, 256, 512)], device=1, artifacts=artifacts)
    try:
        assert p0.variants == p1.variants  # same variant ...
        loads = fake.of("cuLibraryLoadData")
        assert [c for c, _lib in loads] == [ctx(0), ctx(1)]  # ... loaded once per device
        # the cache keeps the devices apart: (dir, device, variant) -> its own library
        name = p0.variants[0].name
        directory = loader.resolve_dir(artifacts)
        k0 = loader._kernels[(directory, 0, name)]
        k1 = loader._kernels[(directory, 1, name)]
        assert (k0.device, k1.device) == (0, 1)
        assert fake.library_context[k0.library] == ctx(0)
        assert fake.library_context[k1.library] == ctx(1)
        assert k0.function.context == ctx(0) and k1.function.context == ctx(1)
        assert p0._launcher._kernels[0] is k0 is q0._launcher._kernels[0]
        assert p1._launcher._kernels[0] is k1 is q1._launcher._kernels[0]
        # the function attributes were set on each context's function in that context
        assert {(c, f) for c, f in fake.of("cuFuncSetAttribute")} == {
            (ctx(0), ctx(0)), (ctx(1), ctx(1))}  # fmt: skip
        # every plan allocated with its own device's context current
        for p in (p0, p1, q0, q1):
            assert fake.allocation_context[p._launcher._resources.device_ptr] == ctx(p.device)
            events = {
                e.ident for e in p._launcher._resources.events + [p._launcher._resources.sync_event]
            }
            created = {d: c for c, d in fake.of("cuEventCreate")}
            assert {created[e] for e in events} == {ctx(p.device)}
            static_copies = [c for c, dst in fake.of("cuMemcpyHtoD") if dst in plan_range(p)]
            assert static_copies and set(static_copies) == {ctx(p.device)}
    finally:
        for p in (p0, p1, q0, q1):
            p.close()
    # each plan's memory was freed with its own device current
    frees = dict((dst, c) for c, dst in fake.of("cuMemFree"))
    for p in (p0, p1, q0, q1):
        assert p._launcher._resources.device_ptr == 0
    assert sorted(frees.values()) == [ctx(0), ctx(0), ctx(1), ctx(1)]
    assert all(frees[ptr] == fake.allocation_context[ptr] for ptr in frees)


def test_variant_per_device_capability(two_gpus, artifacts):
    fake = two_gpus(capabilities=((10, 0), (9, 0)))
    with (
        plan.GroupedGemmPlan([(M, N, K)], device=0, artifacts=artifacts) as p0,
        plan.GroupedGemmPlan([(M, N, K)], device=1, artifacts=artifacts) as p1,
    ):
        assert [v.arch for v in p0.variants] == ["sm_100a"]
        assert [v.arch for v in p1.variants] == ["sm_90a"]
        p0.run(*operands_for([(M, N, K)]))
        p1.run(*operands_for([(M, N, K)], base=0x20_0000_0000))
    assert [c for c, _ in fake.of("cuLibraryLoadData")] == [ctx(0), ctx(1)]
    assert [c for c, _ in check_launches_on_their_context(fake)] == [ctx(0), ctx(1)]


def test_alternating_plans_on_one_thread_launch_on_their_device(two_gpus, artifacts):
    fake = two_gpus()
    sizes = [(M, N, K), (128, 256, 512)]
    with (
        plan.GroupedGemmPlan(sizes, device=0, artifacts=artifacts, ring_slots=3) as p0,
        plan.GroupedGemmPlan(sizes, device=1, artifacts=artifacts, ring_slots=3) as p1,
    ):
        inputs = {0: operands_for(sizes), 1: operands_for(sizes, base=0x20_0000_0000)}
        order = [0, 1, 1, 0, 1, 0, 0, 1] * 3
        for i, device in enumerate(order):
            (p0, p1)[device].run(*inputs[device], stream=[0, 5, 7][i % 3])
        launches = check_launches_on_their_context(fake)
        assert [c for c, _ in launches] == [ctx(d) for d in order]
        # each launch uses its own plan's workspace, and so does every copy and event
        for (_current, (_f, _l, workspace)), device in zip(launches, order):
            assert workspace in plan_range((p0, p1)[device])
        for current, dst in fake.of("cuMemcpyHtoDAsync"):
            owner = 0 if dst in plan_range(p0) else 1
            assert dst in plan_range((p0, p1)[owner]) and current == ctx(owner)
        for current, event_ctx in fake.of("cuEventRecord"):
            assert current == event_ctx


def test_graph_capture_of_a_device_1_plan_after_a_device_0_run(two_gpus, artifacts):
    fake = two_gpus()
    with (
        plan.GroupedGemmPlan([(M, N, K)], device=0, artifacts=artifacts) as p0,
        plan.GroupedGemmPlan([(M, N, K)], device=1, artifacts=artifacts) as p1,
    ):
        p1.run(*operands_for([(M, N, K)], base=0x20_0000_0000), stream=11)
        p0.run(*operands_for([(M, N, K)]), stream=3)  # leaves context 0 current
        fake.capturing_streams = {11}
        p1.run(*operands_for([(M, N, K)], base=0x30_0000_0000), stream=11)
        launches = check_launches_on_their_context(fake)
        assert [c for c, _ in launches] == [ctx(1), ctx(0), ctx(1)]
        assert fake.of("cuMemcpyHtoDAsync")[-1][0] == ctx(1)


# ---------------------------------------------------------------------------------------
# 2. operands of another device


def _dlpack(pointer, shape, device_id):
    return DLPackArray(pointer, shape, (1, 8, 1), device=(2, device_id))


@pytest.mark.parametrize("field", ["a", "b", "c", "sfa", "sfb"])
@pytest.mark.parametrize("kind", ["cuda_array_interface", "dlpack"])
def test_operand_on_the_other_device_is_refused(two_gpus, artifacts, field, kind):
    fake = two_gpus()
    sizes = [(M, N, K), (M, N, K)]
    with plan.GroupedGemmPlan(sizes, device=0, artifacts=artifacts) as p0:
        columns = operands_for(sizes)
        f = ("a", "b", "c", "sfa", "sfb").index(field)
        good = columns[f][1].__cuda_array_interface__
        pointer, shape, typestr = good["data"][0], good["shape"], good["typestr"]
        if kind == "dlpack":
            dtype = (2, 16, 1) if typestr == "<f2" else (1, 8, 1)  # float16 / uint8
            columns[f][1] = DLPackArray(pointer, shape, dtype, device=(2, 1))
        else:
            columns[f][1] = FakeArray(pointer, shape, typestr, device=1)
        with pytest.raises(
            InvalidProblemError,
            match=rf"^group 1: {field} is on device 1, the plan runs on device 0; "
            r"create the plan with device=1 or move the data$",
        ):
            p0.run(*columns, stream=4)
        assert not fake.launches
        assert "cuMemcpyHtoDAsync" not in fake.names()
        # the same operands on device 0 are accepted
        columns[f][1] = FakeArray(pointer, shape, typestr, device=0)
        p0.run(*columns, stream=4)
        assert len(fake.launches) == 1


def test_device_1_plan_refuses_device_0_operands_and_accepts_its_own(two_gpus, artifacts):
    fake = two_gpus()
    with plan.GroupedGemmPlan([(M, N, K)], device=1, artifacts=artifacts) as p1:
        columns = operands_for([(M, N, K)])
        columns[0][0] = _dlpack(0x10_0000_0000, (M, K // 2), 0)
        with pytest.raises(InvalidProblemError, match=r"group 0: a is on device 0, the plan runs on device 1"):  # fmt: skip
            p1.run(*columns)
        assert not fake.launches
        columns[0][0] = _dlpack(0x10_0000_0000, (M, K // 2), 1)
        p1.run(*columns)
        assert [c for c, _ in check_launches_on_their_context(fake)] == [ctx(1)]


# ---------------------------------------------------------------------------------------
# 3. one thread per device, concurrently


def test_two_threads_drive_their_devices_concurrently(two_gpus, artifacts):
    fake = two_gpus()
    runs = 200
    sizes = [(M, N, K), (128, 256, 512), (256, 128, 256)]
    plans: dict[int, plan.GroupedGemmPlan] = {}
    errors: list[BaseException] = []
    barrier = threading.Barrier(2)

    def worker(device: int) -> None:
        try:
            p = plan.GroupedGemmPlan(sizes, device=device, artifacts=artifacts, ring_slots=4)
            plans[device] = p
            inputs = [operands_for(sizes, base=(1 + 3 * device + i) << 40) for i in range(3)]
            barrier.wait()
            for i in range(runs):
                p.run(*inputs[i % 3], stream=100 + device)
            p.synchronize()
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=worker, args=(d,)) for d in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    try:
        launches = check_launches_on_their_context(fake)
        assert len(launches) == 2 * runs
        per_device = {0: 0, 1: 0}
        for current, (_f, _l, workspace) in launches:
            device = 0 if current == ctx(0) else 1
            per_device[device] += 1
            assert workspace in plan_range(plans[device])
        assert per_device == {0: runs, 1: runs}
        # no shared device memory (workspaces included) between the two plans
        r0, r1 = plan_range(plans[0]), plan_range(plans[1])
        assert r0.stop <= r1.start or r1.stop <= r0.start
        w0 = {inp["tensormap_workspace"] for s in range(5) for inp in plans[0].kernel_inputs(s)}
        w1 = {inp["tensormap_workspace"] for s in range(5) for inp in plans[1].kernel_inputs(s)}
        assert not w0 & w1 and w0 <= set(r0) and w1 <= set(r1)
        for p in plans.values():
            assert fake.allocation_context[p._launcher._resources.device_ptr] == ctx(p.device)
        for current, dst in fake.of("cuMemcpyHtoDAsync"):
            assert dst in plan_range(plans[0 if current == ctx(0) else 1])
        for current, event_ctx in fake.of("cuEventRecord"):
            assert current == event_ctx
        # each thread's stream only ever saw its own device's launches
        streams = {(launch.stream, launch.function.context) for launch in fake.launches}
        assert streams == {(100, ctx(0)), (101, ctx(1))}
    finally:
        for p in plans.values():
            p.close()


# ---------------------------------------------------------------------------------------
# 4. the command line


def invoke(*args):
    return CliRunner().invoke(cli.main, list(args), catch_exceptions=False)


def test_info_lists_both_gpus_and_their_variants(two_gpus, artifacts):
    two_gpus(capabilities=((10, 0), (9, 0)))
    data = json.loads(invoke("info", "--json", "--artifacts", str(artifacts)).stdout)
    gpus = data["gpus"]
    assert [(g["ordinal"], g["name"], g["compute_capability"]) for g in gpus] == [
        (0, "Fake GPU 0", [10, 0]), (1, "Fake GPU 1", [9, 0])]  # fmt: skip
    assert gpus[0]["variants"] == [
        "sm100_nvfp4_grouped_gemm.sm_100a.g8", "sm100_nvfp4_grouped_gemm.sm_100a.g120"]  # fmt: skip
    assert gpus[1]["variants"] == [
        "sm90_nvfp4_grouped_gemm.sm_90a.g8", "sm90_nvfp4_grouped_gemm.sm_90a.g120"]  # fmt: skip
    table = invoke("info", "--artifacts", str(artifacts))
    assert table.exit_code == 0, table.output
    assert ": 2 GPU(s)" in table.output
    assert "[0] Fake GPU 0: compute capability 10.0" in table.output
    assert "[1] Fake GPU 1: compute capability 9.0" in table.output
    assert "runs sm100_nvfp4_grouped_gemm.sm_100a.g8" in table.output
    assert "runs sm90_nvfp4_grouped_gemm.sm_90a.g8" in table.output


def test_info_says_which_gpu_has_no_variant(two_gpus, artifacts):
    two_gpus(capabilities=((10, 0), (8, 0)))
    data = json.loads(invoke("info", "--json", "--artifacts", str(artifacts)).stdout)
    assert data["gpus"][0]["variants"] and data["gpus"][0]["reason"] is None
    assert data["gpus"][1]["variants"] == []
    assert "compute capability 8.0" in data["gpus"][1]["reason"]


def test_verify_on_a_device_1_without_baked_arch_fails_cleanly(two_gpus, artifacts):
    fake = two_gpus(capabilities=((10, 0), (8, 0)))
    result = invoke(
        "verify", "--device", "1", "--shape", "128,256,512", "--artifacts", str(artifacts)
    )
    assert result.exit_code == 1
    assert "Traceback" not in result.output
    assert (
        "Error: device 1: no baked kernel runs on a device of compute capability 8.0; "
        "the artifacts hold" in result.output
    )
    assert "cuLibraryLoadData" not in fake.names() and not fake.launches
    # the unsupported device names itself in the runtime's exception too
    with pytest.raises(UnsupportedDeviceError, match=r"^device 1: no baked kernel runs on a"):
        plan.GroupedGemmPlan([(M, N, K)], device=1, artifacts=artifacts)
    # device 0 of the same machine still works
    with plan.GroupedGemmPlan([(M, N, K)], device=0, artifacts=artifacts) as p0:
        p0.run(*operands_for([(M, N, K)]))
    assert [c for c, _ in check_launches_on_their_context(fake)] == [ctx(0)]


def test_verify_device_2_of_two_does_not_exist(two_gpus, artifacts):
    two_gpus()
    result = invoke("verify", "--device", "2", "--shape", "128,256,512")
    assert result.exit_code == 1
    assert "--device 2 does not exist; this machine has 2 GPU(s) (0..1)" in result.output
