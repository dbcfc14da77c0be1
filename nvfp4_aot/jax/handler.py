"""The XLA FFI handler of the MoE GEMM: a Python function XLA calls through ctypes.

XLA calls :func:`_execute_cuda` with a call frame (:mod:`.xla_ffi`) each time a compiled
program reaches the custom call, on the thread that runs the program, with the buffers
XLA assigned (C is one of XLA's result buffers) and the stream XLA runs on. The handler
takes the plan of the call's shape and device from a cache (made on the first call,
which allocates and synchronises once; later calls allocate nothing and never wait,
unless :data:`RING_SLOTS` runs of the plan with distinct buffers are still queued on the
GPU, when the call waits for the oldest: backpressure on a host far ahead of the GPU)
and runs it on XLA's stream with the buffers' addresses: the routing stays on the GPU.
Any exception becomes an ``XLA_FFI_Error`` carrying its message, which JAX raises; a
kernel fault after the launch surfaces as XLA's error at the next synchronisation.

CUDA graphs. XLA records command buffers (CUDA graphs) of runs of compatible
operations by default. The handler is registered *without* the command-buffer trait,
so XLA runs it as its own step between command buffers, never during a capture: a
plan's run inside a capture keeps its operand addresses in one of a few capture slots
(:mod:`nvfp4_aot.launcher`), and XLA re-records its traces whenever buffer addresses
change (C is a new buffer every call), so captured runs would use the slots up and a
replay of an evicted trace would read another call's addresses. ``register(
command_buffer=True)`` declares the trait anyway, for measurement only
(bench/jax_smoke.py): plans then have :data:`EXPERIMENT_CAPTURE_SLOTS` slots and a
capture past them fails with the launcher's error. What would make the call capturable
for good: captured runs that carry their operand words inside the graph (memset nodes,
say) instead of reading a capture slot's pinned staging, so that every trace XLA keeps
is self-contained (a launcher change).

The CPU platform gets a float64 reference (numpy) under the same target, so programs
using the op run, slowly, on JAX's CPU backend: tests and pipelines without a GPU.

This module also holds what every target of the package shares: registration (once per
process, every target), the execution prologue (:func:`begin`: frame, metadata,
counting), the plan cache (:func:`cached_plan`) and errors (:func:`fail`). The
quantizer's target is :mod:`nvfp4_aot.jax.quantize_handler`.
"""

from __future__ import annotations

import ctypes
import threading

from ..errors import CudaError, InvalidProblemError, Nvfp4Error
from . import xla_ffi

TARGET = "nvfp4_aot_moe_gemm"
MAX_PLANS = 256  # plans kept (one per shape and device); past it the oldest is closed
EXPERIMENT_CAPTURE_SLOTS = 64
# Operand sets in flight per plan before a call waits for the oldest run to finish: C is
# a new XLA buffer every call (a new table), and JAX may dispatch many calls ahead.
RING_SLOTS = 16

_lock = threading.Lock()
_registered: dict[str, object] | None = None  # platform -> the ctypes handler (kept alive)
_command_buffer = False
_plans: dict[tuple, object] = {}  # (device, E, n, k, layout, capacity, out dtype) -> plan
_calls = 0  # executions handled, for tests and diagnostics
_captured = 0  # of those, made while XLA captured a command buffer (trait experiment)
_api_seen: dict[str, int] = {}  # XLA's FFI API version and table size, from the first call
_thread = threading.local()  # per thread that ran a handler: whether its state is kept


def register(command_buffer: bool | None = None) -> None:
    """Register the FFI targets (the MoE GEMM, the quantizer) with JAX, for CUDA and (the
    reference) CPU; once per process: later calls do nothing. ``command_buffer`` (default False) declares XLA's
    command-buffer trait (an experiment: the module docstring); asking for the other
    setting after registration raises."""
    global _registered, _command_buffer
    with _lock:
        if _registered is not None:
            if command_buffer is not None and command_buffer != _command_buffer:
                raise RuntimeError(
                    f"{TARGET} is already registered with command_buffer={_command_buffer}; "
                    "registration is once per process"
                )
            return
        import jax

        from . import quantize_handler

        _command_buffer = bool(command_buffer)  # before registering: XLA may ask for them
        targets = {
            TARGET: {"CUDA": _execute_cuda, "cpu": _execute_cpu},
            quantize_handler.TARGET: {
                "CUDA": quantize_handler.execute_cuda,
                "cpu": quantize_handler.execute_cpu,
            },
        }
        _registered = {
            f"{name}/{platform}": register_target(jax, name, platform, function)
            for name, platforms in targets.items()
            for platform, function in platforms.items()
        }


def register_target(jax, name: str, platform: str, function):
    """Register ``function`` (a Python function of a call frame's address) as FFI target
    ``name`` for ``platform`` through a ctypes handler (XLA API 1), and return that
    handler: the caller keeps it alive as long as XLA may call it."""
    handler = xla_ffi.Handler(function)
    address = ctypes.cast(handler, ctypes.c_void_p).value
    jax.ffi.register_ffi_target(name, jax.ffi.pycapsule(address), platform=platform, api_version=1)
    return handler


