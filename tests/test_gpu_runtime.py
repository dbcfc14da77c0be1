"""The runtime on a real GPU with the baked kernel for it (e.g. sm_90a on an H200).

Device memory is allocated through ``nvfp4_aot.driver`` (no torch or cupy needed); C is
poisoned with 0xFFFF (an FP16 NaN) before each run, and every group is compared with the
float64 reference. Skipped where there is no GPU, no driver or no variant for the GPU.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from nvfp4_aot import driver, loader, plan
from nvfp4_aot.errors import ArtifactError, CudaError, UnsupportedDeviceError
from nvfp4_aot.layouts import random_problem
from nvfp4_aot.reference import reference_gemm, relative_error

pytestmark = pytest.mark.gpu

SHAPES = Path(
    os.environ.get(
        "NVFP4_AOT_SHAPES", Path(__file__).resolve().parents[1] / ".." / "shared" / "shapes.json"
    )
)
TOLERANCE = 1e-3


@pytest.fixture(scope="module")
def device() -> int:
    try:
        if driver.device_count() < 1:
            pytest.skip("no CUDA device")
        capability = driver.compute_capability(0)
        loader.variants_for(loader.load_manifest(), capability)
    except CudaError as exc:
        pytest.skip(f"no usable CUDA driver: {exc}")
    except (ArtifactError, UnsupportedDeviceError) as exc:
        pytest.skip(f"no baked kernel for this GPU: {exc}")
    driver.activate(0)
    return 0


class Arena:
    """One device allocation holding many 256-byte aligned buffers, uploaded at once."""

    def __init__(self, sizes: list[int]):
        self.offsets, total = [], 0
        for size in sizes:
            self.offsets.append(total)
            total += -(-max(size, 1) // 256) * 256
        self.size = total
        self.host = np.zeros(total, dtype=np.uint8)
        self.base = driver.mem_alloc(total)

    def put(self, index: int, data: np.ndarray) -> int:
        raw = np.ascontiguousarray(data).view(np.uint8).reshape(-1)
        start = self.offsets[index]
        self.host[start : start + raw.size] = raw
        return self.base + start

    def fill(self, index: int, size: int, byte: int) -> int:
        start = self.offsets[index]
        self.host[start : start + size] = byte
        return self.base + start

    def upload(self) -> None:
        driver.memcpy_htod(self.base, self.host.ctypes.data, self.size)

    def download(self, pointer: int, shape, dtype) -> np.ndarray:
        out = np.empty(shape, dtype=dtype)
        driver.memcpy_dtoh(out.ctypes.data, pointer, out.nbytes)
        return out

    def free(self) -> None:
        driver.mem_free(self.base)


class CudaArray:
    """A minimal ``__cuda_array_interface__`` producer over a device pointer."""

    def __init__(self, pointer: int, shape, typestr: str):
        self.__cuda_array_interface__ = {
            "version": 3, "shape": tuple(shape), "typestr": typestr,
            "data": (pointer, False), "strides": None, "stream": None,
        }  # fmt: skip


def make_operands(sizes, seed: int):
    """Random problems and device buffers; C poisoned with NaN (0xFFFF)."""
    rng = np.random.default_rng(seed)
    problems = [random_problem(m, n, k, rng) for m, n, k in sizes]
    byte_sizes = []
    for p in problems:
        byte_sizes += [
            p.a.nbytes,
            p.b.nbytes,
            p.m * p.n * 2,
            p.sfa_blocked.nbytes,
            p.sfb_blocked.nbytes,
        ]
    arena = Arena(byte_sizes)
    pointers = [[], [], [], [], []]
    for g, p in enumerate(problems):
        pointers[0].append(arena.put(5 * g, p.a))
        pointers[1].append(arena.put(5 * g + 1, p.b))
        pointers[2].append(arena.fill(5 * g + 2, p.m * p.n * 2, 0xFF))
        pointers[3].append(arena.put(5 * g + 3, p.sfa_blocked))
        pointers[4].append(arena.put(5 * g + 4, p.sfb_blocked))
    arena.upload()
    return problems, arena, pointers


def check_results(problems, arena, c_pointers, label: str) -> None:
    for g, (p, c) in enumerate(zip(problems, c_pointers)):
        out = arena.download(c, (p.m, p.n), np.float16)
        assert np.isfinite(out).all(), f"{label} group {g} ({p.m}, {p.n}, {p.k}): non-finite output"
        error = relative_error(out.astype(np.float64), reference_gemm(p))
        assert error <= TOLERANCE, (
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
    device: int, sizes, seed: int, *, as_arrays: bool = False, stream: int = 0
) -> None:
    problems, arena, pointers = make_operands(sizes, seed)
    try:
        with plan.GroupedGemmPlan(sizes, device) as gemm:
            operands = pointers
            if as_arrays:
                operands = as_cuda_arrays(problems, pointers)
            gemm.run(*operands, stream=stream)
            gemm.synchronize()
        check_results(problems, arena, pointers[2], f"sizes {sizes[:3]}...")
    finally:
        arena.free()


def _shapes() -> list:
    if not SHAPES.exists():
        return []
    tests = json.loads(SHAPES.read_text())["tests"]
    return [list(zip(t["m"], t["n"], t["k"])) for t in tests]


@pytest.mark.parametrize("index", range(10))
def test_shapes_json(device, index):
    shapes = _shapes()
    if index >= len(shapes):
        pytest.skip(f"{SHAPES} is absent or has fewer tests")
    run_and_check(device, shapes[index], seed=1000 + index)


def _random_sizes(count: int, rng) -> list[tuple[int, int, int]]:
    return [
        (int(rng.integers(1, 300)), 32 * int(rng.integers(1, 12)), 32 * int(rng.integers(1, 20)))
        for _ in range(count)
    ]


@pytest.mark.parametrize("count", [1, 8, 9, 120, 121])
def test_group_counts(device, count):
    rng = np.random.default_rng(count)
    run_and_check(device, _random_sizes(count, rng), seed=2000 + count)


@pytest.mark.parametrize(
    "sizes",
    [[(1, 32, 32)], [(129, 160, 288)], [(200, 96, 96), (1, 480, 32), (255, 224, 736)],
     [(64, 128, 7168)], [(300, 4096, 256)]],
)  # fmt: skip
def test_edge_shapes(device, sizes):
    run_and_check(device, sizes, seed=3000 + len(sizes))


def test_cuda_array_interface_operands(device):
    run_and_check(device, [(96, 128, 128), (256, 512, 256)], seed=4000, as_arrays=True)


def test_ring_reuse_and_streams(device):
    """Many queued runs with fresh C buffers on two streams, one final synchronise."""
    sizes = [(200, 256, 512), (72, 384, 256)]
    streams = [driver.call("cuStreamCreate", 1), driver.call("cuStreamCreate", 1)]
    runs = []
    try:
        with plan.GroupedGemmPlan(sizes, device, ring_slots=3) as gemm:
            for i in range(12):
                problems, arena, pointers = make_operands(sizes, 5000 + i % 4)
                runs.append((problems, arena, pointers))
                gemm.run(*pointers, stream=int(streams[(i // 3) % 2]))
            gemm.synchronize()
        for i, (problems, arena, pointers) in enumerate(runs):
            check_results(problems, arena, pointers[2], f"run {i}")
    finally:
        for _problems, arena, _pointers in runs:
            arena.free()
        for stream in streams:
            driver.call("cuStreamDestroy", stream)


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
        assert relative_error(out.astype(np.float64), reference_gemm(p)) <= TOLERANCE


def test_host_overhead(device, capsys):
    """Report host time per steady-state run (informational; asserts only correctness)."""
    import time

    sizes = [(128, 256, 256)] * 8
    problems, arena, pointers = make_operands(sizes, 7000)
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
            for label, operands in cases.items():
                for i in range(50):
                    gemm.run(*operands(i), stream=int(stream))
                gemm.synchronize()
                count, total, validate = 300, 0.0, 0.0
                for i in range(count):
                    ops = operands(i)
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
        check_results(problems, arena, pointers[2], "overhead runs")
        with capsys.disabled():
            print(f"\nhost microseconds per run, 8 groups (validate, validate + launch): {timings}")
    finally:
        driver.call("cuStreamDestroy", stream)
        arena.free()
