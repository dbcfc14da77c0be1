"""nvfp4_aot.jax without a GPU: imports without jax, the FFI structs, the trace-time
checks, the CUDA handler against the fake driver (a hand-built XLA call frame), and,
where jax is installed, whole jitted programs on JAX's CPU backend (the float64
reference target), the jnp quantizer stand-in and routing helpers.

Tests that need jax skip cleanly where it is not installed (the CI venv).
"""

from __future__ import annotations

import ctypes
import struct
import subprocess
import sys
import textwrap
import threading
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

from fake_xla import BASE, BF16, F16, F32, S32, U8, FakeFrame, moe_frame
from nvfp4_aot.blocked import blocked_scale_bytes
from nvfp4_aot.errors import InvalidProblemError
from nvfp4_aot.jax import checks, handler, quantize_handler, xla_ffi
from nvfp4_aot.moe_data import MoeProblem, random_counts
from nvfp4_aot.moe_layout import contiguous_scale_rows
from support import REPO, installed_h200


@pytest.fixture
def jax():
    """jax, with JAX's CPU backend as the default device for the test (the machine may
    have a GPU: these tests are about the CPU target)."""
    jax = pytest.importorskip("jax", reason="jax is not installed")
    with jax.default_device(jax.devices("cpu")[0]):
        yield jax


# ---------------------------------------------------------------------------------------
# no jax needed


