"""The torch ops on a real GPU: torch.ops.nvfp4_aot.moe_gemm / moe_gemm_out / quantize.

moe_gemm: correctness against the float64 reference on random routings (empty experts,
all empty, one expert), both layouts and more experts than one launch holds; unrouted
rows of ``out`` untouched; the fake implementation's shape on CUDA fake tensors;
``torch.compile(fullgraph=True)``; one ``torch.cuda.graph`` capture replayed with new
routings; and no host sync (``torch.cuda.set_sync_debug_mode("error")``) on the routing
helpers and the ops. quantize: its bytes against the numpy reference in every form; the
torch example end to end in this process; one CUDA graph of the whole example layer
replayed with new routings. Skipped without torch with CUDA (or fails under
NVFP4_AOT_REQUIRE_GPU=1, as every GPU test).
"""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

from nvfp4_aot.moe_data import ROUTING_KINDS, MoeProblem, random_counts
from nvfp4_aot.quantize import default_global_scale
from nvfp4_aot.reference import relative_error
from support import gpu_unavailable

pytestmark = pytest.mark.gpu

TOLERANCE = 1e-3
POISON = -1  # int16 view of FP16 0xFFFF (a NaN)


@pytest.fixture(scope="module")
def torch(device):
    try:
        import torch
    except ImportError as exc:
        gpu_unavailable(f"torch is not importable: {exc}")
    if not torch.cuda.is_available():
        gpu_unavailable("torch sees no CUDA device")
    from nvfp4_aot import torch_ops

    torch_ops.register()
    torch.cuda.set_device(device)
    return torch


@pytest.fixture
def ops(torch):
    from nvfp4_aot import torch_ops

    yield torch_ops
    torch.cuda.synchronize()
    torch_ops.release_plans()  # graphs of the test are gone; addresses may be reused


@contextlib.contextmanager
def no_host_sync(torch):
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode("default")


