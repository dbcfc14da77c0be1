"""MoE plans on a real GPU: device routing, one CUDA graph for every routing.

For each configuration one :class:`MoeGemmPlan` is captured once into a CUDA graph and
replayed with many routings (uniform, skewed, all tokens to one expert, all experts empty
but one, all empty, sparse), each written into the same device arrays. Before every
replay C (and a guard region after it) is poisoned with 0xFFFF; after it every expert's
rows are compared with the float64 reference and every other row, guard included, must
still hold the poison. Hostile routings (offsets out of order or past the capacity,
negative or oversized counts) must not write outside C. NVFP4_AOT_MOE_ROUTINGS sets the
routings per configuration (fewer under compute-sanitizer).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from nvfp4_aot import driver
from nvfp4_aot.moe import MoeGemmPlan
from nvfp4_aot.moe_data import ROUTING_KINDS, MoeProblem, random_counts
from nvfp4_aot.reference import relative_error

pytestmark = pytest.mark.gpu

TOLERANCE = 1e-3
POISON = 0xFFFF
GUARD_ROWS = 64
FAMILIES = ("sm90_nvfp4_grouped_gemm", "sm90_nvfp4_grouped_gemm_a16")


class DeviceMoe:
    """The operands of a MoeProblem in device memory, C followed by a guard region."""

    def __init__(self, problem: MoeProblem, routing_bytes: int, sfa_bytes: int):
        self.problem = problem
        n = problem.n
        self.c_elements = (problem.rows + GUARD_ROWS) * n
        self.buffers = {
            "a": _upload(problem.a),
            "b": _upload(problem.b),
            "sfb": _upload(problem.sfb),
            "sfa": driver.mem_alloc(sfa_bytes),
            "routing": driver.mem_alloc(routing_bytes),
            "c": driver.mem_alloc(2 * self.c_elements),
        }
        driver.memset_d8(self.buffers["sfa"], 0, sfa_bytes)

    def operands(self):
        f = self.buffers
        return f["a"], f["b"], f["c"], f["sfa"], f["sfb"], f["routing"]

    def load(self, routing) -> None:
        """Write a routing's array and scales; poison C and its guard."""
        for name in ("routing", "sfa"):
            array = np.ascontiguousarray(getattr(routing, name))
            driver.memcpy_htod(self.buffers[name], array.ctypes.data, array.nbytes)
        driver.memset_d16(self.buffers["c"], POISON, self.c_elements)
        driver.synchronize()  # the memset is queued on the legacy stream: done before runs

    def c_raw(self) -> np.ndarray:
        out = np.empty((self.problem.rows + GUARD_ROWS, self.problem.n), dtype=np.uint16)
        driver.memcpy_dtoh(out.ctypes.data, self.buffers["c"], out.nbytes)
        return out

    def free(self) -> None:
        for pointer in self.buffers.values():
            driver.mem_free(pointer)


def _upload(array: np.ndarray) -> int:
    array = np.ascontiguousarray(array)
    pointer = driver.mem_alloc(array.nbytes)
    driver.memcpy_htod(pointer, array.ctypes.data, array.nbytes)
    return pointer


def check_routing(data: DeviceMoe, routing, label: str) -> None:
    raw = data.c_raw()
    written = np.zeros(raw.shape[0], dtype=bool)
    for e, (start, stop) in enumerate(routing.row_ranges):
        if stop <= start:
            continue
        written[start:stop] = True
        out = raw[start:stop].view(np.float16).astype(np.float64)
        error = relative_error(out, data.problem.reference(routing, e))
        assert error <= TOLERANCE, f"{label}: expert {e} ({stop - start} rows): error {error:.3g}"
    untouched = raw[~written]
    assert (untouched == POISON).all(), (
        f"{label}: {int((untouched != POISON).any(axis=1).sum())} rows outside the routed "
        "ranges (or in the guard after C) were written"
    )


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


def capture(plan: MoeGemmPlan, data: DeviceMoe, stream):
    mode = driver.backend().CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED
    driver.call("cuStreamBeginCapture", stream, mode)
    try:
        plan.run(*data.operands(), stream=int(stream))
    finally:
        graph = driver.call("cuStreamEndCapture", stream)
    return graph, driver.call("cuGraphInstantiate", graph, 0)