def test_package_imports_without_jax():
    """With jax unimportable: the package, its checks and FFI structs import; using a
    function that needs jax says so."""
    script = textwrap.dedent(
        """
        import sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("jax", "jaxlib", "torch"):
                    raise ImportError(f"{name} is blocked in this test")
        sys.meta_path.insert(0, Block())
        import nvfp4_aot.jax as nj
        from nvfp4_aot.jax import checks, handler, quantize_handler, xla_ffi
        assert not [m for m in sys.modules if m.split(".")[0] in ("jax", "jaxlib")]
        try:
            nj.moe_gemm
        except ImportError as exc:
            assert "jax" in str(exc), exc
        else:
            raise AssertionError("moe_gemm without jax")
        print("ok")
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_struct_layouts_match_c_api_h():
    """Offsets of xla/ffi/api/c_api.h on a 64-bit ABI (the fields we read or write)."""
    assert ctypes.sizeof(xla_ffi.Buffer) == 48
    assert xla_ffi.Buffer.data.offset == 24 and xla_ffi.Buffer.dims.offset == 40
    assert ctypes.sizeof(xla_ffi.Args) == 40 and ctypes.sizeof(xla_ffi.Attrs) == 48
    frame = xla_ffi.CallFrame
    assert (frame.api.offset, frame.ctx.offset, frame.stage.offset) == (16, 24, 32)
    assert (frame.args.offset, frame.rets.offset, frame.attrs.offset) == (40, 80, 120)
    assert frame.future.offset == 168
    api = xla_ffi.Api
    assert api.XLA_FFI_Error_Create.offset == 48 and api.XLA_FFI_Stream_Get.offset == 80
    assert api.XLA_FFI_DeviceOrdinal_Get.offset == 48 + 17 * 8
    metadata = xla_ffi.Metadata
    assert (metadata.api_version.offset, metadata.traits.offset) == (8, 32)
    assert metadata.state_type_id.offset == 40


def test_api_has_reads_the_table_size():
    table = xla_ffi.Api()
    table.struct_size = xla_ffi.Api.XLA_FFI_DeviceOrdinal_Get.offset
    assert xla_ffi.api_has(table, "XLA_FFI_Stream_Get")
    assert not xla_ffi.api_has(table, "XLA_FFI_DeviceOrdinal_Get")
    table.struct_size = ctypes.sizeof(xla_ffi.Api)
    assert xla_ffi.api_has(table, "XLA_FFI_DeviceOrdinal_Get")


def _array(shape, dtype):
    return SimpleNamespace(shape=shape, dtype=np.dtype(dtype))


def _call(experts=8, n=256, k=512, layout="contiguous", capacity=100, **changes):
    masked = layout == "masked"
    sfa_bytes = (
        experts * blocked_scale_bytes(capacity, k)
        if masked
        else contiguous_scale_rows(capacity, experts) * (k // 16)
    )
    ops = {
        "a": _array((experts, capacity, k // 2) if masked else (capacity, k // 2), "uint8"),
        "b": _array((experts, n, k // 2), "uint8"),
        "sfa": _array((sfa_bytes,), "uint8"),
        "sfb": _array((experts * blocked_scale_bytes(n, k),), "uint8"),
        "routing": _array((experts,) if masked else (experts + 1,), "int32"),
    }
    for name, value in changes.items():
        ops[name] = _array(*value) if isinstance(value, tuple) else value
    return checks.check_moe_call(**ops, layout=layout)


def test_check_gives_the_result_shape():
    assert _call().c_shape == (100, 256)
    masked = _call(layout="masked", capacity=16)
    assert masked.c_shape == (8, 16, 256) and masked.out_dtype == "float16"
    assert _call(a=((0, 256), "uint8"), sfa=((0,), "uint8")).capacity == 0


@pytest.mark.parametrize(
    "layout, change, message",
    [("contiguous", {"a": ((100, 128), "uint8")}, r"^a must be \(tokens, k/2=256\) for the contiguous layout, got shape \(100, 128\)"),
     ("masked", {"a": ((8, 16), "uint8")}, r"^a must be \(experts=8, max_m, k/2=256\) for the masked layout"),
     ("contiguous", {"b": ((8, 256), "uint8")}, r"^b must be \(experts, n, k/2\), got shape \(8, 256\)"),
     ("contiguous", {"a": ((100, 256), "float16")}, r"^a must have dtype uint8, int8, got float16"),
     ("contiguous", {"sfa": ((99999,), "float32")}, r"^sfa must have dtype uint8, float8_e4m3fn, got float32"),
     ("contiguous", {"routing": ((9,), "int64")}, r"^routing must have dtype int32, got int64"),
     ("contiguous", {"routing": ((8,), "int32")}, r"^routing must be int32 offsets\[E \+ 1\] of shape \(9,\), got \(8,\)"),
     ("masked", {"routing": ((9,), "int32")}, r"^routing must be int32 masked_m\[E\] of shape \(8,\), got \(9,\)"),
     ("contiguous", {"sfb": ((100,), "uint8")}, r"^sfb must hold at least 65536 bytes of blocked scales, got 100"),
     ("contiguous", {"sfa": ((4, 4), "uint8")}, r"^sfa must be 1-D blocked scales"),
     ("contiguous", {"b": ((8, 200, 256), "uint8")}, r"n must be a multiple of 32"),
     ("contiguous", {"a": ((100, 48), "uint8"), "b": ((8, 256, 48), "uint8")}, r"k must be a multiple of 64 for MoE layouts"),
     ("sideways", {}, r"^layout must be one of \('contiguous', 'masked'\), got 'sideways'")],
)  # fmt: skip
def test_check_errors_name_the_operand(layout, change, message):
    with pytest.raises(InvalidProblemError, match=message):
        _call(layout=layout, **change)


def test_alpha_and_out_dtype_checks():
    """alpha must be float32 (E,); out_dtype float16 or bfloat16."""
    operands = [_array(*s) for s in (((100, 256), "u1"), ((8, 256, 256), "u1"),
                                     ((1 << 20,), "u1"), ((65536,), "u1"), ((9,), "i4"))]  # fmt: skip
    call = checks.check_moe_call(
        *operands, layout="contiguous", alpha=_array((8,), "float32"), out_dtype="bfloat16"
    )
    assert call.out_dtype == "bfloat16"
    with pytest.raises(InvalidProblemError, match=r"alpha must be float32 of shape \(8,\)"):
        checks.check_moe_call(*operands, layout="contiguous", alpha=_array((7,), "float32"))
    with pytest.raises(InvalidProblemError, match="out_dtype must be one of float16, bfloat16"):
        checks.check_moe_call(*operands, layout="contiguous", out_dtype="float32")


# ---------------------------------------------------------------------------------------
# the CUDA handler, called with a hand-built call frame, against the fake driver


def test_read_frame_gives_each_buffer_as_built():
    frame, p = moe_frame(experts=4, n=128, k=256, capacity=40)
    read = xla_ffi.read_frame(ctypes.addressof(frame.frame))
    assert (read.stage, read.extension) == (xla_ffi.STAGE_EXECUTE, 0)
    assert [(b.data, xla_ffi.shape(b), b.dtype) for b in read.args] == [
        (p[1], (40, 128), U8), (p[2], (4, 128, 128), U8), (p[4], (1 << 20,), U8),
        (p[5], (4 * blocked_scale_bytes(128, 256),), U8), (p[0], (5,), S32),
    ]  # fmt: skip
    assert [(b.data, xla_ffi.shape(b), b.dtype) for b in read.rets] == [(p[3], (40, 128), F16)]
    frame.frame.rets.types[0] = 3  # not XLA_FFI_RetType BUFFER
    with pytest.raises(TypeError, match="result 0 is not a buffer"):
        xla_ffi.read_frame(ctypes.addressof(frame.frame))


def test_queries_call_the_tables_current_entries_on_any_thread():
    """The stream and device queries call what the API table holds now (their functions
    are cached by those entries, not by the table's address: a test's table may be freed
    and another made at its address), with a struct of the calling thread's own; an API
    older than DeviceOrdinal_Get gives None."""
    frame, _ = moe_frame()
    read = xla_ffi.read_frame(ctypes.addressof(frame.frame))
    assert (xla_ffi.stream(read), xla_ffi.device_ordinal(read)) == (FakeFrame.STREAM, 0)
    api = frame.frame.api.contents

    def stream_get(args):
        args.contents.stream = 77
        return None

    def ordinal_get(args):
        args.contents.device_ordinal = 3
        return None

    frame.keep += [xla_ffi.StreamGet(stream_get), xla_ffi.DeviceOrdinalGet(ordinal_get)]
    api.XLA_FFI_Stream_Get, api.XLA_FFI_DeviceOrdinal_Get = frame.keep[-2:]
    seen = []
    worker = threading.Thread(
        target=lambda: seen.append((xla_ffi.stream(read), xla_ffi.device_ordinal(read)))
    )
    worker.start()
    worker.join()
    assert seen == [(77, 3)] and xla_ffi.stream(read) == 77
    api.struct_size = xla_ffi.Api.XLA_FFI_DeviceOrdinal_Get.offset
    assert xla_ffi.device_ordinal(read) is None


@pytest.fixture
def fake(monkeypatch):
    """The fake driver, and a plan cache of the test's own (real plans made by GPU tests
    in this process stay out of its reach)."""
    monkeypatch.setattr(handler, "_plans", {})
    with installed_h200() as f:
        yield f
        handler.release_plans()  # while the fake is installed: closing calls the driver


def test_cuda_handler_runs_the_plan_on_xlas_stream(fake):
    frame, (routing, a, b, c, sfa, sfb) = moe_frame()
    assert frame.call(handler._execute_cuda) is None, frame.errors
    (plan,) = handler.plans()
    launches = len(plan.layout.launches)  # one routed GEMM (or routing kernel + GEMM)
    assert [launch.stream for launch in fake.launches] == [FakeFrame.STREAM] * launches
    _dst, data, stream = fake.copies[-1]
    assert stream == FakeFrame.STREAM
    assert struct.unpack_from("<6Q", data) == (routing, a, b, c, sfa, sfb)
    assert (plan.experts, plan.n, plan.k, plan.capacity) == (8, 256, 512, 100)
    allocations = fake.names().count("cuMemAlloc")
    frame.call(handler._execute_cuda)  # the second call: same plan, nothing allocated
    assert len(handler.plans()) == 1 and fake.names().count("cuMemAlloc") == allocations
    assert len(fake.launches) == 2 * launches


def test_cuda_handler_turns_exceptions_into_xla_errors(fake):
    frame, _ = moe_frame(capacity=64)
    frame.frame.args.args[0] = frame.frame.rets.args[0]  # C as A: overlapping operands
    assert frame.call(handler._execute_cuda) == FakeFrame.ERROR
    ((code, message),) = frame.errors
    assert code == xla_ffi.ERROR_INVALID_ARGUMENT
    assert message.startswith(f"{handler.TARGET}: InvalidProblemError: ")
    assert not fake.launches


def test_cuda_handler_refuses_a_malformed_call(fake):
    extra = [(BASE, (100, 256), F16), (BASE, (100, 256), F16)]  # two outs
    frame, _ = moe_frame(extra=extra)
    assert frame.call(handler._execute_cuda) == FakeFrame.ERROR
    assert "got 7 arguments and 1 results" in frame.errors[0][1]


@pytest.mark.parametrize("command_buffer", [False, True])
def test_metadata_declares_the_api_version_and_traits(monkeypatch, command_buffer):
    monkeypatch.setattr(handler, "_command_buffer", command_buffer)
    frame = FakeFrame([], [], metadata=True)
    assert frame.call(handler._execute_cuda) is None and not frame.errors
    version = frame.metadata.api_version
    assert (version.major_version, version.minor_version) == (xla_ffi.API_MAJOR, xla_ffi.API_MINOR)
    assert frame.metadata.traits == (1 if command_buffer else 0)
    assert handler.executions() == handler.executions()  # the query is not an execution


def test_register_once_keeps_the_first_setting(jax, monkeypatch):
    monkeypatch.setattr(handler, "_registered", None)
    monkeypatch.setattr(handler, "_command_buffer", False)
    calls = []
    names = []
    monkeypatch.setattr(
        jax.ffi, "register_ffi_target", lambda *a, **k: (calls.append(k), names.append(a))
    )
    handler.register(command_buffer=True)
    handler.register()  # what moe_gemm calls: keeps the experiment's setting
    assert handler._command_buffer and [c["platform"] for c in calls] == ["CUDA", "cpu"] * 2
    assert [a[0] for a in names] == [handler.TARGET] * 2 + [quantize_handler.TARGET] * 2
    with pytest.raises(RuntimeError, match="already registered with command_buffer=True"):
        handler.register(command_buffer=False)


# ---------------------------------------------------------------------------------------
# with jax: whole programs on JAX's CPU backend (the float64 reference target)


def _problem(layout, experts=4, n=64, k=128, capacity=300, seed=0):
    rng = np.random.default_rng(seed)
    p = MoeProblem(experts, n, k, layout, capacity, rng)
    a = p.a if layout == "contiguous" else p.a.reshape(experts, capacity, k // 2)
    return p, a, p.b.reshape(experts, n, k // 2), rng


def _assert_matches(p, routing, c) -> np.ndarray:
    """Routed rows within 1e-3 of float64; returns the mask of unrouted rows."""
    c = np.asarray(c, dtype=np.float64).reshape(-1, p.n)
    unrouted = np.ones(c.shape[0], bool)
    for e, (start, stop) in enumerate(routing.row_ranges):
        unrouted[start:stop] = False
        if stop > start:
            ref = p.reference(routing, e)
            assert np.abs(c[start:stop] - ref).max() <= 1e-3 * max(np.abs(ref).max(), 1e-30)
    return unrouted


@pytest.mark.parametrize("layout, capacity", [("contiguous", 300), ("masked", 40)])
def test_one_compiled_function_serves_every_routing(jax, layout, capacity):
    import nvfp4_aot.jax as nj

    p, a, b, rng = _problem(layout, capacity=capacity)
    traces = []

    @jax.jit
    def step(a, b, sfa, sfb, routing):
        traces.append(1)
        return nj.moe_gemm(a, b, sfa, sfb, routing, layout=layout)

    total = capacity if layout == "contiguous" else 4 * capacity
    for kind in ("uniform", "skewed", "one_expert", "empty", "sparse"):
        counts = random_counts(kind, 4, total, rng)
        routing = p.routing(np.minimum(counts, capacity) if layout == "masked" else counts)
        c = step(a, b, routing.sfa, p.sfb, routing.routing)
        unrouted = _assert_matches(p, routing, c)
        assert np.isnan(np.asarray(c).reshape(-1, p.n)[unrouted]).all()  # the CPU target: NaN
    assert len(traces) == 1


def test_out_keeps_unrouted_rows(jax):
    import nvfp4_aot.jax as nj

    p, a, b, _ = _problem("masked", capacity=40)
    routing = p.routing([3, 0, 40, 17])
    poison = np.full((4, 40, p.n), 0xFFFF, np.uint16).view(np.float16)
    run = jax.jit(lambda *x: nj.moe_gemm(*x[:5], layout="masked", out=x[5]), donate_argnums=5)
    c = run(a, b, routing.sfa, p.sfb, routing.routing, poison)
    unrouted = _assert_matches(p, routing, c)
    assert (np.asarray(c).reshape(-1, p.n)[unrouted].view(np.uint16) == 0xFFFF).all()


def test_trace_time_errors_under_jit_and_eval_shape(jax):
    import nvfp4_aot.jax as nj

    p, a, b, _ = _problem("contiguous")
    routing = p.routing([10, 20, 30, 40])
    shape = jax.eval_shape(nj.moe_gemm, a, b, routing.sfa, p.sfb, routing.routing)
    assert (shape.shape, shape.dtype.name) == ((300, 64), "float16")
    with pytest.raises(InvalidProblemError, match=r"routing must be int32 offsets\[E \+ 1\]"):
        jax.jit(nj.moe_gemm)(a, b, routing.sfa, p.sfb, routing.routing[:4])
    with pytest.raises(InvalidProblemError, match=r"out must have shape \(300, 64\)"):
        nj.moe_gemm(a, b, routing.sfa, p.sfb, routing.routing, out=np.zeros((3, 64), np.float16))


def test_a_failing_call_is_a_jax_error_and_the_next_one_works(jax):
    import nvfp4_aot.jax as nj

    p, a, b, _ = _problem("contiguous")
    routing = p.routing([10, 20, 30, 40])
    step = jax.jit(nj.moe_gemm)
    bad = np.array([0, 5, 3, 100, 400], np.int32)  # the CPU reference refuses what GPUs clamp
    with pytest.raises(
        Exception,
        match=r"INVALID_ARGUMENT: nvfp4_aot_moe_gemm: InvalidProblemError: routing: offsets must rise",
    ) as info:
        np.asarray(step(a, b, routing.sfa, p.sfb, bad))  # fmt: skip
    assert type(info.value).__module__.startswith(("jax", "jaxlib"))
    _assert_matches(p, routing, step(a, b, routing.sfa, p.sfb, routing.routing))


def test_vmap_maps_sequentially(jax):
    import nvfp4_aot.jax as nj

    p, a, b, _ = _problem("masked", capacity=40)
    r1, r2 = p.routing([3, 0, 40, 17]), p.routing([40, 1, 0, 2])
    stacked = jax.vmap(lambda ro: nj.moe_gemm(a, b, r1.sfa, p.sfb, ro, layout="masked"))(
        np.stack([r1.routing, r2.routing])
    )
    assert stacked.shape == (2, 4, 40, 64)
    _assert_matches(p, r1, stacked[0])
    _assert_matches(p, r2, stacked[1])


def test_zero_capacity_runs_nothing(jax):
    import nvfp4_aot.jax as nj

    before = handler.executions()
    c = jax.jit(nj.moe_gemm)(
        np.zeros((0, 64), np.uint8), np.zeros((4, 64, 64), np.uint8), np.zeros((0,), np.uint8),
        np.zeros((4 * blocked_scale_bytes(64, 128),), np.uint8), np.zeros(5, np.int32),
    )  # fmt: skip
    assert c.shape == (0, 64) and handler.executions() == before


def test_queries_reach_xlas_own_entry_points(jax):
    """The cached entry points call XLA's real API table: its CPU client answers the
    device-ordinal query (0) through them; its stream query, which a CPU execution
    has no stream for, gives our error or a stream, and never faults."""
    seen = []

    def execute(address):
        frame = xla_ffi.read_frame(address)
        if not xla_ffi.answer_metadata(frame, address, 0):
            seen.append(xla_ffi.device_ordinal(frame))
            try:
                seen.append(xla_ffi.stream(frame))
            except RuntimeError as exc:
                seen.append(str(exc))

    kept = handler.register_target(jax, "nvfp4_test_queries", "cpu", execute)
    call = jax.ffi.ffi_call("nvfp4_test_queries", jax.ShapeDtypeStruct((8,), np.float32))
    jax.block_until_ready(jax.jit(call)(np.ones(8, np.float32)))
    assert kept is not None and seen[0] == 0
    assert isinstance(seen[1], int) or seen[1] == "XLA_FFI_Stream_Get failed"


def test_lowering_for_cuda_names_the_target(jax):
    """The program lowered for CUDA (here possibly without a GPU) holds our custom call."""
    import nvfp4_aot.jax as nj

    p, a, b, _ = _problem("contiguous")
    routing = p.routing([10, 20, 30, 40])
    args = [
        jax.ShapeDtypeStruct(x.shape, x.dtype) for x in (a, b, routing.sfa, p.sfb, routing.routing)
    ]
    try:
        unchecked = [jax.export.DisabledSafetyCheck.custom_call(handler.TARGET)]
        exported = jax.export.export(
            jax.jit(nj.moe_gemm), platforms=["cuda"], disabled_checks=unchecked
        )(*args)
    except Exception as exc:  # noqa: BLE001 - some jax versions need the plugin to lower
        pytest.skip(f"this jax cannot lower for CUDA here: {exc}")
    text = exported.mlir_module()
    assert f"@{handler.TARGET}" in text or f'"{handler.TARGET}"' in text
    assert "tensor<300x64xf16>" in text  # C, XLA's result


def test_quantize_standin_matches_the_numpy_quantizer_bit_for_bit(jax):
    from nvfp4_aot.jax import quantize_standin
    from nvfp4_aot.quantize import quantize

    rng = np.random.default_rng(3)
    run = jax.jit(quantize_standin)
    for trial in range(12):
        x = rng.standard_normal((37, 128)) * 10.0 ** rng.uniform(-6, 6, size=(37, 1))
        x = x.astype(np.float32)
        x[0, :16] = 0  # an all-zero block
        x[1, 3] = -0.0
        ties = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5, 6], np.float32)
        x[2] = np.tile(ties, 16) * (1 if trial % 2 else -1)  # FP4 ties once scaled
        packed, scales, g = run(x)
        q = quantize(x)
        assert np.float32(g) == q.global_scale
        np.testing.assert_array_equal(np.asarray(scales), q.scales)
        np.testing.assert_array_equal(np.asarray(packed), q.packed)
    given = run(x, np.float32(3.0))
    np.testing.assert_array_equal(np.asarray(given[0]), quantize(x, 3.0).packed)


def test_route_and_blocked_scales_match_the_host_layout(jax):
    from nvfp4_aot.jax import blocked_scales, route
    from nvfp4_aot.layouts import scales_to_blocked
    from nvfp4_aot.moe_layout import scale_offsets

    rng = np.random.default_rng(4)
    top = rng.integers(0, 8, size=(150, 2))
    r = jax.jit(route, static_argnums=1)(top, 8)
    counts = np.bincount(top.reshape(-1), minlength=8)
    offsets = np.concatenate([[0], np.cumsum(counts)])
    np.testing.assert_array_equal(np.asarray(r.offsets), offsets)
    experts, order = np.asarray(r.experts), np.asarray(r.order)
    np.testing.assert_array_equal(top.reshape(-1)[order], experts)
    np.testing.assert_array_equal(np.asarray(r.tokens), order // 2)
    starts = np.array(scale_offsets(counts))
    rows = np.arange(300)
    np.testing.assert_array_equal(
        np.asarray(r.scale_rows), starts[experts] + rows - offsets[experts]
    )
    assert r.scale_row_count == contiguous_scale_rows(300, 8)
    scales = rng.integers(0, 255, size=(100, 6), dtype=np.uint8)  # k/16 = 6: padded to 8
    np.testing.assert_array_equal(
        np.asarray(blocked_scales(scales, np.arange(100), 128)), scales_to_blocked(scales)
    )


# ---------------------------------------------------------------------------------------
# the quantizer: nvfp4_aot.jax.quantize (target nvfp4_aot_quantize)


def _named(shape, dtype):
    """An operand by shape and dtype name (bfloat16 needs no ml_dtypes here)."""
    return SimpleNamespace(shape=shape, dtype=SimpleNamespace(name=dtype))


def _qcall(form="plain", x=((300, 128), "bfloat16"), g=((), "float32"), **rest):
    ops = {name: _named(*value) if isinstance(value, tuple) else value
           for name, value in rest.items()}  # fmt: skip
    return checks.check_quantize_call(_named(*x), _named(*g), form, **ops)


def test_quantize_check_gives_the_plans_shapes():
    from nvfp4_aot.quantizer import QuantizePlan, make_problem

    plain = _qcall()
    assert plain.out_shape == (300, 64) and plain.scale_bytes == 384 * 8
    contiguous = _qcall("contiguous", routing=((9,), "int32"), index=((600,), "int32"))
    assert contiguous.out_shape == (600, 64)
    problem = make_problem(128, "contiguous", 300, 600, 8, "bfloat16", None)
    assert contiguous.problem == problem
    assert contiguous.scale_bytes == contiguous_scale_rows(600, 8) * 8
    masked = _qcall("masked", x=((4, 40, 256), "float16"), routing=((4,), "int32"))
    assert masked.out_shape == (4, 40, 128) and masked.scale_bytes == 4 * 128 * 16
    assert QuantizePlan.scale_bytes.fget(SimpleNamespace(layout=SimpleNamespace(
        problem=masked.problem))) == masked.scale_bytes  # fmt: skip
    assert _qcall(x=((0, 128), "bfloat16")).problem is None  # no rows: nothing runs


@pytest.mark.parametrize(
    "form, change, message",
    [("plain", {"x": ((300, 128), "float32")}, r"^x must have dtype bfloat16 or float16, got float32"),
     ("plain", {"x": ((300, 40), "bfloat16")}, r"^k must be a multiple of 16, got 40"),
     ("plain", {"x": ((3, 300, 128), "bfloat16")}, r"^x must be \(rows, k\) for the plain form"),
     ("plain", {"g": ((2,), "float32")}, r"^global_scale must be float32 of shape \(\) or \(1,\)"),
     ("plain", {"g": ((), "float64")}, r"^global_scale must be float32 .* got float64"),
     ("plain", {"routing": ((2,), "int32")}, r"^routing is not an operand of the plain form; pass None"),
     ("plain", {"capacity": 10}, r"capacity must be rows = 300, got 10"),
     ("contiguous", {}, r"^the contiguous form needs routing: int32 offsets\[E \+ 1\]"),
     ("contiguous", {"routing": ((9,), "int64")}, r"^routing must have dtype int32, got int64"),
     ("contiguous", {"routing": ((9,), "int32"), "index": ((99,), "int32"), "capacity": 100},
      r"^index must be int32 index\[capacity\] of shape \(100,\), got shape \(99,\)"),
     ("contiguous", {"routing": ((9,), "int32"), "experts": 4},
      r"^routing must be int32 offsets\[E \+ 1\] of shape \(5,\), got shape \(9,\)"),
     ("contiguous", {"routing": ((9,), "int32"), "capacity": 400},
      r"^without an index output row i reads row i of x: the plan's rows \(300\) must be >= capacity \(400\)"),
     ("masked", {"routing": ((4,), "int32")}, r"^x must be \(experts, max_m, k\) for the masked form"),
     ("masked", {"x": ((4, 40, 128), "bfloat16"), "routing": ((5,), "int32")},
      r"^routing must be int32 masked_m\[E\] of shape \(4,\), got shape \(5,\)"),
     ("masked", {"x": ((4, 40, 128), "bfloat16"), "routing": ((4,), "int32"), "index": ((4,), "int32")},
      r"^index is not an operand of the masked form; pass None"),
     ("sideways", {}, r"^form must be one of \('plain', 'contiguous', 'masked'\), got 'sideways'")],
)  # fmt: skip
def test_quantize_check_errors_name_the_operand(form, change, message):
    with pytest.raises(InvalidProblemError, match=message):
        _qcall(form, **change)


def _quantize_frame(form="plain", dtype=BF16, rows=100, k=64, experts=4, capacity=None):
    """x, g[, routing][, index] and (out, scales) at made-up device addresses."""
    from nvfp4_aot.quantizer import make_problem

    p = [BASE + (i + 1) * (1 << 34) for i in range(6)]  # x, out, scales, g, routing, index
    name = {BF16: "bfloat16", F16: "float16"}[dtype]
    capacity = rows if capacity is None else capacity
    if form == "masked":
        problem = make_problem(k, form, None, capacity, experts, name, None)
        args = [(p[0], (experts, capacity, k), dtype), (p[3], (), F32), (p[4], (experts,), S32)]
        out = (experts, capacity, k // 2)
    else:
        problem = make_problem(k, form, rows, capacity, 1 if form == "plain" else experts,
                               name, None)  # fmt: skip
        args = [(p[0], (rows, k), dtype), (p[3], (), F32)]
        if form == "contiguous":
            args += [(p[4], (experts + 1,), S32), (p[5], (capacity,), S32)]
        out = (capacity, k // 2)
    rets = [(p[1], out, U8), (p[2], (problem.operand_bytes()["scales"],), U8)]
    return FakeFrame(args, rets), p, problem


@pytest.mark.parametrize("form", ["plain", "contiguous", "masked"])
def test_quantize_handler_runs_the_plan_on_xlas_stream(fake, form):
    capacity = {"plain": None, "contiguous": 150, "masked": 40}[form]
    frame, (x, out, scales, g, routing, index), problem = _quantize_frame(form, capacity=capacity)
    assert frame.call(quantize_handler.execute_cuda) is None, frame.errors
    ((plan_key, plan),) = handler._plans.items()
    # the plan is the problem's, with the unit width its layout chose
    assert plan_key[0] == "quantize" and plan.problem == plan.layout.problem
    assert replace(plan.problem, segment_blocks=problem.segment_blocks) == problem
    assert [launch.stream for launch in fake.launches] == [FakeFrame.STREAM]
    _dst, data, stream = fake.copies[-1]
    assert stream == FakeFrame.STREAM
    expected = {
        "plain": (x, out, scales, g, 0, 0),
        "contiguous": (x, out, scales, g, routing, index),
        "masked": (x, out, scales, g, routing, 0),
    }[form]
    assert struct.unpack_from("<6Q", data) == expected
    allocations = fake.names().count("cuMemAlloc")
    frame.call(quantize_handler.execute_cuda)  # the second call: same plan, nothing allocated
    assert len(handler.plans()) == 1 and fake.names().count("cuMemAlloc") == allocations
    assert len(fake.launches) == 2


def test_quantize_handler_errors_are_xla_errors(fake):
    frame, _, _ = _quantize_frame()
    frame.frame.rets.args[0] = frame.frame.args.args[0]  # out at x: overlapping operands
    assert frame.call(quantize_handler.execute_cuda) == FakeFrame.ERROR
    ((code, message),) = frame.errors
    assert code == xla_ffi.ERROR_INVALID_ARGUMENT
    assert message.startswith(f"{quantize_handler.TARGET}: InvalidProblemError: out overlaps x")
    frame = FakeFrame(
        [(BASE, (8, 40), BF16), (BASE + (1 << 34), (), F32)],
        [(BASE + (2 << 34), (8, 20), U8), (BASE + (3 << 34), (512,), U8)],
    )  # k = 40
    assert frame.call(quantize_handler.execute_cuda) == FakeFrame.ERROR
    assert "k must be a multiple of 16, got 40" in frame.errors[0][1]
    frame = FakeFrame([(BASE, (4, 4), BF16)], [(BASE, (4, 2), U8)])  # one argument, one result
    assert frame.call(quantize_handler.execute_cuda) == FakeFrame.ERROR
    assert "got 1 arguments and 1 results" in frame.errors[0][1]
    assert not fake.launches


def test_an_unreadable_frame_still_gives_an_error(fake):
    """A frame whose arguments are not buffers: read_frame fails; the error is still made
    from the frame's API table (not lost: XLA would take None for success)."""
    frame, _, _ = _quantize_frame()
    frame.frame.args.types[0] = 2  # not XLA_FFI_ArgType BUFFER
    assert frame.call(quantize_handler.execute_cuda) == FakeFrame.ERROR
    assert "argument 0 is not a buffer" in frame.errors[0][1]


