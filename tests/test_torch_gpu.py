"""The torch ops on a real GPU: torch.ops.nvfp4_aot.moe_gemm / moe_gemm_out.

Correctness against the float64 reference on random routings (empty experts, all empty,
one expert), both layouts and more experts than one launch holds; unrouted rows of
``out`` untouched; the fake implementation's shape on CUDA fake tensors;
``torch.compile(fullgraph=True)``; one ``torch.cuda.graph`` capture replayed with new
routings; and no host sync (``torch.cuda.set_sync_debug_mode("error")``) on the routing
helpers and the ops. Skipped without torch with CUDA (or fails under
NVFP4_AOT_REQUIRE_GPU=1, as every GPU test).
"""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

from nvfp4_aot.moe_data import ROUTING_KINDS, MoeProblem, random_counts
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
