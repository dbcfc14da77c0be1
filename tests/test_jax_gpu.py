"""nvfp4_aot.jax on a real GPU: MoE GEMMs inside jax.jit, XLA's buffers and stream.

For each configuration (those of test_moe_gpu.py) one jitted function is compiled once
and called with many routings (uniform, skewed, all to one expert, empty, sparse), each
twice: with C allocated by XLA (routed rows checked; unrouted rows are unspecified) and
with ``out=`` a poisoned, donated buffer (routed rows checked, every unrouted row must
still hold the poison: the kernels write nothing else). Then vmap, the jnp quantizer
stand-in against numpy, a failing call that must surface as a JAX error without
breaking the next call, and ``nj.quantize`` (the baked quantizer kernel) inside jit in
its three forms: every byte the kernel writes equal to the numpy reference's
(:func:`nvfp4_aot.quantize_routing.expected_outputs` with the same g, computed on the
host: XLA's float32 division on the GPU is not always correctly rounded). XLA's default flags: command buffers on (the call runs between
them). NVFP4_AOT_JAX_ROUTINGS sets the routings per configuration.
"""

from __future__ import annotations

import os

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # torch/cupy may share it

import numpy as np
import pytest

from nvfp4_aot.moe_data import ROUTING_KINDS, MoeProblem, random_counts
from support import gpu_unavailable

pytestmark = pytest.mark.gpu

TOLERANCE = 1e-3
POISON = 0xFFFF  # an FP16 NaN no kernel writes


@pytest.fixture(scope="module")
def jax(device):
    try:
        import jax
    except ImportError as exc:
        gpu_unavailable(f"jax is not installed: {exc}")
    try:
        jax.devices("gpu")
    except RuntimeError as exc:
        gpu_unavailable(f"jax sees no GPU: {exc}")
    return jax