def registered() -> bool:
    return _registered is not None


def executions() -> int:
    """How many times XLA has called the handler so far (both platforms)."""
    return _calls


def api_info() -> dict[str, int]:
    """XLA's FFI API version and API table size as the first execution saw them."""
    return dict(_api_seen)


def captured_calls() -> int:
    """How many executions XLA made during a command-buffer capture (counted only
    when registered with ``command_buffer=True``)."""
    return _captured


def plans() -> list:
    """The plans the handler holds (for inspection)."""
    return list(_plans.values())


def release_plans() -> None:
    """Close every plan (waiting for their queued runs); the next call makes new ones."""
    with _lock:
        held = list(_plans.values())
        _plans.clear()
    for plan in held:
        plan.close()


# ---------------------------------------------------------------------------------------
# the handlers


def _execute_cuda(address: int) -> int | None:
    frame = None
    try:
        frame = begin(address, traits())
        if frame is None:
            return None
        layout, ops, alpha, c, _with_out = _decode(frame)
        stream = execution_stream(frame)
        device = device_of(frame, ops[1].data)
        key = _plan_key(device, layout, ops, c, alpha is not None)
        plan = _plans.get(key)
        if plan is None:
            plan = _new_plan(key, stream)
        a, b, sfa, sfb, routing = (buffer.data for buffer in ops)
        alpha_data = None if alpha is None else alpha.data
        plan.run(a, b, c.data, sfa, sfb, routing, stream=stream, alpha=alpha_data)
    except BaseException as exc:  # noqa: BLE001 - nothing may unwind into XLA's C++
        return fail(frame, address, exc)
    return None


def _execute_cpu(address: int) -> int | None:
    frame = None
    try:
        frame = begin(address, 0)
        if frame is None:
            return None
        layout, ops, alpha, c, with_out = _decode(frame)
        from .cpu_reference import moe_reference

        moe_reference(layout, ops, alpha, c, fill_nan=not with_out)
    except BaseException as exc:  # noqa: BLE001
        return fail(frame, address, exc)
    return None


# ---------------------------------------------------------------------------------------
# shared by every target's handler


def traits() -> int:
    """The traits a CUDA handler declares (the command-buffer experiment or none)."""
    return xla_ffi.TRAIT_COMMAND_BUFFER_COMPATIBLE if _command_buffer else 0


def begin(address: int, declared_traits: int):
    """The prologue of every execution: the frame at ``address``, or None when XLA only
    asked for the metadata (answered with ``declared_traits``); counts executions."""
    keep_thread_state()
    frame = xla_ffi.read_frame(address)
    if xla_ffi.answer_metadata(frame, address, declared_traits):
        return None
    _count(frame)
    if frame.stage != xla_ffi.STAGE_EXECUTE:
        raise RuntimeError(f"called for execution stage {frame.stage}; only execute is handled")
    return frame


def keep_thread_state() -> None:
    """Keep the calling thread's Python thread state from one execution to the next.

    XLA's default GPU client runs a single-device program on the caller's thread, but a
    program over several devices on one execute thread per device, and the TFRT GPU
    client (``XLA_PYTHON_CLIENT_USE_TFRT_GPU_CLIENT=1``) and the CPU client's asynchronous
    dispatch on pool threads: threads Python did not start, on which ctypes makes a
    thread state for every call and deletes it on return (microseconds a call). One
    ``PyGILState_Ensure`` that is never released, once per thread, keeps the state, so
    that later calls on the thread only take the GIL. On a thread Python started the
    extra count changes nothing: such a thread keeps its state anyway and deletes it
    when it ends.
    """
    if not getattr(_thread, "state_kept", False):
        ctypes.pythonapi.PyGILState_Ensure()
        _thread.state_kept = True


def execution_stream(frame) -> int:
    """XLA's stream of this execution (counted if captured, in the trait experiment)."""
    stream = xla_ffi.stream(frame)
    if _command_buffer:
        _count_capture(stream)
    return stream


def device_of(frame, pointer: int) -> int:
    """The CUDA ordinal of this execution (an XLA without DeviceOrdinal_Get: the device
    owning ``pointer``)."""
    device = xla_ffi.device_ordinal(frame)
    if device is None:
        from .. import driver

        device = driver.pointer_device(pointer)
    return device


def plan_slots() -> dict[str, int]:
    """Ring and capture slots of the plans the handlers make."""
    capture = EXPERIMENT_CAPTURE_SLOTS if _command_buffer else 1
    return {"capture_slots": capture, "ring_slots": RING_SLOTS}


