"""The runtime on a real GPU with the baked kernel for it (e.g. sm_90a on an H200).

Device memory is allocated through ``nvfp4_aot.driver`` (no torch or cupy needed); C is
poisoned with 0xFFFF (an FP16 NaN) before each run, and every group is compared with the
float64 reference. Skipped where there is no GPU, no driver or no variant for the GPU
(conftest.py's ``device`` fixture); failed instead under NVFP4_AOT_REQUIRE_GPU=1.
The shapes test reads tests/data/shapes.json (NVFP4_AOT_SHAPES overrides the path).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from nvfp4_aot import driver, loader, plan
from nvfp4_aot.device_data import DeviceOperands, random_alpha
from nvfp4_aot.layouts import decode_output, random_problem
from nvfp4_aot.manifest import EPILOGUES, ORIGINAL_EPILOGUE, ROLE_GEMM
from nvfp4_aot.reference import TOLERANCE, reference_gemm, relative_error
from support import gpu_unavailable

pytestmark = pytest.mark.gpu

SHAPES = Path(
    os.environ.get("NVFP4_AOT_SHAPES") or Path(__file__).resolve().parent / "data" / "shapes.json"
)
# every baked kernel family: the tests that take `kernel` run once per family that the
# GPU can run (on sm_90a: the per-CTA decode and the decode-once kernel)
FAMILIES = sorted({v.family for v in loader.load_manifest().variants if v.role == ROLE_GEMM})


@pytest.fixture(params=FAMILIES)
def kernel(request, device) -> str:
    runnable = loader.variants_for(loader.load_manifest(), driver.compute_capability(device))
    if request.param not in {v.family for v in runnable}:
        pytest.skip(f"{request.param} does not run on this GPU")
    return request.param


class CudaArray:
    """A minimal ``__cuda_array_interface__`` producer over a device pointer."""

    def __init__(self, pointer: int, shape, typestr: str):
        self.__cuda_array_interface__ = {
            "version": 3, "shape": tuple(shape), "typestr": typestr,
            "data": (pointer, False), "strides": None, "stream": None,
        }  # fmt: skip


@pytest.fixture(params=EPILOGUES, ids=str)
def epilogue(request):
    """Each baked epilogue: FP16 / BF16 output, with and without a random alpha per group."""
    return request.param


def make_operands(sizes, seed: int, epilogue=ORIGINAL_EPILOGUE, scale_range=(0.25, 4.0)):
    """Random problems in device memory (one allocation), a random alpha per group for
    an epilogue with alpha; C (of the epilogue's dtype) poisoned with NaN (0xFFFF)."""
    rng = np.random.default_rng(seed)
    problems = [random_problem(m, n, k, rng, scale_range=scale_range) for m, n, k in sizes]
    alpha = random_alpha(len(sizes), rng) if epilogue.alpha else None
    operands = DeviceOperands(
        sizes, [(p.a, p.b, p.sfa_blocked, p.sfb_blocked) for p in problems],
        alpha=alpha, out_dtype=epilogue.out_dtype,
    )  # fmt: skip
    operands.poison_c()
    return problems, operands


def check_results(problems, operands, label: str) -> None:
    """Every group against the float64 reference, times its alpha where there is one."""
    alpha = operands.alpha_values
    for g, p in enumerate(problems):
        out = operands.c(g)
        assert np.isfinite(out).all(), f"{label} group {g} ({p.m}, {p.n}, {p.k}): non-finite output"
        ref = reference_gemm(p) * (1.0 if alpha is None else float(alpha[g]))
        error = relative_error(out, ref)
        assert error <= TOLERANCE[operands.out_dtype], (
            f"{label} group {g} ({p.m}, {p.n}, {p.k}): relative error {error:.3g}"
        )


def as_cuda_arrays(problems, pointers) -> list[list[CudaArray]]:
    """The operands' pointers wrapped as __cuda_array_interface__ objects of their shapes."""
    shapes = [
        [p.a.shape, p.b.shape, (p.m, p.n), p.sfa_blocked.shape, p.sfb_blocked.shape]
        for p in problems
    ]
    typestrs = ("|u1", "|u1", "<f2", "|u1", "|u1")
    return [
        [CudaArray(pointers[f][g], shapes[g][f], typestrs[f]) for g in range(len(problems))]
        for f in range(5)
    ]


def run_and_check(
    device: int, sizes, seed: int, *, as_arrays: bool = False, stream: int = 0, kernel=None,
    epilogue=ORIGINAL_EPILOGUE, scale_range=(0.25, 4.0),
) -> None:  # fmt: skip
    problems, operands = make_operands(sizes, seed, epilogue, scale_range)
    try:
        with plan.GroupedGemmPlan(
            sizes, device, kernel=kernel, out_dtype=epilogue.out_dtype, alpha=epilogue.alpha
        ) as gemm:
            assert kernel is None or gemm.family == kernel
            assert all(v.epilogue == epilogue for v in gemm.variants)
            columns = operands.columns
            if as_arrays:
                columns = as_cuda_arrays(problems, columns)
            gemm.run(*columns, stream=stream, alpha=operands.alpha or None)
            gemm.synchronize()
        check_results(problems, operands, f"{epilogue}, sizes {sizes[:3]}...")
    finally:
        operands.free()


def _shapes() -> list:
    if not SHAPES.exists():
        return []
    tests = json.loads(SHAPES.read_text())["tests"]
    return [list(zip(t["m"], t["n"], t["k"])) for t in tests]


@pytest.mark.parametrize("index", range(10))
def test_shapes_json(device, kernel, epilogue, index):
    shapes = _shapes()
    if index >= len(shapes):
        gpu_unavailable(f"{SHAPES} is absent or has fewer than {index + 1} tests")
    run_and_check(device, shapes[index], seed=1000 + index, kernel=kernel, epilogue=epilogue)


@pytest.mark.parametrize("out_dtype", ["float16", "bfloat16"])
def test_alpha_brings_large_products_into_range(device, kernel, out_dtype):
    """Scales near the E4M3 maximum make A_g B_g^T overflow FP16 (up to ~1e9); alphas of
    1e-4 .. 1e-3 bring C back into range, which works only if the FP32 accumulator is
    scaled before the conversion."""
    sizes = [(130, 256, 1024), (64, 96, 512)]
    rng = np.random.default_rng(7300)
    problems = [random_problem(m, n, k, rng, scale_range=(128.0, 448.0)) for m, n, k in sizes]
    largest = max(float(np.abs(reference_gemm(p)).max()) for p in problems)
    assert largest > 65504 * 100, "the test needs products far past the FP16 range"
    alpha = (10.0 ** rng.uniform(-4, -3, len(sizes))).astype(np.float32)
    arrays = [(p.a, p.b, p.sfa_blocked, p.sfb_blocked) for p in problems]
    operands = DeviceOperands(sizes, arrays, alpha=alpha, out_dtype=out_dtype)
    try:
        operands.poison_c()
        with plan.GroupedGemmPlan(
            sizes, device, kernel=kernel, out_dtype=out_dtype, alpha=True
        ) as gemm:
            gemm.run(*operands.columns, alpha=operands.alpha)
            gemm.synchronize()
        check_results(problems, operands, f"large scales, {out_dtype} x alpha")
    finally:
        operands.free()


def test_fp16_without_alpha_overflows_to_inf(device, kernel):
    """The stated behaviour past FP16's range: the conversion gives +-inf (no saturation)."""
    sizes = [(130, 256, 1024)]
    problems, operands = make_operands(sizes, 7300, scale_range=(128.0, 448.0))
    try:
        with plan.GroupedGemmPlan(sizes, device, kernel=kernel) as gemm:
            gemm.run(*operands.columns)
            gemm.synchronize()
        out, ref = operands.c(0), reference_gemm(problems[0])
        big = np.abs(ref) > 65520 * 1.01
        assert big.any()
        assert np.isinf(out[big]).all() and (np.sign(out[big]) == np.sign(ref[big])).all()
        small = np.abs(ref) < 60000
        assert np.isfinite(out[small]).all()
    finally:
        operands.free()


def _random_sizes(count: int, rng) -> list[tuple[int, int, int]]:
    return [
        (int(rng.integers(1, 300)), 32 * int(rng.integers(1, 12)), 32 * int(rng.integers(1, 20)))
        for _ in range(count)
    ]


@pytest.mark.parametrize("count", [1, 8, 9, 120, 121, 256, 257])
def test_group_counts(device, kernel, epilogue, count):
    rng = np.random.default_rng(count)
    sizes = _random_sizes(count, rng)
    run_and_check(device, sizes, seed=2000 + count, kernel=kernel, epilogue=epilogue)


@pytest.mark.parametrize(
    "sizes",
    [[(1, 32, 32)], [(129, 160, 288)], [(200, 96, 96), (1, 480, 32), (255, 224, 736)],
     [(64, 128, 7168)], [(300, 4096, 256)],
     # one 56-K-tile tile next to 32 one-K-tile tiles (a K-step-balanced schedule
     # would cut the long tile into many pieces)
     [(128, 128, 7168), (128, 4096, 128)]],
)  # fmt: skip
def test_edge_shapes(device, kernel, epilogue, sizes):
    run_and_check(device, sizes, seed=3000 + len(sizes), kernel=kernel, epilogue=epilogue)


def test_split_launches_of_different_grids_share_the_workspace(device, kernel):
    """More groups than the largest variant holds: the second sub-launch has far fewer
    CTAs than the first and reuses the workspace (the decode-once kernel's grid
    barrier must sit where both find it); two runs back to back."""
    sizes = [(256, 512, 256)] * 120 + [(1, 32, 32)]
    for seed in (2500, 2501):
        run_and_check(device, sizes, seed=seed, kernel=kernel)


def test_empty_groups_are_skipped(device, kernel):
    """Groups with m = 0 (experts without tokens) between and around real ones: their
    operands are null pointers, the others are computed, nothing else is written."""
    sizes = [(0, 256, 512), (200, 256, 512), (0, 256, 512), (72, 384, 256), (0, 128, 256)]
    live = [g for g, (m, _n, _k) in enumerate(sizes) if m]
    problems, operands = make_operands([sizes[g] for g in live], 7100)
    try:
        columns = [[0] * len(sizes) for _ in range(5)]
        for f in range(5):
            for i, g in enumerate(live):
                columns[f][g] = operands.columns[f][i]
        with plan.GroupedGemmPlan(sizes, device, kernel=kernel) as gemm:
            assert [launch.groups for launch in gemm.launches] == [tuple(live)]
            gemm.run(*columns)
            gemm.synchronize()
        check_results(problems, operands, "empty groups between real ones")
    finally:
        operands.free()


def test_run_stacked_matches_the_reference(device, kernel):
    """run_stacked: one buffer per operand, the groups back to back at the plan's
    stacked_offsets (k % 64 == 32 with odd m: starts rounded up to 32 bytes; an empty
    group in between takes no room); every group against float64, C poisoned first."""
    sizes = [(77, 256, 288), (0, 256, 288), (130, 256, 288), (5, 256, 288)]
    fields = ("a", "b", "c", "sfa", "sfb")
    rng = np.random.default_rng(7300)
    problems = {g: random_problem(m, n, k, rng) for g, (m, n, k) in enumerate(sizes) if m}
    with plan.GroupedGemmPlan(sizes, device, kernel=kernel) as gemm:
        need, offsets = gemm.stacked_bytes, gemm.stacked_offsets
        assert offsets["a"][1] % 32 == 0 and offsets["a"][1] > 77 * 144  # rounded up
        buffers = {f: driver.mem_alloc(need[f]) for f in fields}
        try:
            for f in fields:
                host = np.full(need[f], 0xFF if f == "c" else 0, np.uint8)  # C: NaN
                for g, p in problems.items():
                    array = {"a": p.a, "b": p.b, "sfa": p.sfa_blocked, "sfb": p.sfb_blocked}
                    if f in array:
                        raw = np.ascontiguousarray(array[f]).view(np.uint8).reshape(-1)
                        host[offsets[f][g] : offsets[f][g] + raw.size] = raw
                driver.memcpy_htod(buffers[f], host.ctypes.data, need[f])
            gemm.run_stacked(*(buffers[f] for f in fields))
            gemm.synchronize()
            out = np.empty(need["c"], np.uint8)
            driver.memcpy_dtoh(out.ctypes.data, buffers["c"], need["c"])
        finally:
            for pointer in buffers.values():
                driver.mem_free(pointer)
    for g, p in problems.items():
        at = offsets["c"][g]
        stored = out[at : at + 2 * p.m * p.n].view(np.uint16).reshape(p.m, p.n)
        result = decode_output(stored, "float16")
        assert np.isfinite(result).all(), f"group {g}: non-finite output"
        error = relative_error(result, reference_gemm(p))
        assert error <= TOLERANCE["float16"], f"group {g}: relative error {error:.3g}"


def test_cuda_array_interface_operands(device):
    run_and_check(device, [(96, 128, 128), (256, 512, 256)], seed=4000, as_arrays=True)


def test_ring_reuse_and_streams(device, kernel):
    """Many queued runs with fresh operands on two streams, one final synchronise."""
    sizes = [(200, 256, 512), (72, 384, 256)]
    streams = [driver.call("cuStreamCreate", 1), driver.call("cuStreamCreate", 1)]
    runs = []
    try:
        with plan.GroupedGemmPlan(sizes, device, ring_slots=3, kernel=kernel) as gemm:
            for i in range(12):
                problems, operands = make_operands(sizes, 5000 + i % 4)
                runs.append((problems, operands))
                gemm.run(*operands.columns, stream=int(streams[(i // 3) % 2]))
            gemm.synchronize()
        for i, (problems, operands) in enumerate(runs):
            check_results(problems, operands, f"run {i}")
    finally:
        for _problems, operands in runs:
            operands.free()
        for stream in streams:
            driver.call("cuStreamDestroy", stream)


def test_rotating_operand_sets_launch_from_resident_tables(device):
    """Three operand sets in rotation on a plan of four ring slots: after the first
    round every run launches from the slot that still holds its table (no copy); C is
    re-poisoned on the stream before each run, so a stale table would show."""
    sizes = [(200, 256, 512), (72, 384, 256)]
    stream = driver.call("cuStreamCreate", 1)
    sets = [make_operands(sizes, 9000 + i) for i in range(3)]
    try:
        with plan.GroupedGemmPlan(sizes, device, ring_slots=4) as gemm:
            for _round in range(4):
                for _problems, operands in sets:
                    operands.poison_c(stream=int(stream))
                    gemm.run(*operands.columns, stream=int(stream))
            resident = sum(table is not None for table in gemm._launcher._slot_table)
            gemm.synchronize()
        assert resident == 3  # one table per set, each uploaded once
        for i, (problems, operands) in enumerate(sets):
            check_results(problems, operands, f"rotating set {i}")
    finally:
        for _problems, operands in sets:
            operands.free()
        driver.call("cuStreamDestroy", stream)


def test_graph_replays_with_new_operands(device, kernel):
    """A run captured in a CUDA graph; each replay, pointed at a new operand set through
    set_graph_pointers, writes that set's results."""
    sizes = [(200, 256, 512), (72, 384, 256)]
    stream = driver.call("cuStreamCreate", 1)
    sets = [make_operands(sizes, 8000 + i) for i in range(3)]
    try:
        with plan.GroupedGemmPlan(sizes, device, kernel=kernel) as gemm:
            driver.capture_begin(stream, relaxed=True)
            try:
                gemm.run(*sets[0][1].columns, stream=int(stream))
            finally:
                graph = driver.call("cuStreamEndCapture", stream)
            executable = driver.call("cuGraphInstantiate", graph, 0)
            for problems, operands in sets:
                gemm.set_graph_pointers(*operands.columns)
                driver.call("cuGraphLaunch", executable, stream)
                driver.stream_synchronize(stream)
                check_results(problems, operands, "graph replay")
            driver.call("cuGraphExecDestroy", executable)
            driver.call("cuGraphDestroy", graph)
    finally:
        for _problems, operands in sets:
            operands.free()
        driver.call("cuStreamDestroy", stream)


def test_graph_replay_reads_new_alpha_values(device, kernel):
    """Alpha is read on the device: a captured run, replayed after new values are written
    into the same alpha array, scales by the new values (BF16 output)."""
    sizes = [(200, 256, 512), (72, 384, 256), (33, 128, 128)]
    epilogue = EPILOGUES[-1]
    assert epilogue.alpha and epilogue.out_dtype == "bfloat16"
    stream = driver.call("cuStreamCreate", 1)
    problems, operands = make_operands(sizes, 8100, epilogue)
    try:
        with plan.GroupedGemmPlan(
            sizes, device, kernel=kernel, out_dtype="bfloat16", alpha=True
        ) as gemm:
            driver.capture_begin(stream, relaxed=True)
            try:
                gemm.run(*operands.columns, stream=int(stream), alpha=operands.alpha)
            finally:
                graph = driver.call("cuStreamEndCapture", stream)
            executable = driver.call("cuGraphInstantiate", graph, 0)
            rng = np.random.default_rng(8101)
            for replay in range(3):
                if replay:
                    operands.alpha_values = random_alpha(len(sizes), rng)
                    driver.memcpy_htod(
                        operands.alpha, operands.alpha_values.ctypes.data, 4 * len(sizes)
                    )
                operands.poison_c()
                driver.call("cuGraphLaunch", executable, stream)
                driver.stream_synchronize(stream)
                check_results(problems, operands, f"graph replay {replay} with new alpha")
            driver.call("cuGraphExecDestroy", executable)
            driver.call("cuGraphDestroy", graph)
    finally:
        operands.free()
        driver.call("cuStreamDestroy", stream)


def test_torch_bf16_output_and_alpha(device):
    """torch tensors in, BF16 C and a float32 alpha tensor; the one-call API picks the
    BF16-with-alpha variant from C's dtype and the alpha argument."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no GPU")
    sizes = [(128, 256, 512), (40, 128, 256)]
    rng = np.random.default_rng(6100)
    problems = [random_problem(m, n, k, rng) for m, n, k in sizes]
    alpha = random_alpha(len(sizes), rng)
    dev = torch.device("cuda", device)

    def t(array):
        return torch.from_numpy(np.array(array)).to(dev)

    c = [torch.full((p.m, p.n), float("nan"), dtype=torch.bfloat16, device=dev) for p in problems]
    plan.grouped_gemm(
        [t(p.a) for p in problems], [t(p.b) for p in problems], c,
        [t(p.sfa_blocked) for p in problems], [t(p.sfb_blocked) for p in problems],
        stream=torch.cuda.current_stream(), alpha=t(alpha),
    )  # fmt: skip
    torch.cuda.synchronize()
    for g, p in enumerate(problems):
        out = c[g].float().cpu().numpy().astype(np.float64)
        error = relative_error(out, reference_gemm(p) * float(alpha[g]))
        assert error <= TOLERANCE["bfloat16"], f"group {g}: relative error {error:.3g}"


def test_torch_dlpack_operands(device):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no GPU")
    sizes = [(128, 256, 512), (40, 128, 256)]
    rng = np.random.default_rng(6000)
    problems = [random_problem(m, n, k, rng) for m, n, k in sizes]
    dev = torch.device("cuda", device)

    def t(array):
        return torch.from_numpy(np.array(array)).to(dev)

    a = [t(p.a) for p in problems]
    b = [t(p.b) for p in problems]
    c = [torch.full((p.m, p.n), float("nan"), dtype=torch.float16, device=dev) for p in problems]
    sfa = [t(p.sfa_blocked).view(torch.float8_e4m3fn) for p in problems]
    sfb = [t(p.sfb_blocked) for p in problems]
    plan.grouped_gemm(a, b, c, sfa, sfb, stream=torch.cuda.current_stream())
    torch.cuda.synchronize()
    for g, p in enumerate(problems):
        out = c[g].cpu().numpy()
        assert np.isfinite(out).all()
        assert relative_error(out.astype(np.float64), reference_gemm(p)) <= TOLERANCE["float16"]


def test_host_overhead(device, capsys):
    """Report host time per steady-state run (informational; asserts only correctness)."""
    import time

    sizes = [(128, 256, 256)] * 8
    problems, operands = make_operands(sizes, 7000)
    pointers = operands.columns
    stream = driver.call("cuStreamCreate", 1)
    try:
        with plan.GroupedGemmPlan(sizes, device, ring_slots=16) as gemm:
            arrays = as_cuda_arrays(problems, pointers)
            swapped = [*pointers[:2], list(reversed(pointers[2])), *pointers[3:]]
            cases = {
                "ints, same pointers": lambda i: pointers,
                "ints, new pointers": lambda i: (pointers, swapped)[i % 2],
                "__cuda_array_interface__": lambda i: arrays,
            }
            timings = {}
            for label, make in cases.items():
                for i in range(50):
                    gemm.run(*make(i), stream=int(stream))
                gemm.synchronize()
                count, total, validate = 300, 0.0, 0.0
                for i in range(count):
                    ops = make(i)
                    t0 = time.perf_counter()
                    flat, producers = gemm.pointers(*ops, stream=int(stream))
                    t1 = time.perf_counter()
                    gemm.launch_pointers(flat, int(stream), producers)
                    t2 = time.perf_counter()
                    validate += t1 - t0
                    total += t2 - t0
                    if i % 8 == 7:
                        gemm.synchronize()  # keep the GPU from throttling the host loop
                timings[label] = (round(validate / count * 1e6, 1), round(total / count * 1e6, 1))
            gemm.synchronize()
        check_results(problems, operands, "overhead runs")
        with capsys.disabled():
            print(f"\nhost microseconds per run, 8 groups (validate, validate + launch): {timings}")
    finally:
        driver.call("cuStreamDestroy", stream)
        operands.free()