def operands(problem: MoeProblem):
    e, n, k, cap = problem.experts, problem.n, problem.k, problem.capacity
    a = problem.a if problem.layout == "contiguous" else problem.a.reshape(e, cap, k // 2)
    return a, problem.b.reshape(e, n, k // 2)


def routings(problem: MoeProblem, count: int, rng) -> list:
    total = problem.capacity
    out = []
    for i in range(count):
        kind = ROUTING_KINDS[i % len(ROUTING_KINDS)]
        if problem.layout == "contiguous":
            counts = random_counts(kind, problem.experts, int(rng.integers(0, total + 1)), rng)
        else:
            counts = random_counts(kind, problem.experts, problem.experts * total, rng)
            counts = np.minimum(counts, rng.integers(0, total + 1, size=problem.experts))
        out.append(problem.routing(counts))
    return out


def check(problem: MoeProblem, routing, c, label: str) -> np.ndarray:
    """Routed rows within TOLERANCE of float64; returns the unrouted rows of C (as bits)."""
    c = np.asarray(c).reshape(-1, problem.n)
    unrouted = np.ones(c.shape[0], bool)
    for e, (start, stop) in enumerate(routing.row_ranges):
        unrouted[start:stop] = False
        if stop > start:
            ref = problem.reference(routing, e)
            error = np.abs(c[start:stop].astype(np.float64) - ref).max()
            scale = max(np.abs(ref).max(), 1e-30)
            assert error <= TOLERANCE * scale, f"{label}, expert {e}: error {error / scale:.2e}"
    return c[unrouted].view(np.uint16)


CONFIGS = [  # (experts, n, k, layout, capacity)
    (8, 256, 512, "contiguous", 1024),
    (32, 128, 256, "contiguous", 512),
    (128, 128, 128, "contiguous", 640),
    (256, 128, 128, "contiguous", 512),
    (8, 256, 512, "masked", 200),
    (32, 128, 256, "masked", 48),
    (128, 128, 128, "masked", 24),
    (256, 128, 128, "masked", 16),
]


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: f"E{c[0]}-{c[3]}")
def test_one_compiled_function_serves_every_routing(jax, config):
    import nvfp4_aot.jax as nj

    experts, n, k, layout, capacity = config
    count = int(os.environ.get("NVFP4_AOT_JAX_ROUTINGS", 12))
    rng = np.random.default_rng(experts * 11 + len(layout))
    problem = MoeProblem(experts, n, k, layout, capacity, rng)
    a, b = (jax.device_put(x) for x in operands(problem))
    sfb = jax.device_put(problem.sfb)
    traces = []

    @jax.jit
    def fresh(a, b, sfa, sfb, routing):
        traces.append("fresh")
        return nj.moe_gemm(a, b, sfa, sfb, routing, layout=layout)

    def keep_unrouted(a, b, sfa, sfb, routing, out):
        traces.append("kept")
        return nj.moe_gemm(a, b, sfa, sfb, routing, layout=layout, out=out)

    kept = jax.jit(keep_unrouted, donate_argnums=5)
    c_shape = (capacity, n) if layout == "contiguous" else (experts, capacity, n)
    poison = np.full(c_shape, POISON, np.uint16).view(np.float16)
    for i, routing in enumerate(routings(problem, count, rng)):
        sfa, route = jax.device_put(routing.sfa), jax.device_put(routing.routing)
        check(problem, routing, fresh(a, b, sfa, sfb, route), f"routing {i}, C from XLA")
        rest = check(
            problem, routing, kept(a, b, sfa, sfb, route, jax.device_put(poison)),
            f"routing {i}, out=",
        )  # fmt: skip
        assert (rest == POISON).all(), f"routing {i}: a row no expert owns was written"
    assert sorted(traces) == ["fresh", "kept"]  # one trace each, whatever the routing


def test_vmap_runs_each_batch_element(jax):
    import nvfp4_aot.jax as nj

    rng = np.random.default_rng(5)
    problem = MoeProblem(8, 256, 512, "masked", 64, rng)
    a, b = operands(problem)
    r1, r2 = problem.routing([64, 0, 3, 17, 64, 1, 0, 9]), problem.routing([5] * 8)
    stacked = jax.jit(
        jax.vmap(lambda ro: nj.moe_gemm(a, b, r1.sfa, problem.sfb, ro, layout="masked"))
    )(np.stack([r1.routing, r2.routing]))
    check(problem, r1, stacked[0], "vmap element 0")
    check(problem, r2, stacked[1], "vmap element 1")


def test_a_failing_call_is_a_jax_error_and_the_next_one_works(jax, monkeypatch):
    import nvfp4_aot.jax as nj
    from nvfp4_aot.jax import handler

    rng = np.random.default_rng(6)
    problem = MoeProblem(4, 96, 192, "contiguous", 256, rng)  # a shape no other test uses
    a, b = operands(problem)
    routing = problem.routing([10, 0, 100, 146])
    step = jax.jit(nj.moe_gemm)

    def refuse(key, stream):
        raise RuntimeError(f"refused for the test: {key}")

    monkeypatch.setattr(handler, "_new_plan", refuse)
    with pytest.raises(Exception, match=r"nvfp4_aot_moe_gemm: RuntimeError: refused for the test"):
        np.asarray(step(a, b, routing.sfa, problem.sfb, routing.routing))
    monkeypatch.undo()
    check(problem, routing, step(a, b, routing.sfa, problem.sfb, routing.routing), "after")


def test_quantize_standin_on_the_gpu_matches_numpy(jax):
    from nvfp4_aot.jax import quantize_standin
    from nvfp4_aot.quantize import quantize

    rng = np.random.default_rng(7)
    run = jax.jit(quantize_standin)
    for trial in range(8):
        x = rng.standard_normal((300, 512)) * 10.0 ** rng.uniform(-6, 6, size=(300, 1))
        x = x.astype(np.float32)
        x[1] = np.tile(np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5, 6], np.float32), 64)
        # XLA's float32 division on the GPU is not always correctly rounded (2688 / amax
        # came out one ulp off on the H200), so g itself is given here; the per-block
        # steps are then compared byte for byte
        g = np.float32(2688) / np.abs(x).max()
        packed, scales, g_used = run(jax.device_put(x), g)
        q = quantize(x, g)
        assert np.float32(g_used) == q.global_scale, trial
        np.testing.assert_array_equal(np.asarray(scales), q.scales, err_msg=f"trial {trial}")
        np.testing.assert_array_equal(np.asarray(packed), q.packed, err_msg=f"trial {trial}")