def refuse_during_capture(stream: int, what: str, prepare: str) -> None:
    """Raise if XLA is capturing ``stream``: a plan (``what``) cannot be made then."""
    from .. import driver

    if driver.stream_is_capturing(stream):
        raise RuntimeError(
            f"no plan yet for {what}, and XLA is capturing a command buffer (a plan cannot "
            "be made during capture): run the jitted function once with "
            f"XLA_FLAGS=--xla_gpu_enable_command_buffer= or call {prepare} first"
        )


def cached_plan(key: tuple, make):
    """The plan cached under ``key``, made by ``make()`` now if new (past
    :data:`MAX_PLANS` the oldest is closed)."""
    plan = _plans.get(key)
    if plan is not None:
        return plan
    with _lock:
        plan = _plans.get(key)
        if plan is None:
            plan = _plans[key] = make()
            evicted = [_plans.pop(next(iter(_plans)))] if len(_plans) > MAX_PLANS else []
        else:
            evicted = []
    for old in evicted:
        old.close()
    return plan


def _count(frame) -> None:
    global _calls
    _calls += 1
    if not _api_seen:
        api = xla_ffi.api_table(frame.api)
        _api_seen.update(
            major=api.api_version.major_version,
            minor=api.api_version.minor_version,
            table_bytes=api.struct_size,
        )


def _count_capture(stream: int) -> None:
    global _captured
    from .. import driver

    _captured += driver.stream_is_capturing(stream)


def _decode(frame):
    """(layout, the five operand buffers, alpha or None, the result buffer C, whether C
    came in as ``out``) of an execution: a, b, sfa, sfb, routing, then alpha (float32,
    rank 1) and/or C's initial contents (``out``, which XLA aliases to the result, so C
    is always the result buffer). The call carries no attributes: the layout is A's
    rank (2 contiguous, 3 masked); reading attributes would cost every call."""
    ops, rets = frame.args, frame.rets
    extra = ops[5:]
    alpha = next((x for x in extra if x.dtype == xla_ffi.F32 and x.rank == 1), None)
    with_out = len(extra) - (alpha is not None)
    layout = _LAYOUT_OF_RANK.get(ops[0].rank) if ops else None
    if len(ops) < 5 or with_out > 1 or len(rets) != 1 or layout is None:
        raise RuntimeError(
            f"expected a (rank 2 or 3), b, sfa, sfb, routing[, alpha][, out] and one result, "
            f"got {len(ops)} arguments and {len(rets)} results: call it through "
            "nvfp4_aot.jax.moe_gemm"
        )
    return layout, ops[:5], alpha, rets[0], bool(with_out)


_LAYOUT_OF_RANK = {2: "contiguous", 3: "masked"}


def _plan_key(device: int, layout: str, ops, c, alpha: bool) -> tuple:
    experts, n, half_k = xla_ffi.shape(ops[1])
    a_dims = xla_ffi.shape(ops[0])
    capacity = a_dims[0] if layout == "contiguous" else a_dims[1]
    return (device, experts, n, 2 * half_k, layout, capacity, xla_ffi.dtype_name(c), alpha)


def _new_plan(key: tuple, stream: int):
    device, experts, n, k, layout, capacity, _out_dtype, _alpha = key
    refuse_during_capture(
        stream,
        f"{experts} experts, n={n}, k={k}, {layout}, capacity {capacity} on device {device}",
        "nvfp4_aot.jax.prepare",
    )
    return prepare_plan(key)


def prepare_plan(key: tuple):
    """The cached plan of ``key`` (device, E, n, k, layout, capacity, out dtype name,
    alpha), made now if new."""
    from ..moe import MoeGemmPlan

    device, experts, n, k, layout, capacity, out_dtype, alpha = key
    options = {**plan_slots(), "out_dtype": out_dtype, "alpha": alpha}
    return cached_plan(
        key,
        lambda: MoeGemmPlan(
            experts, n, k, layout=layout, capacity=capacity, device=device, **options
        ),
    )


def fail(frame, address: int, exc: BaseException, target: str = TARGET) -> int | None:
    """An ``XLA_FFI_Error*`` for ``exc`` (its class picks the code), the message naming
    ``target``; None only where not even the API table can be read."""
    if isinstance(exc, InvalidProblemError):
        code = xla_ffi.ERROR_INVALID_ARGUMENT
    elif isinstance(exc, CudaError):
        code = xla_ffi.ERROR_INTERNAL
    elif isinstance(exc, Nvfp4Error):
        code = xla_ffi.ERROR_FAILED_PRECONDITION
    else:
        code = xla_ffi.ERROR_UNKNOWN
    message = f"{target}: {type(exc).__name__}: {exc}"
    cause = exc.__cause__
    if cause is not None:
        message += f" (from {type(cause).__name__}: {cause})"
    try:
        if frame is None:  # the frame itself could not be read: its API table, directly
            frame = xla_ffi.Frame(xla_ffi.frame_api(address), 0, 0, 0, [], [])
        return xla_ffi.create_error(frame, code, message)
    except BaseException:  # noqa: BLE001 - a broken API table: nothing better to return
        return None
