"""A fake of ``cuda.bindings.driver`` for testing the runtime without a GPU.

Install it with ``nvfp4_aot.driver.use_backend(FakeDriver(...))``. Functions have the
bindings' names and return the same ``(CUresult, *values)`` tuples; struct and enum
types (``CUlaunchConfig``, ``CUdevice_attribute`` ...) come from the real bindings, which
work without a driver. Device memory is simulated with bytearrays, so tests can read
back what the runtime uploaded; every call is recorded in ``calls``.
"""

from __future__ import annotations

import ctypes
import dataclasses
import gc
import hashlib
import struct
from contextlib import contextmanager
from dataclasses import dataclass, field

from cuda.bindings import driver as real

from nvfp4_aot.intmath import round_up

SUCCESS = real.CUresult.CUDA_SUCCESS
NOT_READY = real.CUresult.CUDA_ERROR_NOT_READY
INVALID_VALUE = real.CUresult.CUDA_ERROR_INVALID_VALUE


@dataclass
class Launch:
    function: object
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int
    stream: int
    attributes: list[tuple[int, object]]
    params: list[bytes]  # bytes of every parameter, read through kernelParams


@dataclass
class FakeKernel:
    library: int
    symbol: str
    params: list[tuple[int, int]]
    ident: int = 0

    def __int__(self) -> int:  # the handle DirectFakeDriver's entry points receive
        return self.ident


@dataclass
class FakeGraph:
    """Work recorded by stream capture: ("copy", dst, src, size) and ("launch", Launch)
    entries, replayed (copies reading their host source then) by cuGraphLaunch."""

    ident: int
    work: list = field(default_factory=list)

    def __int__(self) -> int:
        return self.ident


@dataclass
class FakeEvent:
    ident: int
    recorded_on: list[int] = field(default_factory=list)
    ready: bool = True
    recorded_at: int = 0  # the driver's call count at the last record: a fake clock

    def __int__(self) -> int:
        return self.ident