class Operands:
    """A MoeProblem's operands as CUDA tensors; load() writes a routing in place."""

    def __init__(self, torch, problem: MoeProblem):
        e, n, k = problem.experts, problem.n, problem.k
        self.problem = problem
        self.a = torch.from_numpy(problem.a.copy()).cuda()
        if problem.layout == "masked":
            self.a = self.a.reshape(e, problem.capacity, k // 2)
        self.b = torch.from_numpy(problem.b.copy()).cuda().reshape(e, n, k // 2)
        self.sfb = torch.from_numpy(problem.sfb.copy()).cuda()
        first = problem.routing(np.zeros(e, dtype=np.int64))
        self.sfa = torch.zeros(first.sfa.size, dtype=torch.uint8, device="cuda")
        self.routing = torch.zeros(first.routing.size, dtype=torch.int32, device="cuda")
        self.out = torch.empty(self.a.shape[:-1] + (n,), dtype=torch.float16, device="cuda")

    def load(self, torch, routing) -> None:
        self.sfa.copy_(torch.from_numpy(routing.sfa.copy()))
        self.routing.copy_(torch.from_numpy(routing.routing.copy()))
        self.out.view(torch.int16).fill_(POISON)

    def args(self):
        return self.a, self.b, self.sfa, self.sfb, self.routing


def check(torch, operands: Operands, routing, c, label: str, untouched: bool = True):
    n = operands.problem.n
    flat = c.reshape(-1, n).cpu()
    written = np.zeros(flat.shape[0], dtype=bool)
    for e, (start, stop) in enumerate(routing.row_ranges):
        if stop <= start:
            continue
        written[start:stop] = True
        error = relative_error(flat[start:stop].numpy(), operands.problem.reference(routing, e))
        assert error <= TOLERANCE, f"{label}: expert {e} ({stop - start} rows): error {error:.3g}"
    if untouched:
        rest = flat.view(torch.int16)[torch.from_numpy(~written)]
        assert (rest == POISON).all(), f"{label}: rows outside the routing were written"


def random_routings(problem: MoeProblem, count: int, rng) -> list:
    out = []
    for i in range(count):
        kind = ROUTING_KINDS[i % len(ROUTING_KINDS)]
        if problem.layout == "contiguous":
            total = int(rng.integers(0, problem.capacity + 1))
            out.append(problem.routing(random_counts(kind, problem.experts, total, rng)))
        else:
            counts = random_counts(kind, problem.experts, problem.experts * problem.capacity, rng)
            out.append(problem.routing(np.minimum(counts, problem.capacity)))
    return out


@pytest.mark.parametrize(
    "experts,n,k,layout,capacity",
    [(8, 256, 512, "contiguous", 700), (130, 128, 256, "contiguous", 900),
     (8, 256, 512, "masked", 150), (130, 128, 128, "masked", 20)],
    ids=["E8-contiguous", "E130-contiguous", "E8-masked", "E130-masked"],
)  # fmt: skip
def test_matches_reference(torch, ops, experts, n, k, layout, capacity):
    rng = np.random.default_rng(experts + capacity)
    problem = MoeProblem(experts, n, k, layout, capacity, rng)
    operands = Operands(torch, problem)
    for i, routing in enumerate(random_routings(problem, 12, rng)):
        operands.load(torch, routing)
        ops.moe_gemm_out(*operands.args(), operands.out, layout)
        c = ops.moe_gemm(*operands.args(), layout)
        torch.cuda.synchronize()
        check(torch, operands, routing, operands.out, f"{layout} routing {i} (out)")
        check(torch, operands, routing, c, f"{layout} routing {i}", untouched=False)
    assert len(ops.plans()) == 1  # one plan per (shape, expert weights)


@pytest.mark.parametrize("layout", ["contiguous", "masked"])
def test_fake_tensor_shape_on_cuda(torch, ops, layout):
    from torch._subclasses.fake_tensor import FakeTensorMode

    experts, n, k, capacity = 6, 64, 128, 200
    problem = MoeProblem(experts, n, k, layout, capacity, np.random.default_rng(0))
    operands = Operands(torch, problem)
    with FakeTensorMode(allow_non_fake_inputs=False) as mode:
        fake = [mode.from_tensor(t) for t in operands.args()]
        c = torch.ops.nvfp4_aot.moe_gemm(*fake, layout)
    assert c.device.type == "cuda" and c.dtype == torch.float16
    assert tuple(c.shape) == tuple(operands.out.shape)
    assert not ops.plans()  # the fake implementation creates no plan


def test_compile_fullgraph(torch, ops):
    rng = np.random.default_rng(21)
    problem = MoeProblem(16, 256, 512, "contiguous", 512, rng)
    operands = Operands(torch, problem)
    routing = problem.routing(random_counts("skewed", 16, 480, rng))
    operands.load(torch, routing)

    class Projection(torch.nn.Module):
        def __init__(self, b, sfb):
            super().__init__()
            self.register_buffer("b", b)
            self.register_buffer("sfb", sfb)

        def forward(self, a, sfa, offsets):
            c = ops.moe_gemm(a, self.b, sfa, self.sfb, offsets)
            return torch.nn.functional.silu(c.float()) * 2

    module = Projection(operands.b, operands.sfb)
    compiled = torch.compile(module, fullgraph=True)
    got = compiled(operands.a, operands.sfa, operands.routing)
    want = module(operands.a, operands.sfa, operands.routing)
    rows = int(routing.routing[-1])
    # inductor fuses silu(c) * 2 into one kernel; its float rounding may differ from
    # eager's in the last bit, never more
    torch.testing.assert_close(got[:rows], want[:rows], rtol=1e-6, atol=1e-6)
    check(torch, operands, routing, ops.moe_gemm(*operands.args()), "eager", untouched=False)


@pytest.mark.parametrize("layout", ["contiguous", "masked"])
def test_cuda_graph_serves_new_routings(torch, ops, layout):
    """Captured once (torch.cuda.graph, default capture mode), replayed with new
    routings written into the same tensors, under sync debug mode "error"."""
    experts, n, k, capacity = 32, 128, 256, (600 if layout == "contiguous" else 40)
    rng = np.random.default_rng(31)
    problem = MoeProblem(experts, n, k, layout, capacity, rng)
    operands = Operands(torch, problem)
    cases = random_routings(problem, 18, rng)
    operands.load(torch, cases[0])
    # a second call in the same graph needs its own plan: other expert weights (copies)
    b2, sfb2 = operands.b.clone(), operands.sfb.clone()
    a, _b, sfa, _sfb, offsets = operands.args()

    def step():
        ops.moe_gemm_out(*operands.args(), operands.out, layout)
        return ops.moe_gemm(a, b2, sfa, sfb2, offsets, layout) * 1

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up: creates the plans outside the capture
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        functional = step()  # a graph-pool output
    assert len(ops.plans()) == 2
    for i, routing in enumerate(cases):
        operands.load(torch, routing)
        with no_host_sync(torch):
            graph.replay()
        torch.cuda.synchronize()
        check(torch, operands, routing, operands.out, f"{layout} replay {i}")
        check(torch, operands, routing, functional, f"{layout} replay {i}", untouched=False)
    # the same call eagerly afterwards, and a second graph writing another output: the
    # plan keeps each captured call's operands in a capture slot of its own
    operands.load(torch, cases[1])
    ops.moe_gemm_out(*operands.args(), operands.out, layout)
    torch.cuda.synchronize()
    check(torch, operands, routing=cases[1], c=operands.out, label=f"{layout} eager after")
    other = torch.full_like(operands.out, float("nan"))
    second = torch.cuda.CUDAGraph()
    with torch.cuda.graph(second):
        ops.moe_gemm_out(*operands.args(), other, layout)
    operands.load(torch, cases[2])
    graph.replay()
    second.replay()
    torch.cuda.synchronize()
    check(torch, operands, cases[2], operands.out, f"{layout} first graph after the second")
    check(torch, operands, cases[2], other, f"{layout} second graph", untouched=False)
    del graph, second


def test_capture_without_warm_up_says_so(torch, ops):
    problem = MoeProblem(4, 64, 128, "contiguous", 100, np.random.default_rng(3))
    operands = Operands(torch, problem)
    with pytest.raises(RuntimeError, match="run the module once eagerly before capturing"):
        with torch.cuda.graph(torch.cuda.CUDAGraph()):
            ops.moe_gemm(*operands.args())


def test_routing_helpers_on_gpu_without_host_sync(torch, ops):
    """route() + blocked_scales() + moe_gemm on the GPU: no host sync, and the same
    layout as on the CPU (checked there against moe_data)."""
    experts, top_k, tokens, n, k = 40, 4, 300, 128, 256
    gen = torch.Generator(device="cuda").manual_seed(5)
    logits = torch.randn(tokens, experts, device="cuda", generator=gen)
    logits[:, 3] = -1e9  # expert 3 empty
    scales = torch.randint(0, 0x7F, (tokens * top_k, k // 16), dtype=torch.uint8,
                           device="cuda", generator=gen)  # fmt: skip
    problem = MoeProblem(experts, n, k, "contiguous", tokens * top_k, np.random.default_rng(4))
    operands = Operands(torch, problem)
    ops.moe_gemm(*operands.args())  # warm-up: the plan
    torch.cuda.synchronize()
    with no_host_sync(torch):
        top = logits.topk(top_k, dim=-1).indices
        r = ops.route(top, experts)
        sfa = ops.blocked_scales(scales, r.scale_rows, r.scale_row_count)
        ops.moe_gemm(operands.a, operands.b, sfa, operands.sfb, r.offsets)
    torch.cuda.synchronize()
    cpu = ops.route(top.cpu(), experts)
    for name in ("order", "tokens", "experts", "offsets", "scale_rows"):
        assert torch.equal(getattr(r, name).cpu(), getattr(cpu, name)), name
    cpu_sfa = ops.blocked_scales(scales.cpu(), cpu.scale_rows, cpu.scale_row_count)
    assert torch.equal(sfa.cpu(), cpu_sfa)
    assert int(r.offsets[4] - r.offsets[3]) == 0


# the quantizer op and the example layer ------------------------------------------------


def _quantizer_matches(torch, x, g, routing, index, form, label):
    """torch_ops.quantize on the GPU against the numpy reference's bytes, where a run
    writes (quantize_routing.expected_outputs: the kernel's row map)."""
    from nvfp4_aot import torch_ops
    from nvfp4_aot.quantize_routing import expected_outputs

    torch_ops.quantize(x, g, routing, index, form)  # warm-up: the plan
    torch.cuda.synchronize()
    with no_host_sync(torch):
        packed, scales = torch_ops.quantize(x, g, routing, index, form)
    torch.cuda.synchronize()
    problem = torch_ops._quantize_check(x.cpu(), g.cpu(), None if routing is None else
                                        routing.cpu(), None if index is None else index.cpu(),
                                        form)  # fmt: skip
    rows = x.reshape(-1, x.shape[-1]).cpu()
    bits = (
        rows.view(torch.int16).numpy().view(np.uint16)
        if x.dtype == torch.bfloat16
        else rows.numpy()
    )
    want = expected_outputs(
        problem, bits, np.float32(g.cpu().reshape(()).item()),
        None if routing is None else routing.cpu().numpy(),
        None if index is None else index.cpu().numpy(),
    )  # fmt: skip
    got_out, got_scales = packed.cpu().numpy().reshape(-1), scales.cpu().numpy()
    bad_out = np.flatnonzero(got_out[want.out_written] != want.out[want.out_written])
    bad_sf = np.flatnonzero(got_scales[want.scales_written] != want.scales[want.scales_written])
    assert bad_out.size == 0 and bad_sf.size == 0, (
        f"{label}: {bad_out.size} code bytes and {bad_sf.size} scale bytes differ from "
        f"the numpy reference (first at {bad_out[:3].tolist()}, {bad_sf[:3].tolist()})"
    )
    return packed, scales


def test_current_stream_handle_is_torchs(torch, ops):
    """The ops launch on the stream torch.cuda.current_stream names, a side stream too."""
    device = torch.device("cuda", torch.cuda.current_device())
    assert ops._current_stream(torch, device) == torch.cuda.current_stream(device).cuda_stream
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        assert ops._current_stream(torch, device) == side.cuda_stream != 0


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("rows,k", [(1, 16), (3, 48), (129, 160), (1000, 2048), (64, 7168)])
def test_quantize_op_bytes_equal_numpy(torch, ops, dtype, rows, k):
    gen = torch.Generator(device="cuda").manual_seed(rows * 7 + k)
    x = (torch.randn(rows, k, device="cuda", generator=gen) * 5).to(getattr(torch, dtype))
    x[0, :16] = 0  # an all-zero block
    g = ops.global_scale(x)
    assert g.is_cuda and float(g) == float(default_global_scale(x.float().cpu().numpy()))
    _quantizer_matches(torch, x, g, None, None, "plain", f"plain {rows}x{k} {dtype}")
    _quantizer_matches(torch, x, torch.tensor([0.37], device="cuda"), None, None, "plain",
                       f"plain {rows}x{k} {dtype}, small g")  # fmt: skip
    assert len(ops.plans()) == 1  # one plan for the shape


@pytest.mark.parametrize(
    "tokens,experts,top_k,k", [(1, 128, 8, 2048), (300, 40, 4, 256), (2000, 8, 2, 512)]
)
def test_quantize_op_contiguous_and_masked(torch, ops, tokens, experts, top_k, k):
    gen = torch.Generator(device="cuda").manual_seed(tokens + experts)
    x = (torch.randn(tokens, k, device="cuda", generator=gen) * 2).to(torch.bfloat16)
    logits = torch.randn(tokens, experts, device="cuda", generator=gen)
    logits[:, 3] = -1e9  # expert 3 empty
    r = ops.route(logits.topk(top_k, dim=-1).indices, experts)
    g = ops.global_scale(x)
    _quantizer_matches(torch, x, g, r.offsets, r.tokens.to(torch.int32), "contiguous",
                       f"contiguous T={tokens} E={experts} top-{top_k}")  # fmt: skip
    h = x[r.tokens]  # rows in expert order, no index
    _quantizer_matches(torch, h, g, r.offsets, None, "contiguous", "contiguous, no index")
    max_m = max(1, tokens * top_k // experts)
    xm = (torch.randn(experts, max_m, k, device="cuda", generator=gen)).to(torch.float16)
    masked_m = torch.randint(0, max_m + 1, (experts,), device="cuda", generator=gen).int()
    _quantizer_matches(torch, xm, g, masked_m, None, "masked", f"masked E={experts} max_m={max_m}")


def _example():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "examples" / "torch_moe.py"
    spec = importlib.util.spec_from_file_location("torch_moe_example", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    "args", [("--graph", "--compile"), ("--tokens", "1", "--top-k", "8", "--experts", "64",
                                        "--hidden", "512", "--ffn", "256", "--graph")],
    ids=["default-graph-compile", "decode-T1-E64-top8"],
)  # fmt: skip
def test_example_end_to_end(torch, ops, capsys, args):
    """examples/torch_moe.py in this process: BF16 -> quantize -> GEMM -> SiLU -> quantize
    -> GEMM -> combine on the GPU, eager with no host sync, graph replays, compile."""
    assert _example().main(["--device", "0", "--seed", "5", *args]) == 0
    out = capsys.readouterr().out
    print(out)
    assert "MISMATCH" not in out and "DIFFER" not in out


def test_layer_graph_replays_new_routing(torch, ops):
    """One torch.cuda.graph capture of the whole layer (router, route, both quantizers,
    both GEMMs, combine), replayed with new hidden states and a new router bias: a new
    routing each time, every replay equal to float64 of its own quantized operands, and
    to the eager layer on the same input."""
    example = _example()
    torch.manual_seed(11)
    experts, hidden, ffn, tokens, top_k = 32, 512, 256, 96, 4
    router = torch.randn(hidden, experts, device="cuda") / hidden**0.5
    w1 = torch.randn(experts, 2 * ffn, hidden, device="cuda") / hidden**0.5
    w2 = torch.randn(experts, hidden, ffn, device="cuda") / ffn**0.5
    layer = example.make_layer_class()(router, w1, w2, top_k)
    layer.w1_float, layer.w2_float = w1.double().cpu().numpy(), w2.double().cpu().numpy()
    static_x = torch.randn(tokens, hidden, device="cuda").to(torch.bfloat16)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        layer(static_x)  # warm-up: the plans
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_y, static_trace = layer(static_x)
    seen = set()
    for i in range(4):
        static_x.copy_(torch.randn(tokens, hidden, device="cuda").to(torch.bfloat16))
        layer.router_bias.copy_(torch.randn(experts, device="cuda") * (i % 2) * 3)
        with no_host_sync(torch):
            graph.replay()
        torch.cuda.synchronize()
        offsets = tuple(static_trace["offsets"].cpu().tolist())
        seen.add(offsets)
        assert example.check(layer, static_y, static_trace, f"replay {i}"), f"replay {i}"
        y_eager, trace_eager = layer(static_x.clone())
        torch.cuda.synchronize()
        assert torch.equal(trace_eager["a1"], static_trace["a1"]), f"replay {i}: a1"
        error = relative_error(static_y.double().cpu().numpy(), y_eager.double().cpu().numpy())
        assert error <= 1e-2, f"replay {i}: graph vs eager {error:.3g}"
    assert len(seen) == 4, "the replays did not route differently"
    layer.router_bias.zero_()
    del graph