# A thread Python did not start calling a handler many times, as XLA's own threads may:
# compiled with the system's C compiler where there is one.
FOREIGN_THREAD_C = """
#include <pthread.h>
typedef void *(*handler_t)(void *);
struct job { handler_t handler; void *frame; long calls; };
static void *run(void *p) {
    struct job *j = p;
    for (long i = 0; i < j->calls; i++) j->handler(j->frame);
    return 0;
}
int call_from_new_thread(handler_t handler, void *frame, long calls) {
    pthread_t thread;
    struct job j = {handler, frame, calls};
    if (pthread_create(&thread, 0, run, &j)) return -1;
    return pthread_join(thread, 0);
}
"""


@pytest.fixture(scope="module")
def foreign_thread(tmp_path_factory):
    """``call(function, address, calls)``: ``function`` (a Python function of an address)
    called ``calls`` times from one new pthread, through the FFI handler's C signature."""
    import shutil

    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler to build a thread Python did not start")
    work = tmp_path_factory.mktemp("foreign_thread")
    (work / "loop.c").write_text(FOREIGN_THREAD_C)
    library = work / "libloop.so"
    subprocess.run(
        [compiler, "-O1", "-shared", "-fPIC", "-o", library, work / "loop.c", "-lpthread"],
        check=True,
    )
    loop = ctypes.CDLL(str(library))  # CDLL: the GIL is released while the thread runs
    loop.call_from_new_thread.argtypes = [xla_ffi.Handler, ctypes.c_void_p, ctypes.c_long]

    def call(function, address: int, calls: int) -> None:
        callback = xla_ffi.Handler(function)
        assert loop.call_from_new_thread(callback, address, calls) == 0

    return call