class FakeDriver:
    """Parameters describe the one simulated device kind (all ordinals alike)."""

    def __init__(
        self,
        capability=(10, 0),
        sm_count: int = 132,
        smem_optin: int = 232448,
        devices: int = 1,
        kernel_params: dict[str, list[tuple[int, int]]] | None = None,
        report_param_info: bool = True,
    ):
        self.capability = capability
        self.attributes = {16: sm_count, 75: capability[0], 76: capability[1], 97: smem_optin}
        self.devices = devices
        # (cubin sha256, symbol) or symbol -> [(offset, size)] (support.kernel_params_of)
        self.kernel_params = dict(kernel_params or {})
        self.images: dict[int, str] = {}  # library handle -> sha256 of its cubin
        self.report_param_info = report_param_info
        self.calls: list[tuple[str, tuple]] = []
        self.memory: dict[int, bytearray] = {}
        self.host: dict[int, ctypes.Array] = {}
        self.launches: list[Launch] = []
        self.copies: list[tuple[int, bytes, int]] = []  # async copies: (dst, data, stream)
        self.events: list[FakeEvent] = []
        self.function_attributes: list[tuple[object, int, int]] = []
        self._kernels: list[FakeKernel] = []
        self.events_ready = True
        self.capture_mode = real.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_GLOBAL  # this thread's
        self.alloc_fill = 0  # the byte new device allocations hold (cuMemAlloc leaves garbage)
        self._next = 0x7F00_0000_0000
        self._handles = 0
        self._capturing: dict[int, FakeGraph] = {}  # stream -> the graph it records
        self.graph_execs: list[FakeGraph] = []

    def __getattr__(self, name):
        if name.startswith("CU"):  # types and enums
            return getattr(real, name)
        raise AttributeError(f"the fake driver has no {name}")

    def _record(self, name, *args):
        self.calls.append((name, args))

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]

    def _handle(self) -> int:
        self._handles += 1
        return self._handles

    # devices and contexts
    def cuInit(self, flags):
        self._record("cuInit", flags)
        return (SUCCESS,)

    def cuDeviceGetCount(self):
        return (SUCCESS, self.devices)

    def cuDeviceGet(self, ordinal):
        if not 0 <= ordinal < self.devices:
            return (real.CUresult.CUDA_ERROR_INVALID_DEVICE, None)
        return (SUCCESS, ordinal)

    def cuDeviceGetAttribute(self, attribute, device):
        return (SUCCESS, self.attributes.get(int(attribute), 0))

    def cuDeviceGetName(self, length, device):
        return (SUCCESS, b"Fake GPU\0")

    def cuDevicePrimaryCtxRetain(self, device):
        self._record("cuDevicePrimaryCtxRetain", device)
        return (SUCCESS, f"context{device}")

    def cuCtxSetCurrent(self, context):
        self._record("cuCtxSetCurrent", context)
        return (SUCCESS,)

    def cuGetErrorName(self, error):
        return (SUCCESS, real.CUresult(int(error)).name.encode())

    def cuGetErrorString(self, error):
        return (SUCCESS, b"fake error string")

    # memory
    def cuMemAlloc(self, size):
        self._record("cuMemAlloc", size)
        pointer = self._next
        self._next += round_up(size, 4096) + 4096
        self.memory[pointer] = bytearray([self.alloc_fill]) * size
        return (SUCCESS, pointer)

    def cuMemFree(self, pointer):
        self._record("cuMemFree", pointer)
        del self.memory[int(pointer)]
        return (SUCCESS,)

    def cuMemHostAlloc(self, size, flags):
        self._record("cuMemHostAlloc", size, flags)
        buffer = (ctypes.c_char * (size + 4096))()
        pointer = round_up(ctypes.addressof(buffer), 4096)
        self.host[pointer] = buffer
        return (SUCCESS, pointer)

    def cuMemFreeHost(self, pointer):
        self._record("cuMemFreeHost", pointer)
        del self.host[int(pointer)]
        return (SUCCESS,)

    def _write(self, dst, data: bytes):
        for base, memory in self.memory.items():
            if base <= dst and dst + len(data) <= base + len(memory):
                memory[dst - base : dst - base + len(data)] = data
                return
        raise AssertionError(f"copy to 0x{dst:x} + {len(data)} is outside every allocation")

    def read(self, address: int, size: int) -> bytes:
        for base, memory in self.memory.items():
            if base <= address and address + size <= base + len(memory):
                return bytes(memory[address - base : address - base + size])
        raise AssertionError(f"0x{address:x} + {size} is outside every allocation")

    def cuMemcpyHtoD(self, dst, src, size):
        self._record("cuMemcpyHtoD", dst, src, size)
        self._write(int(dst), ctypes.string_at(src, size))
        return (SUCCESS,)

    def cuMemcpyHtoDAsync(self, dst, src, size, stream):
        self._record("cuMemcpyHtoDAsync", dst, src, size, stream)
        if int(stream) in self._capturing:
            self._capturing[int(stream)].work.append(("copy", int(dst), int(src), size))
            return (SUCCESS,)
        data = ctypes.string_at(src, size)
        self.copies.append((int(dst), data, int(stream)))
        self._write(int(dst), data)
        return (SUCCESS,)

    def cuMemsetD8(self, dst, value, count):
        self._record("cuMemsetD8", dst, value, count)
        self._write(int(dst), bytes([value]) * count)
        return (SUCCESS,)

    def cuCtxSynchronize(self):
        self._record("cuCtxSynchronize")
        return (SUCCESS,)

    # events and streams
    def cuEventCreate(self, flags):
        self._record("cuEventCreate", flags)
        event = FakeEvent(self._handle())
        self.events.append(event)
        return (SUCCESS, event)

    def cuEventDestroy(self, event):
        self._record("cuEventDestroy", event.ident)
        return (SUCCESS,)

    def cuEventRecord(self, event, stream):
        self._record("cuEventRecord", event.ident, stream)
        event.recorded_on.append(int(stream))
        event.ready = self.events_ready
        event.recorded_at = len(self.calls)
        return (SUCCESS,)

    def cuEventElapsedTime(self, start, end):
        """A microsecond for every driver call between the two records."""
        return (SUCCESS, (end.recorded_at - start.recorded_at) * 1e-3)

    def cuEventQuery(self, event):
        self._record("cuEventQuery", event.ident)
        return (SUCCESS,) if event.ready else (NOT_READY,)

    def cuEventSynchronize(self, event):
        self._record("cuEventSynchronize", event.ident)
        event.ready = True
        return (SUCCESS,)

    def cuStreamIsCapturing(self, stream):
        # a query, not recorded: tests list the calls that do work
        capturing = int(stream) in getattr(self, "capturing_streams", ()) or (
            int(stream) in self._capturing
        )
        return (SUCCESS, 1 if capturing else 0)

    # stream capture and graphs: copies and launches on a capturing stream are recorded
    def cuStreamSynchronize(self, stream):
        self._record("cuStreamSynchronize", int(stream))
        capturing = self._capturing or getattr(self, "capturing_streams", ())
        # as the H200 showed: while a capture runs, a wait is refused unless this thread's
        # capture mode is relaxed (and never on the capturing stream itself)
        if int(stream) in capturing or (
            capturing
            and self.capture_mode != real.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED
        ):
            return (real.CUresult.CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,)
        return (SUCCESS,)

    def cuThreadExchangeStreamCaptureMode(self, mode):
        self._record("cuThreadExchangeStreamCaptureMode", mode)
        previous, self.capture_mode = self.capture_mode, mode
        return (SUCCESS, previous)

    def cuStreamCreate(self, flags):
        self._record("cuStreamCreate", flags)
        return (SUCCESS, 0x5000 + self._handle())

    def cuStreamDestroy(self, stream):
        self._record("cuStreamDestroy", int(stream))
        return (SUCCESS,)

    def cuStreamBeginCapture(self, stream, mode):
        self._record("cuStreamBeginCapture", int(stream))
        self._capturing[int(stream)] = FakeGraph(self._handle())
        return (SUCCESS,)

    def cuStreamEndCapture(self, stream):
        self._record("cuStreamEndCapture", int(stream))
        return (SUCCESS, self._capturing.pop(int(stream)))

    def cuGraphInstantiate(self, graph, flags):
        self._record("cuGraphInstantiate", graph.ident)
        executable = FakeGraph(self._handle(), list(graph.work))
        self.graph_execs.append(executable)
        return (SUCCESS, executable)

    def cuGraphLaunch(self, executable, stream):
        self._record("cuGraphLaunch", executable.ident, int(stream))
        for kind, *entry in executable.work:
            if kind == "copy":
                dst, src, size = entry
                data = ctypes.string_at(src, size)
                self.copies.append((dst, data, int(stream)))
                self._write(dst, data)
            else:
                self.launches.append(dataclasses.replace(entry[0], stream=int(stream)))
        return (SUCCESS,)

    def cuGraphExecDestroy(self, executable):
        self._record("cuGraphExecDestroy", executable.ident)
        return (SUCCESS,)

    def cuGraphDestroy(self, graph):
        self._record("cuGraphDestroy", graph.ident)
        return (SUCCESS,)

    def cuStreamWaitEvent(self, stream, event, flags):
        self._record("cuStreamWaitEvent", stream, event.ident)
        return (SUCCESS,)

    # libraries and launches
    def cuLibraryLoadData(self, image, *options):
        self._record("cuLibraryLoadData", len(image))
        handle = self._handle()
        self.images[handle] = hashlib.sha256(image).hexdigest()
        return (SUCCESS, handle)

    def cuLibraryUnload(self, library):
        self._record("cuLibraryUnload", library)
        return (SUCCESS,)

    def cuLibraryGetKernel(self, library, name):
        symbol = name.decode()
        self._record("cuLibraryGetKernel", library, symbol)
        # variants of one kernel (epilogues) share a symbol: their cubins tell them apart
        params = self.kernel_params.get((self.images.get(library), symbol))
        if params is None:
            params = self.kernel_params.get(symbol)
        if params is None:
            return (real.CUresult.CUDA_ERROR_NOT_FOUND, None)
        kernel = FakeKernel(library, symbol, params, self._handle())
        self._kernels.append(kernel)
        return (SUCCESS, kernel)

    def cuKernelGetFunction(self, kernel):
        self._record("cuKernelGetFunction", kernel.symbol)
        return (SUCCESS, kernel)

    def cuFuncGetParamInfo(self, function, index):
        if not self.report_param_info:
            return (real.CUresult.CUDA_ERROR_NOT_SUPPORTED, 0, 0)
        if index >= len(function.params):
            return (INVALID_VALUE, 0, 0)
        return (SUCCESS, *function.params[index])

    def cuFuncSetAttribute(self, function, attribute, value):
        self._record("cuFuncSetAttribute", function.symbol, int(attribute), value)
        self.function_attributes.append((function.symbol, int(attribute), value))
        return (SUCCESS,)

    def cuLaunchKernelEx(self, config, function, kernel_params, extra):
        self._record("cuLaunchKernelEx", function.symbol)
        pointers = (ctypes.c_void_p * len(function.params)).from_address(kernel_params)
        params = [ctypes.string_at(p, size) for p, (_off, size) in zip(pointers, function.params)]
        attributes = [(int(a.id), a.value) for a in config.attrs[: config.numAttrs]]
        launch = Launch(
            function,
            (config.gridDimX, config.gridDimY, config.gridDimZ),
            (config.blockDimX, config.blockDimY, config.blockDimZ),
            config.sharedMemBytes,
            int(config.hStream),
            attributes,
            params,
        )
        if int(config.hStream) in self._capturing:
            self._capturing[int(config.hStream)].work.append(("launch", launch))
        else:
            self.launches.append(launch)
        return (SUCCESS,)


