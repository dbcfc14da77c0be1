"""The one place that talks to the CUDA driver (``cuda.bindings.driver``).

Every call goes through :func:`call`, which turns a failed ``CUresult`` into
:class:`~nvfp4_aot.errors.CudaError` naming the operation, the result name and the
driver's explanation. The bindings module is looked up through a swappable backend
(:func:`use_backend`), so that tests can run the whole runtime against a fake driver
on a machine without a GPU; the bindings are imported on first use only, which keeps
``import nvfp4_aot`` free of CUDA.

The functions here are thin: they take and return plain Python ints for device
pointers, handles of streams and events stay whatever the backend returns.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Sequence
from contextlib import contextmanager

from .errors import CudaError

_backend = None
_lock = threading.RLock()  # reentrant: a plan finalised by GC inside a locked call
_initialized = False
_contexts: dict[int, object] = {}

CU_EVENT_DISABLE_TIMING = 0x2
CU_MEMHOSTALLOC_PORTABLE = 0x1
CU_STREAM_LEGACY = 0x1
CU_STREAM_NON_BLOCKING = 0x1
_CUDA_ERROR_NOT_READY = 600
_CUDA_ERROR_INVALID_VALUE = 1

# The CUDA enum numbers nvfp4-aot uses, here and in the build's launch capture
# (nvfp4_aot.bake.capture), which records them in the manifest.
# CUdevice_attribute
ATTR_MULTIPROCESSOR_COUNT = 16
ATTR_COMPUTE_CAPABILITY_MAJOR = 75
ATTR_COMPUTE_CAPABILITY_MINOR = 76
ATTR_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97
# CUpointer_attribute
POINTER_ATTR_DEVICE_ORDINAL = 9
# CUfunction_attribute: the one the DSL host code queries, and those it may set (-> name)
FUNC_ATTR_SHARED_SIZE_BYTES = 1
FUNC_ATTR_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
FUNCTION_ATTRIBUTES = {
    FUNC_ATTR_MAX_DYNAMIC_SHARED_SIZE_BYTES: "max_dynamic_shared_size_bytes",
    9: "preferred_shared_memory_carveout",
    10: "cluster_size_must_be_set",
    11: "required_cluster_width",
    12: "required_cluster_height",
    13: "required_cluster_depth",
    14: "non_portable_cluster_size_allowed",
    15: "cluster_scheduling_policy_preference",
}
# CUlaunchAttributeID (the same numbering in the runtime and driver APIs)
LAUNCH_ATTR_COOPERATIVE = 2
LAUNCH_ATTR_CLUSTER_DIMENSION = 4
LAUNCH_ATTR_CLUSTER_SCHEDULING_POLICY_PREFERENCE = 5
LAUNCH_ATTR_PROGRAMMATIC_STREAM_SERIALIZATION = 6
LAUNCH_ATTR_PRIORITY = 8
# id -> (name in the manifest, 32-bit words of the value used); launch_config sets these
LAUNCH_ATTRIBUTES = {
    LAUNCH_ATTR_COOPERATIVE: ("cooperative", 1),
    LAUNCH_ATTR_CLUSTER_DIMENSION: ("cluster_dimension", 3),
    LAUNCH_ATTR_CLUSTER_SCHEDULING_POLICY_PREFERENCE: ("cluster_scheduling_policy_preference", 1),
    LAUNCH_ATTR_PROGRAMMATIC_STREAM_SERIALIZATION: ("programmatic_stream_serialization", 1),
    LAUNCH_ATTR_PRIORITY: ("priority", 1),
}


def backend():
    """The driver bindings in use: ``cuda.bindings.driver`` unless a test swapped it."""
    global _backend
    if _backend is None:
        from cuda.bindings import driver as bindings

        _backend = bindings
    return _backend


def use_backend(new_backend):
    """Swap the driver bindings (``None`` restores the real ones); returns the previous.

    Swapping also forgets the initialisation state and the retained contexts, so that a
    fake starts from a clean slate.
    """
    global _backend, _initialized, _direct_calls
    with _lock:
        previous = _backend
        _backend = new_backend
        _initialized = False
        _contexts.clear()
        _direct_calls = None
    return previous


def _result_name(result) -> str:
    name = getattr(result, "name", None)
    if name:
        return name
    try:
        err, text = backend().cuGetErrorName(result)
        if int(err) == 0 and text:
            return text.decode() if isinstance(text, bytes) else str(text)
    except Exception:  # naming an error must never hide it
        pass
    return f"CUresult {int(result)}"


def _result_string(result) -> str:
    try:
        err, text = backend().cuGetErrorString(result)
        if int(err) == 0 and text:
            return text.decode() if isinstance(text, bytes) else str(text)
    except Exception:
        pass
    return ""


def check(operation: str, result: tuple):
    """Return the values of a bindings result tuple, or raise CudaError if it failed.

    ``(CUDA_SUCCESS,)`` gives None, ``(CUDA_SUCCESS, x)`` gives ``x`` and longer tuples
    give the tuple of values (cuda.core's ``handle_return``).
    """
    status = result[0]
    if int(status) != 0:
        raise CudaError(operation, _result_name(status), _result_string(status))
    if len(result) == 1:
        return None
    if len(result) == 2:
        return result[1]
    return result[1:]


def call(operation: str, *args):
    """Call ``operation`` (a driver function name, e.g. ``"cuMemAlloc"``) and check it."""
    return check(operation, getattr(backend(), operation)(*args))


# initialisation, devices, contexts ---------------------------------------------------


def init() -> None:
    """``cuInit(0)`` once per process (and per backend)."""
    global _initialized
    if _initialized:
        return
    with _lock:
        if _initialized:
            return
        try:
            result = backend().cuInit(0)
        except RuntimeError as exc:  # cuda.pathfinder: libcuda.so is not installed
            raise CudaError(
                "cuInit",
                "CUDA_ERROR_NO_DEVICE",
                f"the NVIDIA driver library could not be loaded ({exc}); nvfp4-aot needs "
                "an NVIDIA GPU with its driver installed",
            ) from exc
        check("cuInit", result)
        _initialized = True


def device_count() -> int:
    init()
    return int(call("cuDeviceGetCount"))


def device(ordinal: int):
    init()
    return call("cuDeviceGet", ordinal)


def device_attribute(attribute: int, ordinal: int) -> int:
    """``cuDeviceGetAttribute`` by numeric attribute id (as the manifest records them)."""
    b = backend()
    return int(call("cuDeviceGetAttribute", b.CUdevice_attribute(attribute), device(ordinal)))


def compute_capability(ordinal: int) -> tuple[int, int]:
    return (
        device_attribute(ATTR_COMPUTE_CAPABILITY_MAJOR, ordinal),
        device_attribute(ATTR_COMPUTE_CAPABILITY_MINOR, ordinal),
    )


def sm_count(ordinal: int) -> int:
    return device_attribute(ATTR_MULTIPROCESSOR_COUNT, ordinal)


def device_name(ordinal: int) -> str:
    raw = call("cuDeviceGetName", 256, device(ordinal))
    text = raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)
    return text.split("\0", 1)[0]


def activate(ordinal: int) -> None:
    """Make the device's primary context current on this thread (retained once)."""
    ctx = _contexts.get(ordinal)
    if ctx is None:
        with _lock:
            ctx = _contexts.get(ordinal)
            if ctx is None:
                ctx = call("cuDevicePrimaryCtxRetain", device(ordinal))
                _contexts[ordinal] = ctx
    call("cuCtxSetCurrent", ctx)


def pointer_device(pointer: int) -> int:
    """Ordinal of the device that owns ``pointer`` (CUDA_ERROR_INVALID_VALUE if none)."""
    b = backend()
    return int(
        call("cuPointerGetAttribute", b.CUpointer_attribute(POINTER_ATTR_DEVICE_ORDINAL), pointer)
    )


def synchronize() -> None:
    call("cuCtxSynchronize")


# memory --------------------------------------------------------------------------------


def mem_alloc(size: int) -> int:
    return int(call("cuMemAlloc", size))


def mem_free(pointer: int) -> None:
    call("cuMemFree", pointer)


def host_alloc(size: int) -> int:
    """Page-locked host memory (portable across contexts), so that copies are async."""
    return int(call("cuMemHostAlloc", size, CU_MEMHOSTALLOC_PORTABLE))


def host_free(pointer: int) -> None:
    call("cuMemFreeHost", pointer)


def memcpy_htod(dst: int, src: int, size: int) -> None:
    call("cuMemcpyHtoD", dst, src, size)


def memcpy_htod_async(dst: int, src: int, size: int, stream: int) -> None:
    call("cuMemcpyHtoDAsync", dst, src, size, stream)


def memcpy_dtoh(dst: int, src: int, size: int) -> None:
    call("cuMemcpyDtoH", dst, src, size)


def memset_d8(dst: int, value: int, count: int) -> None:
    call("cuMemsetD8", dst, value, count)


def memset_d16(dst: int, value: int, count: int) -> None:
    call("cuMemsetD16", dst, value, count)


# events and streams ----------------------------------------------------------------------


def event_create():
    return call("cuEventCreate", CU_EVENT_DISABLE_TIMING)


def event_destroy(event) -> None:
    call("cuEventDestroy", event)


def event_record(event, stream: int) -> None:
    call("cuEventRecord", event, stream)


def event_query(event) -> bool:
    """True when all work the event captured has completed; False while it is pending."""
    status = backend().cuEventQuery(event)[0]
    if int(status) == _CUDA_ERROR_NOT_READY:
        return False
    check("cuEventQuery", (status,))
    return True


def event_synchronize(event) -> None:
    call("cuEventSynchronize", event)


def stream_wait_event(stream: int, event) -> None:
    call("cuStreamWaitEvent", stream, event, 0)


def stream_is_capturing(stream: int) -> bool:
    """Whether ``stream`` is recording a CUDA graph."""
    status = call("cuStreamIsCapturing", stream)
    return int(status) != 0


def stream_synchronize(stream: int) -> None:
    call("cuStreamSynchronize", stream)


def stream_create() -> int:
    """A new non-blocking stream (it does not synchronise with the legacy default one)."""
    return int(call("cuStreamCreate", CU_STREAM_NON_BLOCKING))


def stream_destroy(stream: int) -> None:
    call("cuStreamDestroy", stream)


def capture_begin(stream: int, relaxed: bool = False) -> None:
    """Start recording ``stream`` into a CUDA graph: checking this thread's calls only,
    or (``relaxed``) none, as an application capturing a plan's runs may."""
    modes = backend().CUstreamCaptureMode
    mode = (
        modes.CU_STREAM_CAPTURE_MODE_RELAXED
        if relaxed
        else (modes.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
    )
    call("cuStreamBeginCapture", stream, mode)


@contextmanager
def relaxed_capture_mode():
    """Let this thread make calls that stream capture otherwise forbids (a synchronous
    wait on a stream no capture involves) while a capture is in progress: this thread's
    capture mode is RELAXED inside, then restored (CUDA's push-pop idiom for libraries).
    A capture begun in global mode, as ``torch.cuda.graph``'s default, refuses them."""
    modes = backend().CUstreamCaptureMode
    previous = call("cuThreadExchangeStreamCaptureMode", modes.CU_STREAM_CAPTURE_MODE_RELAXED)
    try:
        yield
    finally:
        call("cuThreadExchangeStreamCaptureMode", previous)


def capture_end(stream: int):
    """Stop recording ``stream``; returns the graph."""
    return call("cuStreamEndCapture", stream)


def graph_instantiate(graph):
    return call("cuGraphInstantiate", graph, 0)


def graph_destroy(graph) -> None:
    call("cuGraphDestroy", graph)


def graph_exec_destroy(executable) -> None:
    call("cuGraphExecDestroy", executable)


def graph_launch(executable, stream: int) -> None:
    call("cuGraphLaunch", executable, stream)


def timing_event_create():
    """An event that records time (for benchmarks; plans use :func:`event_create`)."""
    return call("cuEventCreate", 0)


def event_elapsed_ms(start, end) -> float:
    return float(call("cuEventElapsedTime", start, end))


# modules, kernels, launches ---------------------------------------------------------------


def library_load_data(image: bytes):
    return call("cuLibraryLoadData", image, None, None, 0, None, None, 0)


def library_unload(library) -> None:
    call("cuLibraryUnload", library)


def library_kernel_count(library) -> int:
    return int(call("cuLibraryGetKernelCount", library))


def library_get_kernel(library, symbol: str):
    return call("cuLibraryGetKernel", library, symbol.encode())


def kernel_get_function(kernel):
    return call("cuKernelGetFunction", kernel)


def kernel_set_attribute(kernel, attribute: int, value: int, ordinal: int) -> None:
    b = backend()
    call("cuKernelSetAttribute", b.CUfunction_attribute(attribute), value, kernel, device(ordinal))


def function_set_attribute(function, attribute: int, value: int) -> None:
    b = backend()
    call("cuFuncSetAttribute", function, b.CUfunction_attribute(attribute), value)


def function_attribute(function, attribute: int) -> int:
    b = backend()
    return int(call("cuFuncGetAttribute", b.CUfunction_attribute(attribute), function))


def function_param_info(function, count: int) -> list[tuple[int, int]] | None:
    """(offset, size) of the first ``count`` kernel parameters, or None where the driver
    cannot say (``cuFuncGetParamInfo`` is CUDA 12.4+).

    Only ``count`` entries are asked for: probing past the last parameter answers
    CUDA_ERROR_INVALID_VALUE, which compute-sanitizer reports as an API error. The
    parameter count itself was proven at build time (PTX entry and ``.nv.info`` agree)
    and the cubin's sha256 ties it to this file.
    """
    b = backend()
    if not hasattr(b, "cuFuncGetParamInfo"):
        return None
    params = []
    for index in range(count):
        try:
            result = b.cuFuncGetParamInfo(function, index)
        except RuntimeError:  # the loaded libcuda lacks the symbol
            return None
        if int(result[0]) != 0:
            if index == 0 and _result_name(result[0]) == "CUDA_ERROR_NOT_SUPPORTED":
                return None
            if int(result[0]) == _CUDA_ERROR_INVALID_VALUE:
                return params  # fewer parameters than expected: the caller refuses
            check("cuFuncGetParamInfo", result)
        params.append((int(result[1]), int(result[2])))
    return params


def _attribute_value(attribute, attr_id: int, values: Sequence[int]) -> None:
    value = attribute.value
    if attr_id == LAUNCH_ATTR_COOPERATIVE:
        value.cooperative = values[0]
    elif attr_id == LAUNCH_ATTR_CLUSTER_DIMENSION:
        value.clusterDim.x, value.clusterDim.y, value.clusterDim.z = values
    elif attr_id == LAUNCH_ATTR_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
        value.clusterSchedulingPolicyPreference = backend().CUclusterSchedulingPolicy(values[0])
    elif attr_id == LAUNCH_ATTR_PROGRAMMATIC_STREAM_SERIALIZATION:
        value.programmaticStreamSerializationAllowed = values[0]
    elif attr_id == LAUNCH_ATTR_PRIORITY:
        value.priority = values[0]
    else:
        raise ValueError(f"launch attribute id {attr_id} is not supported by nvfp4_aot.driver")


def launch_config(
    grid: Sequence[int],
    block: Sequence[int],
    shared_bytes: int,
    attributes: Sequence[tuple[int, Sequence[int]]],
):
    """A ``CUlaunchConfig`` for ``cuLaunchKernelEx``, with ``(id, values)`` attributes.

    The stream is set per launch (``config.hStream``); everything else is fixed.
    """
    b = backend()
    config = b.CUlaunchConfig()
    config.gridDimX, config.gridDimY, config.gridDimZ = grid
    config.blockDimX, config.blockDimY, config.blockDimZ = block
    config.sharedMemBytes = shared_bytes
    config.hStream = 0
    native = []
    for attr_id, values in attributes:
        attribute = b.CUlaunchAttribute()
        attribute.id = b.CUlaunchAttributeID(attr_id)
        _attribute_value(attribute, attr_id, values)
        native.append(attribute)
    config.attrs = native
    config.numAttrs = len(native)
    return config


def launch(function, config, kernel_params: int) -> None:
    """``cuLaunchKernelEx(config, function, kernel_params, 0)``.

    ``kernel_params`` is the address of an array of pointers, one per kernel parameter,
    into a packed parameter buffer (see :mod:`nvfp4_aot.plan`).
    """
    check("cuLaunchKernelEx", backend().cuLaunchKernelEx(config, function, kernel_params, 0))


# the per-run calls ------------------------------------------------------------------


class LaunchSpec:
    """One prepared launch: the function, its ``CUlaunchConfig`` (grid, block, shared
    memory and launch attributes, built by the bindings) and the stream the config
    holds, which is rewritten only when a launch uses another stream."""

    __slots__ = ("function", "config", "config_address", "stream")

    def __init__(self, function, config):
        self.function = function
        self.config = config
        self.config_address = int(config.getPtr()) if hasattr(config, "getPtr") else 0
        self.stream = 0

    def use_stream(self, stream: int) -> None:
        if stream != self.stream:
            self.config.hStream = stream
            self.stream = stream


class BindingsCalls:
    """The driver calls a plan makes per run, through the bindings (any backend).

    :class:`DirectCalls` has the same methods; a plan holds one or the other and keeps
    handles in the form it wants (:meth:`handle`). This one serves test fakes and
    backends without ``cuGetProcAddress``.
    """

    @staticmethod
    def handle(obj):
        return obj

    @staticmethod
    def launch_spec(function, grid, block, shared_bytes: int, attributes) -> LaunchSpec:
        return LaunchSpec(function, launch_config(grid, block, shared_bytes, attributes))

    @staticmethod
    def set_context(context) -> None:
        call("cuCtxSetCurrent", context)

    memcpy_htod_async = staticmethod(memcpy_htod_async)
    event_record = staticmethod(event_record)
    event_query = staticmethod(event_query)
    event_synchronize = staticmethod(event_synchronize)
    stream_wait_event = staticmethod(stream_wait_event)
    stream_is_capturing = staticmethod(stream_is_capturing)
    graph_launch = staticmethod(graph_launch)

    @staticmethod
    def launch(spec: LaunchSpec, stream: int, kernel_params: int) -> None:
        spec.use_stream(stream)
        launch(spec.function, spec.config, kernel_params)


class DirectCalls:
    """The same calls through the driver's own entry points.

    The bindings marshal arguments through Python objects (about 5 us per
    ``cuLaunchKernelEx``); these entry points, resolved once through ``cuGetProcAddress``
    from the same driver, take plain integers, and the launch passes the address of the
    ``CUlaunchConfig`` the bindings built. Every call is still checked and raises
    :class:`CudaError` naming the operation and the CUresult.
    """

    # name: (driver version the entry point is asked for, number of arguments). Every
    # argument is a pointer-sized integer (handles, CUdeviceptr, size_t: one 64-bit
    # register each on the LP64 platforms CUDA supports); c_void_p converts them
    # fastest (about 0.1 us per argument less than c_uint64).
    _SIGNATURES = {
        "cuCtxSetCurrent": (4000, 1),
        "cuMemcpyHtoDAsync": (3020, 4),
        "cuLaunchKernelEx": (11060, 4),
        "cuEventRecord": (2000, 2),
        "cuEventQuery": (2000, 1),
        "cuEventSynchronize": (2000, 1),
        "cuStreamWaitEvent": (3020, 3),
        "cuStreamIsCapturing": (10000, 2),
        "cuGraphLaunch": (10000, 2),
    }

    def __init__(self):
        for name, (version, count) in self._SIGNATURES.items():
            address = call("cuGetProcAddress", name.encode(), version, 0)
            if isinstance(address, tuple):  # (pfn, symbol status) in newer bindings
                address = address[0]
            prototype = ctypes.CFUNCTYPE(ctypes.c_int, *[ctypes.c_void_p] * count)
            setattr(self, "_" + name, prototype(int(address)))
        self._capture_status = ctypes.c_int(0)
        self._capture_status_address = ctypes.addressof(self._capture_status)

    handle = staticmethod(int)

    @staticmethod
    def launch_spec(function, grid, block, shared_bytes: int, attributes) -> LaunchSpec:
        return LaunchSpec(int(function), launch_config(grid, block, shared_bytes, attributes))

    @staticmethod
    def _fail(operation: str, status: int):
        try:
            result = backend().CUresult(status)
        except ValueError:  # a code these bindings do not know
            raise CudaError(operation, f"CUresult {status}", "") from None
        raise CudaError(operation, _result_name(result), _result_string(result))

    def set_context(self, context: int) -> None:
        status = self._cuCtxSetCurrent(context)
        if status:
            self._fail("cuCtxSetCurrent", status)

    def memcpy_htod_async(self, dst: int, src: int, size: int, stream: int) -> None:
        status = self._cuMemcpyHtoDAsync(dst, src, size, stream)
        if status:
            self._fail("cuMemcpyHtoDAsync", status)

    def launch(self, spec: LaunchSpec, stream: int, kernel_params: int) -> None:
        if stream != spec.stream:
            spec.use_stream(stream)
        status = self._cuLaunchKernelEx(spec.config_address, spec.function, kernel_params, None)
        if status:
            self._fail("cuLaunchKernelEx", status)

    def event_record(self, event: int, stream: int) -> None:
        status = self._cuEventRecord(event, stream)
        if status:
            self._fail("cuEventRecord", status)

    def event_query(self, event: int) -> bool:
        status = self._cuEventQuery(event)
        if status == _CUDA_ERROR_NOT_READY:
            return False
        if status:
            self._fail("cuEventQuery", status)
        return True

    def event_synchronize(self, event: int) -> None:
        status = self._cuEventSynchronize(event)
        if status:
            self._fail("cuEventSynchronize", status)

    def stream_wait_event(self, stream: int, event: int) -> None:
        status = self._cuStreamWaitEvent(stream, event, 0)
        if status:
            self._fail("cuStreamWaitEvent", status)

    def graph_launch(self, executable: int, stream: int) -> None:
        status = self._cuGraphLaunch(executable, stream)
        if status:
            self._fail("cuGraphLaunch", status)

    def stream_is_capturing(self, stream: int) -> bool:
        status = self._cuStreamIsCapturing(stream, self._capture_status_address)
        if status:
            self._fail("cuStreamIsCapturing", status)
        return self._capture_status.value != 0  # CU_STREAM_CAPTURE_STATUS_NONE


_direct_calls: DirectCalls | None = None


def run_calls() -> DirectCalls | BindingsCalls:
    """The per-run calls: direct entry points where the backend resolves them (the
    real driver), else the bindings (test fakes)."""
    global _direct_calls
    if not hasattr(backend(), "cuGetProcAddress"):
        return BindingsCalls()
    if _direct_calls is None:
        with _lock:
            if _direct_calls is None:
                _direct_calls = DirectCalls()
    return _direct_calls


def current_context(ordinal: int):
    """The retained primary context of ``ordinal`` (after :func:`activate`)."""
    activate(ordinal)
    return _contexts[ordinal]