@pytest.mark.parametrize("keep", [True, False])
def test_a_foreign_thread_keeps_its_state_between_calls(foreign_thread, keep):
    """What keep_thread_state is for: without it every call on a thread Python did not
    start runs in a new thread state (thread-locals gone: a new state each time)."""
    seen, local = [], threading.local()

    def probe(_address):
        if keep:
            handler.keep_thread_state()
        local.calls = getattr(local, "calls", 0) + 1
        seen.append(local.calls)

    foreign_thread(probe, 0, 5)
    assert seen == ([1, 2, 3, 4, 5] if keep else [1] * 5)


def test_the_cuda_handler_keeps_xlas_thread_state(fake, foreign_thread):
    """Executions from a thread of XLA's run the plan and, after the first, reuse that
    thread's Python state."""
    frame, _ = moe_frame()
    results, local = [], threading.local()

    def execute(address):
        local.calls = getattr(local, "calls", 0) + 1
        results.append((handler._execute_cuda(address), local.calls))

    foreign_thread(execute, ctypes.addressof(frame.frame), 3)
    assert results == [(None, 1), (None, 2), (None, 3)], frame.errors
    (plan,) = handler.plans()
    assert len(fake.launches) == 3 * len(plan.layout.launches)


def _bf16(x32: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits (truncation: any bf16 values will do)."""
    return (np.ascontiguousarray(x32, np.float32).view(np.uint32) >> 16).astype(np.uint16)


def _expected(problem, x_bits, g, routing=None, index=None):
    from nvfp4_aot.jax.cpu_reference import UNWRITTEN
    from nvfp4_aot.quantize_routing import expected_outputs

    e = expected_outputs(problem, x_bits.reshape(problem.rows, problem.k), g, routing, index)
    return (np.where(e.out_written, e.out, np.uint8(UNWRITTEN)),
            np.where(e.scales_written, e.scales, np.uint8(UNWRITTEN)))  # fmt: skip


def _assert_bytes(result, expected, label=""):
    packed, scales = (np.asarray(r) for r in result)
    np.testing.assert_array_equal(packed.reshape(-1), expected[0], err_msg=f"{label} packed")
    np.testing.assert_array_equal(scales, expected[1], err_msg=f"{label} scales")


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_quantize_plain_under_jit_gives_the_reference_bytes(jax, dtype):
    import nvfp4_aot.jax as nj
    from nvfp4_aot.quantize import quantize

    rng = np.random.default_rng(8)
    x32 = (rng.standard_normal((130, 96)) * 10.0 ** rng.uniform(-3, 3, (130, 1))).astype(np.float32)
    x32[0, :16] = 0
    x32[1, 5] = np.nan
    x32[2, 7] = np.inf
    bits = _bf16(x32) if dtype == "bfloat16" else x32.astype(np.float16)
    x = jax.numpy.asarray(bits).view(jax.numpy.bfloat16) if dtype == "bfloat16" else bits
    g = np.float32(2.5)
    packed, scales = jax.jit(nj.quantize)(x, g)
    q = quantize(bits, g)
    assert packed.shape == (130, 48) and scales.shape == (256 * 8,)
    np.testing.assert_array_equal(np.asarray(packed), q.packed)
    np.testing.assert_array_equal(np.asarray(scales), q.scales_blocked)
    packed, _ = jax.jit(nj.quantize)(x, np.array([g], np.float32))  # g of shape (1,)
    np.testing.assert_array_equal(np.asarray(packed), q.packed)


def test_quantize_contiguous_one_compiled_function_serves_every_routing(jax):
    import nvfp4_aot.jax as nj
    from nvfp4_aot.quantizer import make_problem

    rng = np.random.default_rng(9)
    tokens, k, experts, capacity = 90, 128, 4, 180
    bits = _bf16(rng.standard_normal((tokens, k)).astype(np.float32))
    x = jax.numpy.asarray(bits).view(jax.numpy.bfloat16)
    problem = make_problem(k, "contiguous", tokens, capacity, experts, "bfloat16", None)
    traces = []

    @jax.jit
    def step(x, g, offsets, index):
        traces.append(1)
        return nj.quantize(x, g, form="contiguous", routing=offsets, index=index)

    for kind in ("uniform", "skewed", "one_expert", "empty", "sparse"):
        counts = random_counts(kind, experts, int(rng.integers(0, capacity + 1)), rng)
        offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
        index = rng.integers(0, tokens, capacity).astype(np.int32)
        g = np.float32(rng.uniform(0.5, 4))
        _assert_bytes(step(x, g, offsets, index), _expected(problem, bits, g, offsets, index), kind)
    hostile = np.array([5, -3, 400, 100, 7], np.int32), np.full(capacity, 10**6, np.int32)
    _assert_bytes(
        step(x, np.float32(1), *hostile), _expected(problem, bits, 1, *hostile), "hostile"
    )
    assert len(traces) == 1


def test_quantize_contiguous_without_index_and_masked(jax):
    import nvfp4_aot.jax as nj
    from nvfp4_aot.quantizer import make_problem

    rng = np.random.default_rng(10)
    x16 = rng.standard_normal((200, 64)).astype(np.float16)
    offsets = np.array([0, 50, 50, 190], np.int32)
    result = jax.jit(lambda x, g, o: nj.quantize(x, g, form="contiguous", routing=o))(
        x16, np.float32(3), offsets
    )
    problem = make_problem(64, "contiguous", 200, 200, 3, "float16", None)
    _assert_bytes(result, _expected(problem, x16, np.float32(3), offsets), "contiguous")
    xm = rng.standard_normal((4, 40, 64)).astype(np.float16)
    masked_m = np.array([3, 0, 40, 99], np.int32)  # 99: clamped to max_m as the kernel does
    result = jax.jit(lambda x, g, m: nj.quantize(x, g, form="masked", routing=m))(
        xm, np.float32(0.75), masked_m
    )
    assert result[0].shape == (4, 40, 32)
    problem = make_problem(64, "masked", None, 40, 4, "float16", None)
    _assert_bytes(result, _expected(problem, xm, np.float32(0.75), masked_m), "masked")


def test_quantize_trace_time_errors_and_shapes(jax):
    import nvfp4_aot.jax as nj

    x = np.zeros((300, 128), np.float16)
    shapes = jax.eval_shape(
        lambda x, o, i: nj.quantize(x, 1.0, form="contiguous", routing=o, index=i),
        x, np.zeros(9, np.int32), np.zeros(600, np.int32),
    )  # fmt: skip
    assert [(s.shape, s.dtype.name) for s in shapes] == [
        ((600, 64), "uint8"), ((contiguous_scale_rows(600, 8) * 8,), "uint8")
    ]  # fmt: skip
    with pytest.raises(InvalidProblemError, match=r"^x must have dtype bfloat16 or float16"):
        jax.jit(nj.quantize)(x.astype(np.float32), np.float32(1))
    with pytest.raises(InvalidProblemError, match=r"^global_scale must be float32"):
        jax.jit(nj.quantize)(x, np.ones(3, np.float32))
    before = handler.executions()
    packed, scales = jax.jit(nj.quantize)(np.zeros((0, 128), np.float16), np.float32(1))
    assert packed.shape == (0, 64) and scales.shape == (0,) and handler.executions() == before


def test_quantize_failing_call_is_a_jax_error(jax):
    """The CPU target refuses a g the reference refuses (the GPU computes with it)."""
    import nvfp4_aot.jax as nj

    x = np.ones((4, 32), np.float16)
    with pytest.raises(Exception, match=r"nvfp4_aot_quantize: ValueError: global_scale must be"):
        np.asarray(jax.jit(nj.quantize)(x, np.float32(-1))[0])
    _assert_bytes(jax.jit(nj.quantize)(x, np.float32(1)),
                  _expected(_plain(4, 32), x, np.float32(1)))  # fmt: skip


def _plain(rows, k, dtype="float16"):
    from nvfp4_aot.quantizer import make_problem

    return make_problem(k, "plain", rows, None, 1, dtype, None)


def test_quantize_lowering_for_cuda_names_the_target(jax):
    import nvfp4_aot.jax as nj

    args = [jax.ShapeDtypeStruct((256, 512), np.float16), jax.ShapeDtypeStruct((), np.float32)]
    try:
        unchecked = [jax.export.DisabledSafetyCheck.custom_call(quantize_handler.TARGET)]
        exported = jax.export.export(
            jax.jit(nj.quantize), platforms=["cuda"], disabled_checks=unchecked
        )(*args)
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"this jax cannot lower for CUDA here: {exc}")
    text = exported.mlir_module()
    assert quantize_handler.TARGET in text and "tensor<256x256xui8>" in text


def test_prepare_quantize_makes_the_plan_a_call_uses(jax, fake):
    import nvfp4_aot.jax as nj

    x = jax.ShapeDtypeStruct((100, 64), jax.numpy.bfloat16)
    g = jax.ShapeDtypeStruct((), np.float32)
    offsets, index = (jax.ShapeDtypeStruct(s, np.int32) for s in ((5,), (150,)))
    plan = nj.prepare_quantize(x, g, form="contiguous", routing=offsets, index=index, device=0)
    assert handler.plans() == [plan] and plan.out_shape == (150, 32)
    frame, _, _ = _quantize_frame("contiguous", capacity=150)  # the same shapes
    assert frame.call(quantize_handler.execute_cuda) is None, frame.errors
    assert handler.plans() == [plan] and len(fake.launches) == 1
