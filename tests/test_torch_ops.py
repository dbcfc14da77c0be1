"""nvfp4_aot.torch_ops without a GPU: no torch at import; with a (CPU) torch, the ops'
registration, fake implementation, checks, CPU float64 reference, torch.compile tracing,
the GPU routing helpers (run on CPU tensors) and the torch example's layer.

Everything but the import test needs torch and is skipped without it (CI has none; a CPU
torch in another venv runs them: ``pip install torch`` there, then pytest this file).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from nvfp4_aot.blocked import blocked_scale_bytes
from nvfp4_aot.errors import InvalidProblemError
from nvfp4_aot.layouts import random_problem, scales_to_blocked
from nvfp4_aot.moe_data import ROUTING_KINDS, MoeProblem, random_counts
from nvfp4_aot.moe_layout import contiguous_scale_rows, scale_offsets
from nvfp4_aot.reference import TOLERANCE as TOLERANCES
from nvfp4_aot.reference import relative_error
from support import REPO

TOLERANCE, BF16_TOLERANCE = TOLERANCES["float16"], TOLERANCES["bfloat16"]


def test_import_needs_no_torch():
    """Importing torch_ops (and reading its helpers) imports no torch."""
    script = textwrap.dedent(
        """
        import sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] == "torch":
                    raise ImportError(f"{name} is blocked in this test")
        sys.meta_path.insert(0, Block())
        import nvfp4_aot.torch_ops as ops
        assert callable(ops.moe_gemm) and callable(ops.route) and ops.plans() == []
        assert "torch" not in sys.modules
        try:
            ops.register()
        except ImportError as exc:
            assert "blocked" in str(exc)
        else:
            raise AssertionError("register() did not need torch")
        print("ok")
        """
    )
    env = dict(os.environ, PYTHONPATH=str(REPO))
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=REPO
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


@pytest.fixture(scope="module")
def torch():
    torch = pytest.importorskip("torch")
    from nvfp4_aot import torch_ops

    torch_ops.register()
    return torch


@pytest.fixture(scope="module")
def ops(torch):
    from nvfp4_aot import torch_ops

    return torch_ops


def tensors(torch, problem: MoeProblem, routing):
    """(a, b, sfa, sfb, routing) of a MoeProblem routing as CPU tensors."""
    e, n, k = problem.experts, problem.n, problem.k
    a = torch.from_numpy(problem.a.copy())
    if problem.layout == "masked":
        a = a.reshape(e, problem.capacity, k // 2)
    b = torch.from_numpy(problem.b.copy()).reshape(e, n, k // 2)
    return (
        a, b, torch.from_numpy(routing.sfa.copy()), torch.from_numpy(problem.sfb.copy()),
        torch.from_numpy(routing.routing.copy()),
    )  # fmt: skip


def test_ops_registered(torch, ops):
    schema = str(torch.ops.nvfp4_aot.moe_gemm.default._schema)
    assert schema.startswith("nvfp4_aot::moe_gemm(Tensor a, Tensor b, Tensor sfa")
    assert "Tensor(a!) out" in str(torch.ops.nvfp4_aot.moe_gemm_out.default._schema)
    ops.register()  # idempotent


@pytest.mark.parametrize("layout", ["contiguous", "masked"])
def test_cpu_reference_matches_moe_problem(torch, ops, layout):
    """The CPU implementation reads the layouts as moe_data writes them."""
    rng = np.random.default_rng(5)
    experts, n, k, capacity = 5, 64, 128, (300 if layout == "contiguous" else 140)
    problem = MoeProblem(experts, n, k, layout, capacity, rng)
    for kind in ROUTING_KINDS:
        total = capacity if layout == "contiguous" else experts * capacity
        counts = random_counts(kind, experts, int(rng.integers(0, total + 1)), rng)
        if layout == "contiguous":
            counts[0] = 0  # an empty first expert as well
        routing = problem.routing(counts)
        a, b, sfa, sfb, r = tensors(torch, problem, routing)
        out = torch.full(a.shape[:-1] + (n,), -1, dtype=torch.int16).view(torch.float16)
        ops.moe_gemm_out(a, b, sfa, sfb, r, out, layout)
        flat = out.reshape(-1, n)
        functional = ops.moe_gemm(a, b, sfa, sfb, r, layout).reshape(-1, n)
        written = np.zeros(flat.shape[0], dtype=bool)
        for e, (start, stop) in enumerate(routing.row_ranges):
            if stop > start:
                written[start:stop] = True
                ref = problem.reference(routing, e)
                assert relative_error(flat[start:stop].numpy(), ref) <= TOLERANCE, (kind, e)
                assert torch.equal(functional[start:stop], flat[start:stop])
        assert (flat.view(torch.int16)[torch.from_numpy(~written)] == -1).all(), kind


@pytest.mark.parametrize("layout", ["contiguous", "masked"])
def test_cpu_reference_with_alpha_and_bf16(torch, ops, layout):
    """alpha scales each expert's rows; out_dtype=bfloat16 gives a BF16 tensor."""
    rng = np.random.default_rng(8)
    experts, n, k, capacity = 4, 64, 128, (200 if layout == "contiguous" else 60)
    problem = MoeProblem(experts, n, k, layout, capacity, rng)
    total = capacity if layout == "contiguous" else experts * capacity
    routing = problem.routing(random_counts("uniform", experts, total // 2, rng))
    a, b, sfa, sfb, r = tensors(torch, problem, routing)
    alpha = torch.tensor([1e-3, 2.0, -0.5, 7.0], dtype=torch.float32)
    out = ops.moe_gemm(a, b, sfa, sfb, r, layout, alpha, torch.bfloat16).reshape(-1, n)
    assert out.dtype == torch.bfloat16
    for e, (start, stop) in enumerate(routing.row_ranges):
        if stop > start:
            ref = problem.reference(routing, e) * float(alpha[e])
            got = out[start:stop].float().numpy()
            assert relative_error(got, ref) <= BF16_TOLERANCE, e
    with pytest.raises(InvalidProblemError, match=r"alpha must be float32 of shape \(4,\)"):
        ops.moe_gemm(a, b, sfa, sfb, r, layout, alpha[:3])
    with pytest.raises(InvalidProblemError, match="alpha must have dtype float32"):
        ops.moe_gemm(a, b, sfa, sfb, r, layout, alpha.double())
    with pytest.raises(InvalidProblemError, match="out_dtype must be float16 or bfloat16"):
        ops.moe_gemm(a, b, sfa, sfb, r, layout, None, torch.float32)


def test_route_matches_the_layout(torch, ops):
    """route(): the permutation sorts by expert (stable), offsets and blocked scale rows
    follow scale_offsets(); blocked_scales() writes what moe_data writes."""
    rng = np.random.default_rng(7)
    tokens, top_k, experts, k = 300, 4, 40, 256
    top = np.stack([rng.choice(experts, size=top_k, replace=False) for _ in range(tokens)])
    top[top == 3] = 4  # expert 3 empty (ties within a token are fine for the layout)
    r = ops.route(torch.from_numpy(top), experts)
    flat = top.reshape(-1)
    order = np.argsort(flat, kind="stable")
    counts = np.bincount(flat, minlength=experts)
    offsets = np.concatenate([[0], np.cumsum(counts)])
    assert r.offsets.dtype == torch.int32
    assert np.array_equal(r.offsets.numpy(), offsets)
    assert np.array_equal(r.order.numpy(), order)
    assert np.array_equal(r.tokens.numpy(), order // top_k)
    assert np.array_equal(r.experts.numpy(), flat[order])
    starts = scale_offsets(counts)
    expected_rows = [starts[e] + i for e in range(experts) for i in range(counts[e])]
    assert r.scale_rows.tolist() == expected_rows
    assert r.scale_row_count == contiguous_scale_rows(tokens * top_k, experts)

    scales = random_problem(tokens * top_k, 32, k, rng).sfa.copy()  # row-major (rows, k/16)
    blocked = ops.blocked_scales(torch.from_numpy(scales), r.scale_rows, r.scale_row_count)
    row_bytes = k // 16
    expected = np.zeros(r.scale_row_count * row_bytes, dtype=np.uint8)
    for e in range(experts):
        if counts[e]:
            block = scales_to_blocked(scales[offsets[e] : offsets[e + 1]])
            expected[starts[e] * row_bytes : starts[e] * row_bytes + block.size] = block
    assert np.array_equal(blocked.numpy(), expected)
    into = torch.full((expected.size,), 7, dtype=torch.uint8).view(torch.float8_e4m3fn)
    ops.blocked_scales(torch.from_numpy(scales), r.scale_rows, r.scale_row_count, out=into)
    assert np.array_equal(into.view(torch.uint8).numpy(), expected)


def test_blocked_scales_pads_columns(torch, ops):
    scales = np.arange(5 * 3, dtype=np.uint8).reshape(5, 3) + 1
    rows = torch.arange(5)
    blocked = ops.blocked_scales(torch.from_numpy(scales), rows, 128)
    assert np.array_equal(blocked.numpy(), scales_to_blocked(scales))


def fake_operands(torch, layout, experts=6, n=64, k=128, capacity=200, device="cpu"):
    if layout == "contiguous":
        a = torch.empty((capacity, k // 2), dtype=torch.uint8, device=device)
        sfa_rows = contiguous_scale_rows(capacity, experts)
        routing = torch.empty(experts + 1, dtype=torch.int32, device=device)
    else:
        a = torch.empty((experts, capacity, k // 2), dtype=torch.uint8, device=device)
        sfa_rows = experts * -(-capacity // 128) * 128
        routing = torch.empty(experts, dtype=torch.int32, device=device)
    b = torch.empty((experts, n, k // 2), dtype=torch.uint8, device=device)
    sfa = torch.empty(sfa_rows * k // 16, dtype=torch.float8_e4m3fn, device=device)
    sfb = torch.empty(experts * blocked_scale_bytes(n, k), dtype=torch.uint8, device=device)
    return a, b, sfa, sfb, routing


@pytest.mark.parametrize("layout", ["contiguous", "masked"])
def test_fake_impl_gives_the_shape(torch, ops, layout):
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        operands = fake_operands(torch, layout)
        c = torch.ops.nvfp4_aot.moe_gemm(*operands, layout)
        expected = (6, 200, 64) if layout == "masked" else (200, 64)
        assert tuple(c.shape) == expected and c.dtype == torch.float16
        out = torch.empty(expected, dtype=torch.float16)
        torch.ops.nvfp4_aot.moe_gemm_out(*operands, out, layout)
        with pytest.raises(InvalidProblemError, match=r"routing must be int32"):
            a, b, sfa, sfb, routing = operands
            torch.ops.nvfp4_aot.moe_gemm(a, b, sfa, sfb, routing[:-1], layout)
    assert mode is not None


def test_meta_tensors(torch, ops):
    operands = fake_operands(torch, "contiguous", device="meta")
    c = ops.moe_gemm(*operands)
    assert c.device.type == "meta" and tuple(c.shape) == (200, 64)


BAD = [  # (field, change, message)
    ("a", lambda t: t[:, :-1], r"a must be \(tokens, k/2=64\)"),
    ("a", lambda t: t.new_zeros(200, 128)[:, :64], r"a must be contiguous"),
    ("b", lambda t: t[0], r"b must be \(experts, n, k/2\)"),
    ("b", lambda t: t.float(), r"b must have dtype uint8"),
    ("sfa", lambda t: t[:-1], r"sfa must hold at least 7168 bytes"),
    ("sfb", lambda t: t.reshape(6, -1), r"sfb must be 1-D"),
    ("routing", lambda t: t.long(), r"routing must have dtype int32"),
    ("out", lambda t: t.float(), r"out must be float16"),
    ("out", lambda t: t[:-1], r"out must have shape \(200, 64\)"),
]


@pytest.mark.parametrize(
    "field,change,message", BAD, ids=[f"{b[0]}-{i}" for i, b in enumerate(BAD)]
)
def test_bad_operands_name_the_field(torch, ops, field, change, message):
    a, b, sfa, sfb, routing = fake_operands(torch, "contiguous")
    operands = [
        torch.zeros_like(a), torch.zeros_like(b), torch.zeros(sfa.numel(), dtype=torch.uint8),
        torch.zeros_like(sfb), torch.zeros_like(routing),
    ]  # fmt: skip
    out = torch.zeros((200, 64), dtype=torch.float16)
    if field == "out":
        out = change(out)
    else:
        index = ["a", "b", "sfa", "sfb", "routing"].index(field)
        operands[index] = change(operands[index])
    with pytest.raises(InvalidProblemError, match=message):
        ops.moe_gemm_out(*operands, out)
    with pytest.raises(InvalidProblemError, match="layout must be one of"):
        ops.moe_gemm(*fake_operands(torch, "contiguous"), "ragged")


def test_compile_fullgraph_traces_the_ops(torch, ops):
    """torch.compile(fullgraph=True) of a function calling both ops (aot_eager: the
    fake implementations, functionalisation of moe_gemm_out; CPU reference at run)."""
    rng = np.random.default_rng(11)
    problem = MoeProblem(4, 64, 128, "contiguous", 256, rng)
    routing = problem.routing(random_counts("skewed", 4, 200, rng))
    a, b, sfa, sfb, r = tensors(torch, problem, routing)

    def layer(a, b, sfa, sfb, r):
        c = ops.moe_gemm(a, b, sfa, sfb, r)
        out = torch.zeros_like(c)
        ops.moe_gemm_out(a, b, sfa, sfb, r, out)
        return c[:200].float() * 2, out

    compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")
    got, out = compiled(a, b, sfa, sfb, r)
    want, want_out = layer(a, b, sfa, sfb, r)
    assert torch.equal(got, want) and torch.equal(out, want_out)


def _load_example():
    spec = importlib.util.spec_from_file_location("torch_moe", REPO / "examples/torch_moe.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make_example_layer(torch, example, experts=7, hidden=128, ffn=64, top_k=2, seed=3):
    torch.manual_seed(seed)
    router = torch.randn(hidden, experts) / hidden**0.5
    w1 = torch.randn(experts, 2 * ffn, hidden) / hidden**0.5
    w2 = torch.randn(experts, hidden, ffn) / ffn**0.5
    layer = example.make_layer_class()(router, w1, w2, top_k)
    layer.w1_float, layer.w2_float = w1.double().numpy(), w2.double().numpy()
    return layer


@pytest.mark.parametrize("bias", [False, True], ids=["random-router", "two-experts"])
def test_example_layer_on_cpu(torch, ops, bias, capsys):
    """The example's layer end to end on CPU tensors through the ops' CPU paths (the
    numpy quantizer, the float64 GEMM reference): BF16 hidden -> route -> quantize
    (contiguous, index) -> gate/up GEMM (alpha, BF16) -> SiLU * up -> quantize -> down
    GEMM -> combine, checked as the example checks it (quantizer bytes, float64 of the
    same quantized operands)."""
    example = _load_example()
    layer = make_example_layer(torch, example)
    if bias:
        layer.router_bias[:2] = 100.0
    x = torch.randn(90, 128).to(torch.bfloat16)
    y, trace = layer(x)
    assert y.dtype == torch.bfloat16 and tuple(y.shape) == (90, 128)
    assert trace["c1"].dtype == torch.bfloat16 and trace["a1"].shape == (180, 64)
    assert example.check(layer, y, trace, "cpu", x=x)
    out = capsys.readouterr().out
    assert "MISMATCH" not in out and "= numpy reference" in out
    # and against the unquantized float64 layer, loosely (FP4 error)
    assert relative_error(y.double().numpy(), example.exact_layer(layer, x)) < 0.5


def test_example_check_catches_a_wrong_layer(torch, ops, capsys):
    """The example's check fails on a wrong alpha and on a flipped quantizer byte."""
    example = _load_example()
    layer = make_example_layer(torch, example, seed=4)
    x = torch.randn(40, 128).to(torch.bfloat16)
    y, trace = layer(x)
    bad = dict(trace, alpha1=trace["alpha1"] * 1.01)
    assert not example.check(layer, y, bad, "wrong alpha")
    a2 = trace["a2"].clone()
    a2[3, 5] ^= 0x11
    assert not example.check(layer, y, dict(trace, a2=a2), "flipped byte")
    assert "DIFFER" in capsys.readouterr().out


class RecordingPlan:
    """Stands in for MoeGemmPlan in the CUDA implementation's bookkeeping test."""

    made: list = []

    def __init__(self, experts, n, k, *, layout, capacity, device, out_dtype, alpha):
        self.key = (experts, n, k, layout, capacity, device, out_dtype, alpha)
        self.runs, self.closed = [], False
        RecordingPlan.made.append(self)

    def run(self, *pointers, stream, alpha=None):
        self.runs.append((pointers, stream) if alpha is None else (pointers, stream, alpha))

    def close(self):
        self.closed = True


def test_cuda_path_plans_and_graph_slots(torch, ops, monkeypatch):
    """The CUDA implementation's host side on CPU tensors, with the plan and torch.cuda
    stubbed: one plan per (shape, expert weights), pointers and the current stream
    passed through, captured plans kept."""
    from nvfp4_aot import moe

    capturing = [False]
    monkeypatch.setattr(moe, "MoeGemmPlan", RecordingPlan)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: capturing[0])
    monkeypatch.setattr(ops, "_current_stream", lambda _torch, _device: 77)
    RecordingPlan.made = []
    ops.release_plans()
    a, b, sfa, sfb, routing = (
        torch.zeros(t.shape, dtype=t.dtype) for t in fake_operands(torch, "contiguous")
    )
    out = torch.zeros((200, 64), dtype=torch.float16)
    run = ops._moe_gemm_out_cuda
    run(a, b, sfa, sfb, routing, out)
    run(a, b, sfa, sfb, routing, out)
    assert len(RecordingPlan.made) == 1
    plan = RecordingPlan.made[0]
    assert plan.key == (6, 64, 128, "contiguous", 200, None, "float16", False)  # CPU: index None
    pointers = (a.data_ptr(), b.data_ptr(), out.data_ptr(), sfa.data_ptr(), sfb.data_ptr(),
                routing.data_ptr())  # fmt: skip
    assert plan.runs == [(pointers, 77)] * 2
    b2 = b.clone()
    run(a, b2, sfa, sfb, routing, out)  # other expert weights: another plan
    assert len(RecordingPlan.made) == 2 and ops.plans() == RecordingPlan.made

    capturing[0] = True
    run(a, b, sfa, sfb, routing, out)  # captured: the plan gives it a capture slot
    run(a, b, sfa, sfb, routing, out.clone())  # other operands: another capture slot
    with pytest.raises(RuntimeError, match="run the module once eagerly"):
        run(a, b.clone(), sfa, sfb, routing, out)
    assert len(plan.runs) == 4
    capturing[0] = False
    ops.release_plans()
    assert all(p.closed for p in RecordingPlan.made) and ops.plans() == []
    run(a, b, sfa, sfb, routing, out.clone())  # after release: a new plan, no conflict
    assert len(RecordingPlan.made) == 3
    # BF16 output and alpha: a plan of that epilogue, alpha's address passed per run
    alpha = torch.ones(6, dtype=torch.float32)
    out16 = torch.zeros((200, 64), dtype=torch.bfloat16)
    run(a, b, sfa, sfb, routing, out16, "contiguous", alpha)
    assert RecordingPlan.made[-1].key[-2:] == ("bfloat16", True)
    assert RecordingPlan.made[-1].runs[-1][-1] == alpha.data_ptr()
    ops.release_plans()


# the quantizer op -----------------------------------------------------------------------


def bf16(torch, rng, shape, scale=3.0):
    return torch.from_numpy(rng.standard_normal(shape).astype(np.float32) * scale).bfloat16()


def host_bits(torch, x):
    if x.dtype == torch.bfloat16:
        return x.view(torch.int16).numpy().view(np.uint16)
    return x.numpy()


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("rows,k", [(1, 16), (37, 96), (130, 160), (300, 2048)])
def test_quantize_plain_cpu_equals_numpy(torch, ops, dtype, rows, k):
    from nvfp4_aot.quantize import quantize

    rng = np.random.default_rng(rows + k)
    x = bf16(torch, rng, (rows, k)).to(getattr(torch, dtype))
    x[0, :16] = 0  # an all-zero block
    g = ops.global_scale(x)
    packed, scales = ops.quantize(x, g)
    q = quantize(host_bits(torch, x))  # default g: 2688 / amax, the same float32
    assert float(g) == float(q.global_scale)
    assert packed.dtype == torch.uint8 and tuple(packed.shape) == (rows, k // 2)
    assert np.array_equal(packed.numpy(), q.packed)
    assert np.array_equal(scales.numpy(), q.scales_blocked)
    assert float(ops.global_scale(torch.zeros(4, 16, dtype=torch.bfloat16))) == 1.0


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_global_scale_special_values(torch, ops, dtype):
    """2688 / amax(|x|) in float32 (the former eight-kernel expression), 1 for all zeros,
    also where amax is NaN, inf, negative-signed or subnormal."""
    rng = np.random.default_rng(7)
    base = bf16(torch, rng, (3, 32)).to(getattr(torch, dtype))
    tiny = torch.finfo(getattr(torch, dtype)).smallest_normal / 4
    cases = {"random": base, "zeros": torch.zeros_like(base), "-7 largest": base.clone(),
             "nan": base.clone(), "inf": base.clone(), "subnormal": torch.full_like(base, tiny)}  # fmt: skip
    cases["-7 largest"][1, 3] = -7.0 * float(base.abs().max())
    cases["nan"][2, 5] = float("nan")
    cases["inf"][0, 0] = float("-inf")
    for name, x in cases.items():
        amax = x.abs().amax().float().reshape(1)
        expected = torch.where(
            amax > 0, torch.full_like(amax, 2688.0) / amax, torch.ones_like(amax)
        )
        got = ops.global_scale(x)
        assert got.dtype == torch.float32 and tuple(got.shape) == (1,), name
        assert torch.equal(got, expected) or (got.isnan() & expected.isnan()).all(), (
            name,
            got,
            expected,
        )


def test_quantize_contiguous_cpu_is_the_gemm_layout(torch, ops):
    """Contiguous with index: row i is quantize(x[index[i]]) and the scales are the
    contiguous layout's SFA (blocked_scales of the row-major scales at route()'s rows);
    without index row i reads x[i]; padding scale rows zero."""
    from nvfp4_aot.quantize import quantize

    rng = np.random.default_rng(2)
    tokens, top_k, experts, k = 150, 3, 9, 224
    x = bf16(torch, rng, (tokens, k))
    top = torch.from_numpy(
        np.stack([rng.choice(experts, top_k, replace=False) for _ in range(tokens)])
    )
    top[top == 2] = 5  # expert 2 empty
    r = ops.route(top, experts)
    g = torch.tensor([7.5], dtype=torch.float32)
    packed, scales = ops.quantize(x, g, r.offsets, r.tokens.to(torch.int32), "contiguous")
    q = quantize(host_bits(torch, x)[r.tokens.numpy()], np.float32(7.5))
    assert np.array_equal(packed.numpy(), q.packed)
    want = ops.blocked_scales(torch.from_numpy(q.scales.copy()), r.scale_rows, r.scale_row_count)
    assert np.array_equal(scales.numpy(), want.numpy())
    # no index: row i reads x[i] (the down projection's h, already in expert order)
    h = bf16(torch, rng, (tokens * top_k, 64))
    packed, scales = ops.quantize(h, g, r.offsets, None, "contiguous")
    q = quantize(host_bits(torch, h), np.float32(7.5))
    assert np.array_equal(packed.numpy(), q.packed)
    want = ops.blocked_scales(torch.from_numpy(q.scales.copy()), r.scale_rows, r.scale_row_count)
    assert np.array_equal(scales.numpy(), want.numpy())


def test_quantize_masked_cpu(torch, ops):
    from nvfp4_aot.quantize import quantize

    rng = np.random.default_rng(3)
    experts, max_m, k = 3, 40, 64
    x = bf16(torch, rng, (experts, max_m, k)).half()
    masked_m = torch.tensor([40, 0, 17], dtype=torch.int32)
    g = torch.tensor(2.0)
    packed, scales = ops.quantize(x, g.reshape(1), masked_m, None, "masked")
    assert tuple(packed.shape) == (experts, max_m, k // 2)
    per = blocked_scale_bytes(max_m, k)
    for e, m in enumerate(masked_m.tolist()):
        if m:
            q = quantize(x[e, :m].numpy(), np.float32(2.0))
            assert np.array_equal(packed[e, :m].numpy(), q.packed)
            assert np.array_equal(scales[e * per : (e + 1) * per].numpy(), q.scales_blocked)
        assert not packed[e, m:].any()  # unwritten: zero on the CPU


@pytest.mark.parametrize("form", ["plain", "contiguous", "masked"])
def test_quantize_fake_shapes(torch, ops, form):
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        g = torch.empty(1)
        if form == "plain":
            packed, scales = torch.ops.nvfp4_aot.quantize(
                torch.empty(200, 96, dtype=torch.bfloat16), g
            )
            want = ((200, 48), blocked_scale_bytes(200, 96))
        elif form == "contiguous":
            x = torch.empty(50, 96, dtype=torch.float16)
            offsets = torch.empty(7, dtype=torch.int32)
            index = torch.empty(400, dtype=torch.int32)
            packed, scales = torch.ops.nvfp4_aot.quantize(x, g, offsets, index, form)
            want = ((400, 48), contiguous_scale_rows(400, 6) * 8)
        else:
            x = torch.empty(4, 30, 96, dtype=torch.bfloat16)
            routing = torch.empty(4, dtype=torch.int32)
            packed, scales = torch.ops.nvfp4_aot.quantize(x, g, routing, None, form)
            want = ((4, 30, 48), 4 * blocked_scale_bytes(30, 96))
        assert (tuple(packed.shape), scales.numel()) == want
        assert packed.dtype == scales.dtype == torch.uint8 and scales.dim() == 1
    meta = ops.quantize(torch.empty(5, 32, dtype=torch.bfloat16, device="meta"),
                        torch.empty(1, device="meta"))  # fmt: skip
    assert meta[0].device.type == "meta" and tuple(meta[0].shape) == (5, 16)


QUANT_BAD = [  # (form, change(x, g, routing, index) -> operands, message)
    ("plain", lambda x, g, r, i: (x.float(), g, None, None), r"x must have dtype bfloat16 or float16"),
    ("plain", lambda x, g, r, i: (x[:, :40], g, None, None), r"k must be a multiple of 16"),
    ("plain", lambda x, g, r, i: (x[:, :32], g, None, None), r"x must be contiguous"),
    ("plain", lambda x, g, r, i: (x[None], g, None, None), r"x must be \(T, k\)"),
    ("plain", lambda x, g, r, i: (x, g.double(), None, None), r"global_scale must be float32"),
    ("plain", lambda x, g, r, i: (x, g.repeat(2), None, None), r"global_scale must be float32 with one"),
    ("plain", lambda x, g, r, i: (x, g, r, None), r"routing is not an operand of the plain form"),
    ("plain", lambda x, g, r, i: (x, g, None, i), r"index is not an operand of the plain form"),
    ("contiguous", lambda x, g, r, i: (x, g, None, i), r"routing is required by the contiguous form"),
    ("contiguous", lambda x, g, r, i: (x, g, r.long(), i), r"routing must be a 1-D int32"),
    ("contiguous", lambda x, g, r, i: (x, g, r, i.long()), r"index must be a 1-D int32"),
    ("contiguous", lambda x, g, r, i: (x, g, r, i[:0]), r"capacity must be an int >= 1"),
    ("contiguous", lambda x, g, r, i: (x[0], g, r, i), r"x must be \(rows, k\) for the contiguous"),
    ("masked", lambda x, g, r, i: (x, g, r[:4], None), r"x must be \(experts, max_m, k\)"),
    ("masked", lambda x, g, r, i: (x.reshape(2, 10, 64), g, r[:3], None), r"routing must be int32 masked_m\[E\] of shape \(2,\)"),
    ("masked", lambda x, g, r, i: (x.reshape(2, 10, 64), g, r[:2], i), r"index is not an operand of the masked form"),
    ("ragged", lambda x, g, r, i: (x, g, r, i), r"form must be one of"),
]  # fmt: skip


@pytest.mark.parametrize(
    "form,change,message", QUANT_BAD, ids=[f"{b[0]}-{i}" for i, b in enumerate(QUANT_BAD)]
)
def test_quantize_bad_inputs_name_the_field(torch, ops, form, change, message):
    x = torch.zeros(20, 64, dtype=torch.bfloat16)
    g = torch.ones(1)
    offsets = torch.tensor([0, 10, 20, 40], dtype=torch.int32)
    index = torch.zeros(40, dtype=torch.int32)
    operands = change(x, g, offsets, index)
    with pytest.raises(InvalidProblemError, match=message):
        ops.quantize(*operands, form)
    from torch._subclasses.fake_tensor import FakeTensorMode

    if "must be contiguous" in message:
        return  # a property of real tensors: fake ones are not checked for it
    with FakeTensorMode() as mode, pytest.raises(InvalidProblemError, match=message):
        fake = [None if t is None else mode.from_tensor(t) for t in operands]
        torch.ops.nvfp4_aot.quantize(*fake, form)


def test_compile_fullgraph_traces_quantize(torch, ops):
    """torch.compile(fullgraph=True, aot_eager) of quantize -> moe_gemm: the fake
    implementations trace it, the CPU implementations run it, results as eager."""
    example = _load_example()
    layer = make_example_layer(torch, example, experts=4, hidden=64, ffn=32, seed=9)
    x = torch.randn(30, 64).to(torch.bfloat16)
    compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")
    y, trace = compiled(x)
    y_eager, trace_eager = layer(x)
    for name in ("a1", "sfa1", "a2", "sfa2"):
        assert torch.equal(trace[name], trace_eager[name]), name
    assert torch.equal(y, y_eager)


class RecordingQuantizePlan:
    made: list = []

    def __init__(self, k, *, form, rows, capacity, experts, dtype, device):
        self.key = (k, form, rows, capacity, experts, dtype, device)
        self.runs, self.closed = [], False
        RecordingQuantizePlan.made.append(self)

    def run(self, *pointers, stream):
        self.runs.append((pointers, stream))

    def close(self):
        self.closed = True


def test_current_stream_prefers_the_raw_accessor():
    """The stream handle comes from torch's raw accessor where torch has one (no Stream
    object), else from torch.cuda.current_stream, for the given device either way (fakes
    of torch: runs without it)."""
    from types import SimpleNamespace

    from nvfp4_aot import torch_ops as ops

    device = SimpleNamespace(index=3)
    asked = []
    fallback = SimpleNamespace(
        current_stream=lambda d: asked.append(d) or SimpleNamespace(cuda_stream=9)
    )
    with_raw = SimpleNamespace(_C=SimpleNamespace(_cuda_getCurrentRawStream=lambda i: 1000 + i),
                               cuda=fallback)  # fmt: skip
    assert ops._current_stream(with_raw, device) == 1003 and asked == []
    without = SimpleNamespace(_C=SimpleNamespace(), cuda=fallback)
    assert ops._current_stream(without, device) == 9 and asked == [device]


def test_quantize_cuda_path_plans(torch, ops, monkeypatch):
    """The CUDA implementation's host side on CPU tensors, QuantizePlan and torch.cuda
    stubbed: one plan per shape, pointers (None for absent operands) and the current
    stream passed through, no plan made during capture, captured plans kept."""
    from nvfp4_aot import quantizer

    capturing = [False]
    monkeypatch.setattr(quantizer, "QuantizePlan", RecordingQuantizePlan)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: capturing[0])
    monkeypatch.setattr(ops, "_current_stream", lambda _torch, _device: 55)
    RecordingQuantizePlan.made = []
    ops.release_plans()
    x = torch.zeros(20, 64, dtype=torch.bfloat16)
    g = torch.ones(1)
    offsets = torch.tensor([0, 10, 20, 40], dtype=torch.int32)
    index = torch.zeros(40, dtype=torch.int32)
    run = ops._quantize_cuda
    packed, scales = run(x, g, offsets, index, "contiguous")
    run(x, g, offsets, index, "contiguous")
    assert len(RecordingQuantizePlan.made) == 1
    plan = RecordingQuantizePlan.made[0]
    assert plan.key == (64, "contiguous", 20, 40, 3, "bfloat16", 0)
    pointers, stream = plan.runs[0]
    assert stream == 55 and len(pointers) == 6
    assert pointers[0] == x.data_ptr() and pointers[3:] == (g.data_ptr(), offsets.data_ptr(),
                                                            index.data_ptr())  # fmt: skip
    assert tuple(packed.shape) == (40, 32) and scales.numel() == contiguous_scale_rows(40, 3) * 4
    # a known signature is checked for placement again: a transposed x of the same shape
    with pytest.raises(InvalidProblemError, match="x must be contiguous"):
        run(torch.zeros(64, 20, dtype=torch.bfloat16).t(), g, offsets, index, "contiguous")
    with pytest.raises(InvalidProblemError, match="index must be contiguous"):
        run(x, g, offsets, torch.zeros(80, dtype=torch.int32)[::2], "contiguous")
    run(x, g)  # plain: another plan, routing and index None
    assert RecordingQuantizePlan.made[-1].key[:5] == (64, "plain", 20, 20, 1)
    assert RecordingQuantizePlan.made[-1].runs[0][0][4:] == (None, None)
    capturing[0] = True
    run(x, g)  # a known plan: fine while capturing
    with pytest.raises(RuntimeError, match="run the module once eagerly"):
        run(x.half(), g)
    capturing[0] = False
    assert len(ops.plans()) == 2
    ops.release_plans()
    assert all(p.closed for p in RecordingQuantizePlan.made)


def test_quantize_cuda_path_with_the_real_plan(torch, ops, monkeypatch):
    """The CUDA implementation with the real QuantizePlan against the fake driver
    (committed sm_90a artifacts; int pointers to CPU tensors, launches recorded): the
    plan's constructor and run() accept what the op passes, in every form."""
    from fake_driver import FakeDriver, installed
    from nvfp4_aot import loader
    from support import kernel_params_of

    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    monkeypatch.setattr(ops, "_current_stream", lambda _torch, _device: 0)
    ops.release_plans()
    fake = FakeDriver(capability=(9, 0), kernel_params=kernel_params_of(loader.load_manifest()))
    with installed(fake):
        x = torch.zeros(20, 64, dtype=torch.bfloat16)
        g = torch.ones(1)
        offsets = torch.tensor([0, 10, 20, 40], dtype=torch.int32)
        index = torch.zeros(40, dtype=torch.int32)
        before = len(fake.launches)
        packed, scales = ops._quantize_cuda(x, g, offsets, index, "contiguous")
        assert tuple(packed.shape) == (40, 32) and len(fake.launches) > before
        ops._quantize_cuda(x.half(), g)
        ops._quantize_cuda(x.reshape(2, 10, 64), g, offsets[:2], None, "masked")
        ops._quantize_cuda(x, g, offsets, None, "contiguous")  # rows = capacity = 20
        assert len(ops.plans()) == 4
        assert all(type(p).__name__ == "QuantizePlan" for p in ops.plans())
        ops.release_plans()
