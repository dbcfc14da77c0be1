"""The XLA FFI handler of the NVFP4 activation quantizer (target ``nvfp4_aot_quantize``).

The same design as the MoE GEMM's (:mod:`.handler`, which also registers this target and
holds the shared prologue, plan cache and errors): XLA calls :func:`execute_cuda` with a
call frame holding ``x, global_scale[, routing][, index]`` and the two results XLA
allocated (the packed codes and the blocked scales); the handler takes the
:class:`nvfp4_aot.QuantizePlan` of the call's shape and device from the cache and runs it
on XLA's stream with the buffers' addresses (g, the routing and the index stay on the
GPU). The call carries no attributes: the form follows from the operands (two: plain;
x of rank 3: masked; else contiguous), the sizes from their shapes. Registered without
the command-buffer trait, as the GEMM (:mod:`.handler` says why).

On the CPU platform :func:`execute_cpu` writes what the kernel writes
(:func:`nvfp4_aot.jax.cpu_reference.quantize_reference`).
"""

from __future__ import annotations

from . import handler, xla_ffi

TARGET = "nvfp4_aot_quantize"


def execute_cuda(address: int) -> int | None:
    frame = None
    try:
        frame = handler.begin(address, handler.traits())
        if frame is None:
            return None
        sizes, x, g, routing, index, out, scales = decode(frame)
        stream = handler.execution_stream(frame)
        key = ("quantize", handler.device_of(frame, x.data), *sizes)
        plan = handler._plans.get(key)
        if plan is None:
            plan = _new_plan(key, stream)
        plan.run(
            x.data, out.data, scales.data, g.data,
            None if routing is None else routing.data,
            None if index is None else index.data,
            stream=stream,
        )  # fmt: skip
    except BaseException as exc:  # noqa: BLE001 - nothing may unwind into XLA's C++
        return handler.fail(frame, address, exc, TARGET)
    return None


def execute_cpu(address: int) -> int | None:
    frame = None
    try:
        frame = handler.begin(address, 0)
        if frame is None:
            return None
        sizes, x, g, routing, index, out, scales = decode(frame)
        from .cpu_reference import quantize_reference

        quantize_reference(problem(sizes), x, g, routing, index, out, scales)
    except BaseException as exc:  # noqa: BLE001
        return handler.fail(frame, address, exc, TARGET)
    return None


def decode(frame):
    """((form, rows, capacity, k, experts, dtype), x, global_scale, routing or None,
    index or None, out, scales) of an execution."""
    args, rets = frame.args, frame.rets
    if (
        len(rets) != 2
        or not 2 <= len(args) <= 4
        or args[0].rank not in (2, 3)
        or (args[0].rank == 3 and len(args) != 3)
    ):
        raise RuntimeError(
            f"expected x (rank 2 or 3), global_scale[, routing][, index] and two results, "
            f"got {len(args)} arguments and {len(rets)} results: call it through "
            "nvfp4_aot.jax.quantize"
        )
    x_dims = xla_ffi.shape(args[0])
    k = x_dims[-1]
    if len(args) == 2:
        form, experts, rows, capacity = "plain", 1, x_dims[0], x_dims[0]
    elif args[0].rank == 3:
        form, (experts, capacity) = "masked", x_dims[:2]
        rows = experts * capacity
    else:
        form, rows = "contiguous", x_dims[0]
        experts = xla_ffi.shape(args[2])[0] - 1
        capacity = xla_ffi.shape(rets[0])[0]
    sizes = (form, rows, capacity, k, experts, xla_ffi.dtype_name(args[0]))
    routing = args[2] if len(args) > 2 else None
    index = args[3] if len(args) > 3 else None
    return sizes, args[0], args[1], routing, index, rets[0], rets[1]


def problem(sizes: tuple):
    """The checked :class:`nvfp4_aot.quantize_layout.QuantizeProblem` of ``sizes``."""
    from ..quantizer import make_problem

    form, rows, capacity, k, experts, dtype = sizes
    return make_problem(k, form, rows, capacity, experts, dtype, None)


def _new_plan(key: tuple, stream: int):
    _, device, form, rows, capacity, k, experts, dtype = key
    handler.refuse_during_capture(
        stream,
        f"the {form} quantizer, rows={rows}, capacity={capacity}, k={k}, experts={experts}, "
        f"{dtype} on device {device}",
        "nvfp4_aot.jax.prepare_quantize",
    )
    return prepare_plan(key)


def prepare_plan(key: tuple):
    """The cached plan of ``key`` ("quantize", device, form, rows, capacity, k, experts,
    dtype), made now if new."""
    from ..quantizer import QuantizePlan

    _, device, form, rows, capacity, k, experts, dtype = key
    return handler.cached_plan(
        key,
        lambda: QuantizePlan(
            k,
            form=form,
            rows=rows,
            capacity=capacity,
            experts=experts,
            dtype=dtype,
            device=device,
            **handler.plan_slots(),
        ),  # fmt: skip
    )
