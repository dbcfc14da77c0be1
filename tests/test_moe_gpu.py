"""MoE plans on a real GPU: device routing, one CUDA graph for every routing.

For each configuration one :class:`MoeGemmPlan` is captured once into a CUDA graph and
replayed with many routings (uniform, skewed, all tokens to one expert, all experts empty
but one, all empty, sparse), each written into the same device arrays. Before every
replay C (and a guard region after it) is poisoned with 0xFFFF; after it every expert's
rows are compared with the float64 reference and every other row, guard included, must
still hold the poison. Hostile routings (offsets out of order or past the capacity,
negative or oversized counts) must not write outside C. Each per-CTA family runs both as
its routed twin (its CTAs build the group tables from the counts) and after the routing
kernel. NVFP4_AOT_MOE_ROUTINGS sets the routings per configuration (fewer under
compute-sanitizer).
"""

from __future__ import annotations

import os
from functools import partial

import numpy as np
import pytest

from nvfp4_aot import driver
from nvfp4_aot.device_data import NAN_F16, CapturedGraph, DeviceMoe, check_routing, random_alpha
from nvfp4_aot.manifest import EPILOGUES
from nvfp4_aot.moe import MoeGemmPlan
from nvfp4_aot.moe_data import ROUTING_KINDS, MoeProblem, random_counts
from nvfp4_aot.reference import TOLERANCE

pytestmark = pytest.mark.gpu

FAMILIES = (
    "sm90_nvfp4_grouped_gemm",
    "sm90_nvfp4_grouped_gemm_a16",
    "sm90_nvfp4_grouped_gemm_decode",
    "sm90_nvfp4_grouped_gemm_decode32",
)


def assert_right(
    data: DeviceMoe, problem: MoeProblem, routing, label: str, out_dtype="float16", alpha=None
) -> None:
    """Every expert within TOLERANCE of the float64 reference (times its alpha); every
    row outside the routed ranges, and the guard after C, still poisoned."""
    result = check_routing(data, problem, routing, TOLERANCE[out_dtype], out_dtype, alpha)
    assert result["ok"], f"{label}: {result}"


def routings(problem: MoeProblem, count: int, rng) -> list:
    total = problem.capacity
    out = []
    for i in range(count):
        kind = ROUTING_KINDS[i % len(ROUTING_KINDS)]
        if problem.layout == "contiguous":
            counts = random_counts(kind, problem.experts, int(rng.integers(0, total + 1)), rng)
        else:  # masked: up to max_m per expert
            counts = random_counts(kind, problem.experts, problem.experts * total, rng)
            counts = np.minimum(counts, rng.integers(0, total + 1, size=problem.experts))
            if kind == "one_expert":
                counts[:] = 0
                counts[rng.integers(problem.experts)] = total
        out.append(problem.routing(counts))
    return out


CONFIGS = [  # (experts, n, k, layout, capacity, routings)
    (8, 256, 512, "contiguous", 1024, 100),
    (32, 128, 256, "contiguous", 512, 100),
    (128, 128, 128, "contiguous", 640, 100),
    (256, 128, 128, "contiguous", 512, 100),
    (300, 128, 128, "contiguous", 600, 30),  # G=256 families: chunks of 256 + 44 experts
    (8, 256, 512, "masked", 200, 100),
    (32, 128, 256, "masked", 48, 100),
    (128, 128, 128, "masked", 24, 100),
    (256, 128, 128, "masked", 16, 100),
]


# (family, routed): each per-CTA family both as its routed twin builds its own tables
# (the plans' default up to 256 experts) and after the routing kernel (routed=False)
LAUNCHES = [
    (family, routed)
    for family in FAMILIES
    for routed in ((None,) if family.endswith("_a16") else (None, False))
]


def _launch_id(case) -> str:
    family, routed = case
    return family.removeprefix("sm90_nvfp4_grouped_gemm").lstrip("_") + (
        "-routing_kernel" if routed is False else ""
    )