def _quantize_inputs(rng, shape, dtype):
    """Wide-range values with hostile blocks: (host bits for the reference, the jax
    array, g = 2688 / amax computed on the host)."""
    import jax.numpy as jnp

    x = rng.standard_normal(shape) * 10.0 ** rng.uniform(-4, 4, size=shape[:-1] + (1,))
    x = x.astype(np.float32)
    flat = x.reshape(-1, shape[-1])
    flat[0, :16] = 0  # an all-zero block
    flat[1, 3] = -0.0
    flat[2] = np.tile(np.float32([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5, 6]), shape[-1] // 8)
    if dtype == "bfloat16":
        bits = (x.view(np.uint32) >> 16).astype(np.uint16)
        array = jnp.asarray(bits).view(jnp.bfloat16)
        values = (bits.astype(np.uint32) << 16).view(np.float32)
    else:
        bits = x.astype(np.float16)
        array, values = jnp.asarray(bits), bits.astype(np.float32)
    g = np.float32(2688) / np.float32(np.abs(values).max())
    return bits, array, g


def _check_quantized(problem, bits, g, result, routing=None, index=None, label=""):
    """Every byte the kernel writes equals the reference's (the rest is XLA's buffer)."""
    from nvfp4_aot.quantize_routing import expected_outputs

    e = expected_outputs(problem, bits.reshape(problem.rows, problem.k), g, routing, index)
    packed, scales = (np.asarray(r).reshape(-1) for r in result)
    for name, got, want, written in (("packed", packed, e.out, e.out_written),
                                     ("scales", scales, e.scales, e.scales_written)):  # fmt: skip
        bad = np.flatnonzero(written & (got != want))
        assert not bad.size, f"{label} {name}: {bad.size} bytes differ, first at {bad[0]}"


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("rows, k", [(1, 16), (300, 512), (1000, 96), (4096, 4096)])
def test_quantize_plain_inside_jit_is_the_reference(jax, dtype, rows, k):
    import nvfp4_aot.jax as nj
    from nvfp4_aot.quantize import quantize

    rng = np.random.default_rng(rows + k)
    bits, x, g = _quantize_inputs(rng, (max(rows, 3), k), dtype)
    bits, x = bits[:rows], x[:rows]
    run = jax.jit(lambda x, g: nj.quantize(x, g))
    packed, scales = run(jax.device_put(x), jax.device_put(g))
    q = quantize(bits, g)
    np.testing.assert_array_equal(np.asarray(packed), q.packed)
    np.testing.assert_array_equal(np.asarray(scales), q.scales_blocked)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_quantize_contiguous_inside_jit_serves_every_routing(jax, dtype):
    import nvfp4_aot.jax as nj
    from nvfp4_aot.quantizer import make_problem

    rng = np.random.default_rng(21)
    tokens, k, experts, capacity = 700, 512, 32, 1400
    bits, x, g = _quantize_inputs(rng, (tokens, k), dtype)
    x = jax.device_put(x)
    problem = make_problem(k, "contiguous", tokens, capacity, experts, dtype, None)
    traces = []

    @jax.jit
    def step(x, g, offsets, index):
        traces.append(1)
        return nj.quantize(x, g, form="contiguous", routing=offsets, index=index)

    count = int(os.environ.get("NVFP4_AOT_JAX_ROUTINGS", 12))
    for i in range(count):
        kind = ROUTING_KINDS[i % len(ROUTING_KINDS)]
        counts = random_counts(kind, experts, int(rng.integers(0, capacity + 1)), rng)
        offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
        index = rng.integers(0, tokens, capacity).astype(np.int32)
        gi = np.float32(g * rng.uniform(0.5, 1))
        result = step(x, jax.device_put(gi), jax.device_put(offsets), jax.device_put(index))
        _check_quantized(problem, bits, gi, result, offsets, index, f"routing {i} ({kind})")
    assert len(traces) == 1


def test_quantize_masked_inside_jit_clamps_counts(jax):
    import nvfp4_aot.jax as nj
    from nvfp4_aot.quantizer import make_problem

    rng = np.random.default_rng(22)
    experts, max_m, k = 8, 200, 256
    bits, x, g = _quantize_inputs(rng, (experts, max_m, k), "bfloat16")
    problem = make_problem(k, "masked", None, max_m, experts, "bfloat16", None)
    step = jax.jit(lambda x, g, m: nj.quantize(x, g, form="masked", routing=m))
    for masked_m in ([200, 0, 3, 17, 128, 129, 1, 64], [-5, 10**6, 0, 0, 0, 0, 0, 200]):
        masked_m = np.array(masked_m, np.int32)
        result = step(jax.device_put(x), jax.device_put(g), jax.device_put(masked_m))
        assert result[0].shape == (experts, max_m, k // 2)
        _check_quantized(problem, bits, g, result, masked_m, label=f"masked_m {masked_m}")


def test_example_jax_moe_runs(jax):
    """examples/jax_moe.py as a user runs it (exit 0: every run matches float64)."""
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=str(repo))
    result = subprocess.run(
        [sys.executable, str(repo / "examples" / "jax_moe.py"), "--repeats", "5"],
        capture_output=True, text=True, env=env, cwd=repo, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "3/3 runs match" in result.stdout