class DirectFakeDriver(FakeDriver):
    """A FakeDriver that also hands out C entry points through ``cuGetProcAddress``, so
    that the runtime's direct calls (``driver.DirectCalls``) run against it.

    The entry points are ctypes callbacks into the same simulation; handles arrive as
    ints (contexts are ints here, events and kernels convert with ``int()``). A launch
    reads its ``CUlaunchConfig`` from memory, so its attributes are recorded as
    ``(id, 64 value bytes)``. ``entry_calls`` lists the entry points called; ``fail``
    maps an entry-point name to a CUresult it returns instead.
    """

    _ARGUMENTS = {  # entry point: argument count (all pointer-sized, as the runtime declares)
        "cuCtxSetCurrent": 1,
        "cuMemcpyHtoDAsync": 4,
        "cuLaunchKernelEx": 4,
        "cuEventRecord": 2,
        "cuEventQuery": 1,
        "cuEventSynchronize": 1,
        "cuStreamWaitEvent": 3,
        "cuStreamIsCapturing": 2,
        "cuGraphLaunch": 2,
    }

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fail: dict[str, int] = {}
        self.entry_calls: list[str] = []  # entry points called, in order
        self._entry_points = {}  # keeps the callbacks alive

    def cuDevicePrimaryCtxRetain(self, device):
        self._record("cuDevicePrimaryCtxRetain", device)
        return (SUCCESS, 0xC000 + device)

    def cuGetProcAddress(self, symbol, version, flags):
        name = symbol.decode()
        if name not in self._entry_points:
            implementation = getattr(self, "_direct_" + name)

            def entry(*args, name=name, implementation=implementation):
                self.entry_calls.append(name)
                return self.fail.get(name) or implementation(*(a or 0 for a in args))

            prototype = ctypes.CFUNCTYPE(ctypes.c_int, *[ctypes.c_void_p] * self._ARGUMENTS[name])
            self._entry_points[name] = prototype(entry)
        address = ctypes.cast(self._entry_points[name], ctypes.c_void_p).value
        return (SUCCESS, address, 0)

    def _event(self, handle: int) -> FakeEvent:
        return next(e for e in self.events if e.ident == handle)

    def _direct_cuCtxSetCurrent(self, context):
        return int(self.cuCtxSetCurrent(context)[0])

    def _direct_cuMemcpyHtoDAsync(self, dst, src, size, stream):
        return int(self.cuMemcpyHtoDAsync(dst, src, size, stream)[0])

    def _direct_cuEventRecord(self, event, stream):
        return int(self.cuEventRecord(self._event(event), stream)[0])

    def _direct_cuEventQuery(self, event):
        return int(self.cuEventQuery(self._event(event))[0])

    def _direct_cuEventSynchronize(self, event):
        return int(self.cuEventSynchronize(self._event(event))[0])

    def _direct_cuStreamWaitEvent(self, stream, event, flags):
        return int(self.cuStreamWaitEvent(stream, self._event(event), flags)[0])

    def _direct_cuStreamIsCapturing(self, stream, status):
        ctypes.c_int.from_address(status).value = self.cuStreamIsCapturing(stream)[1]
        return 0

    def _direct_cuLaunchKernelEx(self, config, function, params, extra):
        """Reads the CUlaunchConfig struct at ``config`` as the driver would."""
        kernel = next(k for k in self._kernels if k.ident == function)
        self._record("cuLaunchKernelEx", kernel.symbol)
        raw = ctypes.string_at(config, 56)
        *dims, shared, stream, attrs, count = struct.unpack("<7I4xQQI4x", raw)
        attributes = []
        for i in range(count):  # CUlaunchAttribute: id, 4 bytes padding, 64-byte value
            entry = ctypes.string_at(attrs + 72 * i, 72)
            attributes.append((struct.unpack_from("<I", entry)[0], entry[8:72]))
        pointers = (ctypes.c_void_p * len(kernel.params)).from_address(params)
        values = [ctypes.string_at(p, size) for p, (_off, size) in zip(pointers, kernel.params)]
        launch = Launch(
            kernel, tuple(dims[:3]), tuple(dims[3:6]), shared, stream, attributes, values
        )
        if stream in self._capturing:
            self._capturing[stream].work.append(("launch", launch))
        else:
            self.launches.append(launch)
        return 0

    def _direct_cuGraphLaunch(self, executable, stream):
        graph = next(g for g in self.graph_execs if g.ident == executable)
        return int(self.cuGraphLaunch(graph, stream)[0])


@contextmanager
def installed(fake):
    """``fake`` as the runtime's driver, with the runtime's caches cleared on the way in
    and out; the previous driver is restored afterwards."""
    from nvfp4_aot import driver, loader, plan

    loader.clear_caches()
    plan.clear_plan_cache()
    previous = driver.use_backend(fake)
    try:
        yield fake
    finally:
        plan.clear_plan_cache()
        gc.collect()  # finalise dropped plans while their fake is still installed
        driver.use_backend(previous)
        loader.clear_caches()