@pytest.mark.parametrize("epilogue", EPILOGUES, ids=str)
@pytest.mark.parametrize("launch", LAUNCHES, ids=_launch_id)
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: f"E{c[0]}-{c[3]}")
def test_one_graph_serves_every_routing(device, launch, config, epilogue):
    """With alpha, every tenth replay first writes new per-expert alphas into the same
    array: the graph reads them on the device."""
    family, routed = launch
    experts, n, k, layout, capacity, count = config
    count = int(os.environ.get("NVFP4_AOT_MOE_ROUTINGS", count))  # fewer under a sanitizer
    rng = np.random.default_rng(experts * 7 + len(layout))
    problem = MoeProblem(experts, n, k, layout, capacity, rng)
    alpha = random_alpha(experts, rng) if epilogue.alpha else None
    out_dtype = epilogue.out_dtype
    stream = driver.stream_create()
    try:
        with MoeGemmPlan(experts, n, k, layout=layout, capacity=capacity, device=device,
                         kernel=family, out_dtype=out_dtype, alpha=epilogue.alpha,
                         routed=routed) as plan:  # fmt: skip
            # the routed twins serve up to 256 experts; the a16 family has none
            expect_routed = routed is None and experts <= 256 and not family.endswith("_a16")
            assert (plan.layout.routing is None) == expect_routed, plan
            with DeviceMoe.of_problem(plan.layout.operand_bytes(), problem, alpha) as data:
                cases = routings(problem, count, rng)
                data.load(cases[0].routing, cases[0].sfa)
                run = partial(plan.run, *data.operands, stream=stream, alpha=data.alpha)
                with CapturedGraph(stream, run) as graph:
                    for i, routing in enumerate(cases):
                        if alpha is not None and i % 10 == 9:
                            alpha = random_alpha(experts, rng)
                            data.write("alpha", alpha)
                        data.load(routing.routing, routing.sfa)
                        graph.launch(stream)
                        driver.stream_synchronize(stream)
                        label = f"{family} {epilogue} E={experts} {layout} routing {i}"
                        assert_right(data, problem, routing, label, out_dtype, alpha)
                    # the same plan eagerly after the replays
                    data.load(cases[1].routing, cases[1].sfa)
                    run()
                    plan.synchronize()
                    label = f"{family} {epilogue} E={experts} {layout} eager"
                    assert_right(data, problem, cases[1], label, out_dtype, alpha)
    finally:
        driver.stream_destroy(stream)


@pytest.mark.parametrize("family", ["sm90_nvfp4_grouped_gemm_decode", "sm90_nvfp4_grouped_gemm"])
@pytest.mark.parametrize("routed", [None, False], ids=["routed", "routing_kernel"])
@pytest.mark.parametrize("layout", ["contiguous", "masked"])
def test_hostile_routings_never_write_outside_c(device, layout, routed, family):
    experts, n, k, capacity = 40, 128, 256, 96 if layout == "masked" else 300
    rng = np.random.default_rng(99)
    problem = MoeProblem(experts, n, k, layout, capacity, rng)
    with MoeGemmPlan(experts, n, k, layout=layout, capacity=capacity, device=device,
                     kernel=family, routed=routed) as plan:  # fmt: skip
        assert (plan.layout.routing is None) == (routed is None), plan
        with DeviceMoe.of_problem(plan.layout.operand_bytes(), problem) as data:
            good = problem.routing(random_counts("uniform", experts, capacity // 2, rng))
            hostile = []
            if layout == "contiguous":
                size = experts + 1
                hostile.append(rng.integers(-5000, 5000, size=size))  # out of order, out of range
                hostile.append(np.full(size, capacity + 1000))  # everything past the capacity
                hostile.append(np.concatenate([[0], np.full(experts, capacity)]))  # one huge expert
                hostile.append(np.arange(size) * -7)  # decreasing, negative
            else:
                hostile.append(rng.integers(-1000, 100000, size=experts))
                hostile.append(np.full(experts, 1 << 30))
                hostile.append(np.full(experts, -1))
            for values in hostile:
                data.load(values.astype(np.int32), good.sfa)
                plan.run(*data.operands)
                plan.synchronize()
                guard = data.c_raw()[problem.rows :]
                assert (guard == NAN_F16).all(), f"{layout}: a hostile routing wrote past C"
            data.load(good.routing, good.sfa)  # the plan still computes correctly afterwards
            plan.run(*data.operands)
            plan.synchronize()
            assert_right(data, problem, good, f"{layout} after hostile routings")


def test_two_layers_of_one_plan_in_one_graph(device):
    """One plan captured twice into one graph with different operands (two layers of the
    same shape): each captured run keeps its own operands; both are right on replay."""
    experts, n, k, capacity = 16, 256, 256, 256
    rng = np.random.default_rng(4242)
    problems = [MoeProblem(experts, n, k, "contiguous", capacity, rng) for _ in range(2)]
    stream = driver.stream_create()
    with MoeGemmPlan(experts, n, k, capacity=capacity, device=device) as plan:
        needs = plan.layout.operand_bytes()
        layers = [DeviceMoe.of_problem(needs, p) for p in problems]
        try:

            def record():
                for layer in layers:
                    plan.run(*layer.operands, stream=stream)

            with CapturedGraph(stream, record) as graph:
                for step in range(3):
                    step_routings = [
                        p.routing(random_counts(ROUTING_KINDS[step], experts, capacity, rng))
                        for p in problems
                    ]
                    for layer, routing in zip(layers, step_routings):
                        layer.load(routing.routing, routing.sfa)
                    graph.launch(stream)
                    driver.stream_synchronize(stream)
                    for i, (layer, problem, routing) in enumerate(
                        zip(layers, problems, step_routings)
                    ):
                        assert_right(layer, problem, routing, f"layer {i} replay {step}")
        finally:
            for layer in layers:
                layer.free()
            driver.stream_destroy(stream)