CONFIGS = [  # (experts, n, k, layout, capacity, routings)
    (8, 256, 512, "contiguous", 1024, 100),
    (32, 128, 256, "contiguous", 512, 100),
    (128, 128, 128, "contiguous", 640, 100),
    (256, 128, 128, "contiguous", 512, 100),
    (8, 256, 512, "masked", 200, 100),
    (32, 128, 256, "masked", 48, 100),
    (128, 128, 128, "masked", 24, 100),
    (256, 128, 128, "masked", 16, 100),
]


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: f"E{c[0]}-{c[3]}")
def test_one_graph_serves_every_routing(device, family, config):
    experts, n, k, layout, capacity, count = config
    count = int(os.environ.get("NVFP4_AOT_MOE_ROUTINGS", count))  # fewer under a sanitizer
    rng = np.random.default_rng(experts * 7 + len(layout))
    problem = MoeProblem(experts, n, k, layout, capacity, rng)
    stream = driver.stream_create()
    with MoeGemmPlan(experts, n, k, layout=layout, capacity=capacity, device=device,
                     kernel=family) as plan:  # fmt: skip
        needs = plan.layout.operand_bytes()
        data = DeviceMoe(problem, needs["routing"], needs["sfa"])
        try:
            cases = routings(problem, count, rng)
            data.load(cases[0])
            graph, executable = capture(plan, data, stream)
            for i, routing in enumerate(cases):
                data.load(routing)
                driver.call("cuGraphLaunch", executable, stream)
                driver.stream_synchronize(stream)
                check_routing(data, routing, f"{family} E={experts} {layout} routing {i}")
            # the same plan eagerly after the replays
            data.load(cases[1])
            plan.run(*data.operands(), stream=int(stream))
            plan.synchronize()
            check_routing(data, cases[1], f"{family} E={experts} {layout} eager")
            driver.call("cuGraphExecDestroy", executable)
            driver.call("cuGraphDestroy", graph)
        finally:
            data.free()
            driver.stream_destroy(stream)


@pytest.mark.parametrize("layout", ["contiguous", "masked"])
def test_hostile_routings_never_write_outside_c(device, layout):
    experts, n, k, capacity = 40, 128, 256, 96 if layout == "masked" else 300
    rng = np.random.default_rng(99)
    problem = MoeProblem(experts, n, k, layout, capacity, rng)
    with MoeGemmPlan(experts, n, k, layout=layout, capacity=capacity, device=device) as plan:
        needs = plan.layout.operand_bytes()
        data = DeviceMoe(problem, needs["routing"], needs["sfa"])
        try:
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
                routing = good.__class__(good.counts, values.astype(np.int32), good.sfa, [])
                data.load(routing)
                plan.run(*data.operands())
                plan.synchronize()
                guard = data.c_raw()[problem.rows :]
                assert (guard == POISON).all(), f"{layout}: a hostile routing wrote past C"
            data.load(good)  # the plan still computes correctly afterwards
            plan.run(*data.operands())
            plan.synchronize()
            check_routing(data, good, f"{layout} after hostile routings")
        finally:
            data.free()


def test_two_layers_of_one_plan_in_one_graph(device):
    """One plan captured twice into one graph with different operands (two layers of the
    same shape): each captured run keeps its own operands; both are right on replay."""
    experts, n, k, capacity = 16, 256, 256, 256
    rng = np.random.default_rng(4242)
    problems = [MoeProblem(experts, n, k, "contiguous", capacity, rng) for _ in range(2)]
    stream = driver.stream_create()
    with MoeGemmPlan(experts, n, k, capacity=capacity, device=device) as plan:
        needs = plan.layout.operand_bytes()
        layers = [DeviceMoe(p, needs["routing"], needs["sfa"]) for p in problems]
        try:
            mode = driver.backend().CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED
            driver.call("cuStreamBeginCapture", stream, mode)
            try:
                for layer in layers:
                    plan.run(*layer.operands(), stream=int(stream))
            finally:
                graph = driver.call("cuStreamEndCapture", stream)
            executable = driver.call("cuGraphInstantiate", graph, 0)
            for step in range(3):
                routings = [
                    p.routing(random_counts(ROUTING_KINDS[step], experts, capacity, rng))
                    for p in problems
                ]
                for layer, routing in zip(layers, routings):
                    layer.load(routing)
                driver.call("cuGraphLaunch", executable, stream)
                driver.stream_synchronize(stream)
                for i, (layer, routing) in enumerate(zip(layers, routings)):
                    check_routing(layer, routing, f"layer {i} replay {step}")
            driver.call("cuGraphExecDestroy", executable)
            driver.call("cuGraphDestroy", graph)
        finally:
            for layer in layers:
                layer.free()
            driver.stream_destroy(stream)
