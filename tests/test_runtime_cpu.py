"""The runtime (loader, plan, operands, validation, driver wrapper) against a fake driver.

No GPU, no CuTe DSL: the artifacts are a synthetic manifest whose "cubins" are minimal
CUDA ELF headers (enough for ``cubin.cubin_sm``) and the driver is tests/fake_driver.py.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import random
import struct
import subprocess
import sys
import textwrap
from contextlib import ExitStack
from pathlib import Path

import numpy as np
import pytest

from nvfp4_aot import driver, loader, operands, plan, validation
from nvfp4_aot.errors import ArtifactError, CudaError, InvalidProblemError, UnsupportedDeviceError
from nvfp4_aot.layouts import blocked_scale_bytes
from nvfp4_aot.manifest import (
    MANIFEST_NAME,
    SCHEMA_VERSION,
    FunctionAttribute,
    GridDim,
    InputSlot,
    KernelParam,
    LaunchAttribute,
    Manifest,
    Variant,
    Workspace,
)
from nvfp4_aot.packing import ParamPacker

sys.path.insert(0, str(Path(__file__).parent))
from fake_driver import DirectFakeDriver, FakeDriver, installed  # noqa: E402

REPO = Path(__file__).resolve().parents[1]

# ---------------------------------------------------------------------------------------
# synthetic artifacts

ARCHS = {"sm_90a": ((9, 0), 0x33), "sm_100a": ((10, 0), 0x41), "sm_103a": ((10, 3), 0x41)}
FAMILY = {"sm_90a": "sm90_nvfp4_grouped_gemm", "sm_100a": "sm100_nvfp4_grouped_gemm",
          "sm_103a": "sm100_nvfp4_grouped_gemm"}  # fmt: skip
# (offset, size, align, slots, padding) like the captured seed kernel ABI
LAYOUT = [(0, 12, 4, (), ())]
for i in range(4):
    LAYOUT += [(64 + 192 * i, 128, 64, (), ((64, 128),)), (192 + 192 * i, 12, 4, (), ())]
LAYOUT = LAYOUT[:9] + [
    (784, 8, 8, (("abc_pointers", 0, 8),), ()),
    (792, 8, 8, (("scale_pointers", 0, 8),), ()),
    (800, 16, 8, (("tensormap_workspace", 0, 8), ("persistent_blocks", 8, 4)), ((12, 16),)),
    (816, 8, 8, (("problem_sizes", 0, 8),), ()),
    (824, 8, 8, (("cta_prefix", 0, 8),), ()),
]
PARAM_BYTES = 832
SMEM = 184960


def fake_cubin(arch: str, seed: int) -> bytes:
    """64-byte CUDA ELF header (arch in e_flags as the OS ABI byte says) + filler."""
    (major, minor), osabi = ARCHS[arch]
    sm = major * 10 + minor
    flags = sm if osabi == 0x33 else sm << 8
    header = bytearray(64)
    header[:8] = b"\x7fELF\x02\x01\x01" + bytes([osabi])
    struct.pack_into("<H", header, 18, 190)
    struct.pack_into("<I", header, 48, flags)
    return bytes(header) + random.Random(seed).randbytes(512)


def synthetic_variant(
    arch: str, num_groups: int, cubin: bytes, tile=(128, 128, 256), family=None,
    workspace=None, cooperative=0,
) -> Variant:  # fmt: skip
    rng = random.Random(f"{arch}{num_groups}")
    params = []
    for index, (offset, size, align, slots, padding) in enumerate(LAYOUT):
        constant = bytearray(rng.randbytes(size))
        for _name, at, width in slots:
            constant[at : at + width] = bytes(width)
        for start, stop in padding:
            constant[start:stop] = bytes(stop - start)
        params.append(
            KernelParam(index, offset, size, align, constant.hex(),
                        tuple(InputSlot(*s) for s in slots), padding)
        )  # fmt: skip
    family = family or FAMILY[arch]
    return Variant(
        name=f"{family}.{arch}.g{num_groups}",
        family=family,
        arch=arch,
        compute_capability=ARCHS[arch][0],
        num_groups=num_groups,
        tile_mnk=tile,
        cubin=f"{family}.{arch}.g{num_groups}.cubin",
        sha256=hashlib.sha256(cubin).hexdigest(),
        cubin_bytes=len(cubin),
        kernel_symbol=f"kernel_{arch}_g{num_groups}",
        block=(192, 1, 1),
        cluster=(1, 1, 1),
        grid=(GridDim(input="persistent_blocks"), GridDim(constant=1), GridDim(constant=1)),
        dynamic_smem_bytes=SMEM,
        param_bytes=PARAM_BYTES,
        params=tuple(params),
        launch_attributes=(
            LaunchAttribute(6, "programmatic_stream_serialization", (0,)),
            LaunchAttribute(4, "cluster_dimension", (1, 1, 1)),
            LaunchAttribute(2, "cooperative", (cooperative,)),
        ),
        function_attributes=(
            FunctionAttribute(8, "max_dynamic_shared_size_bytes", from_device_attribute=97),
            FunctionAttribute(14, "non_portable_cluster_size_allowed", value=1),
        ),
        registers=128,
        workspace=workspace or Workspace(),
    )


def write_synthetic(directory: Path, combos) -> Manifest:
    """Combos: (arch, groups) or (arch, groups, {synthetic_variant keyword arguments})."""
    directory.mkdir(parents=True, exist_ok=True)
    variants = []
    for seed, (arch, groups, *extra) in enumerate(combos):
        cubin = fake_cubin(arch, seed)
        variant = synthetic_variant(arch, groups, cubin, **(extra[0] if extra else {}))
        (directory / variant.cubin).write_bytes(cubin)
        variants.append(variant)
    manifest = Manifest(SCHEMA_VERSION, "0.1.0", "synthetic", tuple(variants))
    (directory / MANIFEST_NAME).write_text(manifest.to_json())
    return manifest


ALL_COMBOS = [("sm_90a", 8), ("sm_90a", 120), ("sm_100a", 8), ("sm_100a", 120), ("sm_103a", 8)]


@pytest.fixture(scope="session")
def artifacts(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("artifacts")
    write_synthetic(directory, ALL_COMBOS)
    return directory


@pytest.fixture
def manifest(artifacts):
    return loader.load_manifest(artifacts)


def kernel_params_of(manifest: Manifest) -> dict[str, list[tuple[int, int]]]:
    return {v.kernel_symbol: [(p.offset, p.size) for p in v.params] for v in manifest.variants}


@pytest.fixture
def make_fake(manifest):
    """Install a FakeDriver (capability etc. as given) for the test; restore afterwards."""
    with ExitStack() as stack:

        def make(**kwargs) -> FakeDriver:
            kwargs.setdefault("kernel_params", kernel_params_of(manifest))
            return stack.enter_context(installed(FakeDriver(**kwargs)))

        yield make


class FakeArray:
    """Exposes ``__cuda_array_interface__`` like CuPy (version 3)."""

    def __init__(
        self, pointer, shape, typestr, strides=None, readonly=False, stream=None, device=None
    ):
        self.__cuda_array_interface__ = {
            "version": 3, "shape": tuple(shape), "typestr": typestr, "data": (pointer, readonly),
            "strides": strides, "stream": stream,
        }  # fmt: skip
        if device is not None:
            self.device = type("Device", (), {"id": device})()


def group_arrays(m, n, k, base, *, c_typestr="<f2"):
    """FakeArrays for one group, at distinct 256-byte aligned fake addresses (fields 4 GiB
    apart, so that many groups 16 MiB apart never overlap)."""
    return (
        FakeArray(base, (m, k // 2), "|u1"),
        FakeArray(base + 0x1_0000_0000, (n, k // 2), "|u1"),
        FakeArray(base + 0x2_0000_0000, (m, n), c_typestr),
        FakeArray(base + 0x3_0000_0000, (blocked_scale_bytes(m, k),), "|u1"),
        FakeArray(base + 0x4_0000_0000, (blocked_scale_bytes(n, k),), "|u1"),
    )


def operands_for(sizes, base=0x10_0000_0000):
    groups = [group_arrays(m, n, k, base + g * 0x100_0000) for g, (m, n, k) in enumerate(sizes)]
    return [list(column) for column in zip(*groups)]


# ---------------------------------------------------------------------------------------
# variant selection and loading


@pytest.mark.parametrize(
    "capability, arch", [((9, 0), "sm_90a"), ((10, 0), "sm_100a"), ((10, 3), "sm_103a")]
)
def test_variant_follows_compute_capability(make_fake, artifacts, capability, arch):
    make_fake(capability=capability)
    with plan.GroupedGemmPlan([(128, 128, 256)], artifacts=artifacts) as p:
        assert [v.arch for v in p.variants] == [arch]
        assert p.variants[0].num_groups == 8


def test_unsupported_capability_names_device_and_baked_archs(make_fake, artifacts):
    fake = make_fake(capability=(8, 0))
    with pytest.raises(
        UnsupportedDeviceError,
        match=r"compute capability 8\.0; the artifacts hold sm_100a \(compute capability "
        r"10\.0\), sm_103a \(compute capability 10\.3\), sm_90a \(compute capability 9\.0\)",
    ):
        plan.GroupedGemmPlan([(128, 128, 256)], artifacts=artifacts)
    assert "cuLibraryLoadData" not in fake.names()


def test_sm100_only_artifacts_refuse_hopper(make_fake, tmp_path):
    directory = tmp_path / "art"
    manifest = write_synthetic(directory, [("sm_100a", 8)])
    fake = FakeDriver(capability=(9, 0), kernel_params=kernel_params_of(manifest))
    driver.use_backend(fake)
    loader.clear_caches()
    with pytest.raises(UnsupportedDeviceError, match=r"9\.0.*sm_100a"):
        plan.GroupedGemmPlan([(128, 128, 256)], artifacts=directory)
    assert "cuLibraryLoadData" not in fake.names()


@pytest.mark.parametrize(
    "groups, expected",
    [(1, [(0, 1, 8)]), (8, [(0, 8, 8)]), (9, [(0, 9, 120)]), (120, [(0, 120, 120)]),
     (121, [(0, 120, 120), (120, 121, 8)]),
     (250, [(0, 120, 120), (120, 240, 120), (240, 250, 120)])],
)  # fmt: skip
def test_split_groups(groups, expected):
    assert plan.split_groups(groups, [120, 8]) == expected


def test_split_with_a_single_variant():
    assert plan.split_groups(17, [8]) == [(0, 8, 8), (8, 16, 8), (16, 17, 8)]


def _corrupt(directory: Path, manifest: Manifest, how: str) -> Variant:
    variant = next(v for v in manifest.variants if v.arch == "sm_100a" and v.num_groups == 8)
    path = directory / variant.cubin
    data = path.read_bytes()
    if how == "sha":
        path.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    elif how == "truncated":
        path.write_bytes(data[:-10])
    elif how == "missing":
        path.unlink()
    return variant


@pytest.mark.parametrize(
    "how, message",
    [("sha", r"has sha256 [0-9a-f]{64}, the manifest says"),
     ("truncated", r"holds 566 bytes, the manifest says 576"),
     ("missing", r"is missing although the manifest names it")],
)  # fmt: skip
def test_corrupt_cubin_refused_before_loading(tmp_path, how, message):
    directory = tmp_path / "art"
    manifest = write_synthetic(directory, [("sm_100a", 8), ("sm_100a", 120)])
    _corrupt(directory, manifest, how)
    fake = FakeDriver(capability=(10, 0), kernel_params=kernel_params_of(manifest))
    driver.use_backend(fake)
    loader.clear_caches()
    try:
        with pytest.raises(ArtifactError, match=message):
            plan.GroupedGemmPlan([(128, 128, 256)], artifacts=directory)
        assert "cuLibraryLoadData" not in fake.names()
    finally:
        driver.use_backend(None)
        loader.clear_caches()


def test_cubin_of_wrong_arch_refused_before_loading(tmp_path):
    """A manifest that lists an sm_100a cubin as sm_90a: the ELF header tells."""
    directory = tmp_path / "art"
    cubin = fake_cubin("sm_100a", 0)
    variant = synthetic_variant("sm_90a", 8, cubin)
    (directory).mkdir()
    (directory / variant.cubin).write_bytes(cubin)
    manifest = Manifest(SCHEMA_VERSION, "0.1.0", "synthetic", (variant,))
    (directory / MANIFEST_NAME).write_text(manifest.to_json())
    fake = FakeDriver(capability=(9, 0), kernel_params=kernel_params_of(manifest))
    driver.use_backend(fake)
    loader.clear_caches()
    try:
        with pytest.raises(
            ArtifactError, match=r"compiled for sm_100, but the manifest lists it as sm_90a"
        ):
            plan.GroupedGemmPlan([(128, 128, 256)], artifacts=directory)
        assert "cuLibraryLoadData" not in fake.names()
    finally:
        driver.use_backend(None)
        loader.clear_caches()


def test_param_info_mismatch_refused(make_fake, artifacts, manifest):
    params = kernel_params_of(manifest)
    symbol = "kernel_sm_100a_g8"
    params[symbol] = params[symbol][:-1] + [(824, 4)]
    fake = make_fake(kernel_params=params)
    with pytest.raises(ArtifactError, match=r"the driver reports kernel parameters .* refusing"):
        plan.GroupedGemmPlan([(128, 128, 256)], artifacts=artifacts)
    assert fake.names().count("cuLibraryUnload") == 1


def test_param_info_unsupported_is_skipped(make_fake, artifacts):
    make_fake(report_param_info=False)
    with plan.GroupedGemmPlan([(128, 128, 256)], artifacts=artifacts) as p:
        assert p.num_groups == 1


def test_function_attributes_and_single_load(make_fake, artifacts):
    fake = make_fake(smem_optin=227328)
    p1 = plan.GroupedGemmPlan([(128, 128, 256)], artifacts=artifacts)
    p2 = plan.GroupedGemmPlan([(256, 128, 256)] * 3, artifacts=artifacts)
    assert fake.function_attributes == [
        ("kernel_sm_100a_g8", 8, 227328),
        ("kernel_sm_100a_g8", 14, 1),
    ]
    assert fake.names().count("cuLibraryLoadData") == 1
    p1.close()
    p2.close()


def test_shared_memory_limit(make_fake, artifacts):
    make_fake(smem_optin=SMEM - 1)
    with pytest.raises(UnsupportedDeviceError, match=r"needs 184960 bytes of shared memory"):
        plan.GroupedGemmPlan([(128, 128, 256)], artifacts=artifacts)


def test_missing_device(make_fake, artifacts):
    make_fake(devices=1)
    with pytest.raises(
        UnsupportedDeviceError, match=r"device 3 does not exist; this machine has 1"
    ):
        plan.GroupedGemmPlan([(128, 128, 256)], device=3, artifacts=artifacts)


def test_driver_errors_carry_operation_and_name():
    class Failing:
        def cuMemAlloc(self, size):
            from cuda.bindings import driver as real

            return (real.CUresult.CUDA_ERROR_OUT_OF_MEMORY, 0)

        def cuGetErrorString(self, error):
            return (0, b"out of memory")

    previous = driver.use_backend(Failing())
    try:
        with pytest.raises(
            CudaError, match=r"cuMemAlloc failed with CUDA_ERROR_OUT_OF_MEMORY: out of memory"
        ):
            driver.mem_alloc(1 << 40)
    finally:
        driver.use_backend(previous)


def test_missing_driver_library_is_a_clean_error():
    class NoLibrary:
        def cuInit(self, flags):
            raise RuntimeError("libcuda.so.1 not found")

    previous = driver.use_backend(NoLibrary())
    try:
        with pytest.raises(
            CudaError, match=r"cuInit failed with CUDA_ERROR_NO_DEVICE: the NVIDIA driver"
        ):
            driver.init()
    finally:
        driver.use_backend(previous)


# ---------------------------------------------------------------------------------------
# plan: prefix, persistent blocks, buffers, parameters


def test_cta_prefix_and_persistent_blocks_by_hand():
    assert plan.cta_prefix([1, 8, 3], 8) == (0, 1, 9, 12, 12, 12, 12, 12, 12)
    assert plan.persistent_blocks(12, 132) == 12
    assert plan.persistent_blocks(2048, 132) == 132
    assert plan.persistent_blocks(0, 132) == 1


def test_plan_uploads_sizes_prefix_and_packs_params(make_fake, artifacts, manifest):
    fake = make_fake()
    sizes = [(96, 128, 128), (256, 512, 256), (72, 384, 256)]
    with plan.GroupedGemmPlan(sizes, artifacts=artifacts, ring_slots=3) as p:
        (launch,) = p.launches
        assert launch.tiles == (1, 8, 3)
        assert launch.cta_prefix == (0, 1, 9, 12, 12, 12, 12, 12, 12)
        assert (launch.total_tiles, launch.persistent_blocks, launch.grid) == (12, 12, (12, 1, 1))
        inputs = p.kernel_inputs(0)[0]
        uploaded_sizes = np.frombuffer(fake.read(inputs["problem_sizes"], 8 * 16), np.int32)
        assert uploaded_sizes.reshape(8, 4).tolist() == [
            [96, 128, 128, 1], [256, 512, 256, 1], [72, 384, 256, 1]] + [[0, 0, 0, 0]] * 5  # fmt: skip
        prefix = np.frombuffer(fake.read(inputs["cta_prefix"], 9 * 4), np.int32)
        assert prefix.tolist() == list(launch.cta_prefix)
        for name in ("problem_sizes", "abc_pointers", "scale_pointers", "cta_prefix"):
            assert inputs[name] % 16 == 0
        assert inputs["tensormap_workspace"] % 128 == 0
        assert p.workspace_bytes == 12 * 512
        assert [n for n in fake.names() if n in ("cuMemAlloc", "cuMemHostAlloc")] == [
            "cuMemAlloc", "cuMemHostAlloc"]  # fmt: skip

        a, b, c, sfa, sfb = operands_for([s[:3] for s in sizes])
        alloc_calls = fake.names().count("cuMemAlloc")
        p.run(a, b, c, sfa, sfb, stream=7)
        (launched,) = fake.launches
        variant = manifest.variant("sm100_nvfp4_grouped_gemm", "sm_100a", 8)
        packed = ParamPacker(variant).pack(inputs)
        assert b"".join(launched.params) == b"".join(
            bytes(packed[o : o + s]) for o, s in ((q.offset, q.size) for q in variant.params)
        )
        assert launched.grid == (12, 1, 1)
        assert launched.block == (192, 1, 1)
        assert launched.shared_bytes == SMEM
        assert launched.stream == 7
        assert [attr for attr, _ in launched.attributes] == [6, 4, 2]
        assert fake.names().count("cuMemAlloc") == alloc_calls  # nothing allocated per run

        # the copied pointer tables
        dst, data, stream = fake.copies[-1]
        assert (dst, stream) == (inputs["abc_pointers"], 7)
        table = np.frombuffer(data, np.int64)
        abc = table[: 8 * 3].reshape(8, 3)
        assert abc[:3].tolist() == [
            [x.__cuda_array_interface__["data"][0] for x in (a[g], b[g], c[g])] for g in range(3)
        ]
        assert not abc[3:].any()
        scales_at = (inputs["scale_pointers"] - inputs["abc_pointers"]) // 8
        scales = table[scales_at : scales_at + 16].reshape(8, 2)
        assert scales[:3].tolist() == [
            [x.__cuda_array_interface__["data"][0] for x in (sfa[g], sfb[g])] for g in range(3)
        ]


def test_steady_state_calls(make_fake, artifacts):
    """A new table: one copy, one launch, one event record. A table a ring slot still
    holds (same operands as a recent run): no staging, no copy, launched from that slot.
    A slot is rewritten only once the runs that used it are known to be complete."""
    fake = make_fake()
    sizes = [(128, 256, 512)] * 2
    launch_only = ["cuLaunchKernelEx", "cuEventRecord"]
    copy = ["cuMemcpyHtoDAsync", *launch_only]

    def calls_of(operands):
        start = len(fake.calls)
        p.run(*operands, stream=5)
        return [n for n in fake.names()[start:] if n != "cuCtxSetCurrent"]

    def slot_launched():
        launched = b"".join(fake.launches[-1].params)
        inputs = [p.kernel_inputs(slot)[0]["abc_pointers"] for slot in range(2)]
        return [s for s, a in enumerate(inputs) if a.to_bytes(8, "little") in launched]

    with plan.GroupedGemmPlan(sizes, artifacts=artifacts, ring_slots=2) as p:
        ops, other, third = (operands_for(sizes, base=b << 36) for b in (1, 2, 3))
        assert calls_of(ops) == copy and slot_launched() == [0]
        assert calls_of(ops) == launch_only and slot_launched() == [0]
        assert calls_of(other) == copy and slot_launched() == [1]  # never used: no query
        assert calls_of(ops) == launch_only and slot_launched() == [0]  # slot 0 holds it
        # a third set takes slot 0 (round robin): one query of the newest run proves
        # every run complete (a plan's runs complete in order)
        assert calls_of(third) == ["cuEventQuery", *copy] and slot_launched() == [0]
        assert calls_of(other) == launch_only and slot_launched() == [1]
        assert calls_of(ops) == ["cuEventQuery", *copy] and slot_launched() == [1]
        table = struct.unpack("<6Q", fake.read(p.kernel_inputs(1)[0]["abc_pointers"], 48))
        assert list(table) == [x.__cuda_array_interface__["data"][0]
                               for g in range(2) for x in (ops[0][g], ops[1][g], ops[2][g])]  # fmt: skip


def test_graph_capture_uses_its_own_slot_and_workspace(make_fake, artifacts):
    """Under stream capture: graph slot + graph workspace, no ring events; then
    set_graph_pointers rewrites only the pinned staging the captured copy reads."""
    fake = make_fake()
    sizes = [(128, 256, 512)] * 2
    with plan.GroupedGemmPlan(sizes, artifacts=artifacts, ring_slots=2) as p:
        ops = operands_for(sizes)
        p.run(*ops, stream=5)  # an eager run first
        eager = p.kernel_inputs(0)[0]
        graph = p.kernel_inputs(p.graph_slot)[0]
        assert graph["tensormap_workspace"] != eager["tensormap_workspace"]
        assert graph["abc_pointers"] not in {
            p.kernel_inputs(s)[0]["abc_pointers"] for s in range(2)
        }
        fake.capturing_streams = {9}
        start = len(fake.calls)
        p.run(*ops, stream=9)
        assert [n for n in fake.names()[start:] if n != "cuCtxSetCurrent"] == [
            "cuMemcpyHtoDAsync", "cuLaunchKernelEx"]  # fmt: skip
        dst, _data, stream = fake.copies[-1]
        assert (dst, stream) == (graph["abc_pointers"], 9)
        launched = b"".join(fake.launches[-1].params)
        assert graph["tensormap_workspace"].to_bytes(8, "little") in launched
        assert eager["tensormap_workspace"].to_bytes(8, "little") not in launched

        other = operands_for(sizes, base=0x20_0000_0000)
        start = len(fake.calls)
        p.set_graph_pointers(*other)
        assert fake.names()[start:] == []  # host staging only
        words = p._staging[p.graph_slot].cast("Q")
        assert other[0][1].__cuda_array_interface__["data"][0] in words.tolist()
        with pytest.raises(InvalidProblemError, match="a has 1 operands"):
            p.set_graph_pointers(other[0][:1], *other[1:])


def test_ring_waits_only_when_every_slot_is_in_flight(make_fake, artifacts):
    fake = make_fake()
    fake.events_ready = False
    sizes = [(128, 256, 512)]
    with plan.GroupedGemmPlan(sizes, artifacts=artifacts, ring_slots=2) as p:
        for i in range(3):
            p.run(*operands_for(sizes, base=0x10_0000_0000 * (i + 1)), stream=5)
        # runs 1 and 2 took free slots; run 3 had to wait for run 1's slot
        assert fake.names().count("cuEventSynchronize") == 1
        slots = {dst for dst, _data, _stream in fake.copies}
        assert len(slots) == 2


def test_stream_change_orders_after_previous_run(make_fake, artifacts):
    fake = make_fake()
    sizes = [(128, 256, 512)]
    with plan.GroupedGemmPlan(sizes, artifacts=artifacts) as p:
        ops = operands_for(sizes)
        p.run(*ops, stream=5)
        p.run(*ops, stream=6)
        waits = [args for name, args in fake.calls if name == "cuStreamWaitEvent"]
        assert len(waits) == 1 and waits[0][0] == 6


def test_producer_stream_is_waited_for(make_fake, artifacts):
    fake = make_fake()
    sizes = [(128, 256, 512)]
    with plan.GroupedGemmPlan(sizes, artifacts=artifacts) as p:
        a, b, c, sfa, sfb = operands_for(sizes)
        a[0].__cuda_array_interface__["stream"] = 99
        p.run(a, b, c, sfa, sfb, stream=5)
        records = [args for name, args in fake.calls if name == "cuEventRecord"]
        waits = [args for name, args in fake.calls if name == "cuStreamWaitEvent"]
        assert records[0][1] == 99 and waits[0][0] == 5


def test_more_than_120_groups_split_into_launches(make_fake, artifacts):
    fake = make_fake()
    sizes = [(64, 128, 256)] * 121
    with plan.GroupedGemmPlan(sizes, artifacts=artifacts) as p:
        assert [(s.start, s.stop, s.num_groups) for s in p.launches] == [
            (0, 120, 120),
            (120, 121, 8),
        ]
        p.run(*operands_for(sizes))
        assert [launch.grid for launch in fake.launches] == [(120, 1, 1), (1, 1, 1)]
        assert fake.names().count("cuMemcpyHtoDAsync") == 1  # one copy for both tables
        inputs = p.kernel_inputs(0)
        assert inputs[0]["tensormap_workspace"] == inputs[1]["tensormap_workspace"]


def test_close_frees_everything(make_fake, artifacts):
    fake = make_fake()
    p = plan.GroupedGemmPlan([(128, 128, 256)], artifacts=artifacts)
    p.run(*operands_for([(128, 128, 256)]))
    p.close()
    p.close()
    assert not fake.memory and not fake.host
    assert fake.names().count("cuEventDestroy") == p.ring_slots + 1
    with pytest.raises(Exception, match="closed"):
        p.run(*operands_for([(128, 128, 256)]))


def test_get_plan_caches(make_fake, artifacts, monkeypatch):
    make_fake()
    monkeypatch.setenv("NVFP4_AOT_ARTIFACTS", str(artifacts))
    p1 = plan.get_plan([(128, 128, 256)])
    assert plan.get_plan([(128, 128, 256, 1)]) is p1
    assert plan.get_plan([(256, 128, 256)]) is not p1


def test_grouped_gemm_infers_sizes(make_fake, artifacts, monkeypatch):
    fake = make_fake()
    monkeypatch.setenv("NVFP4_AOT_ARTIFACTS", str(artifacts))
    sizes = [(96, 128, 512), (200, 256, 1024)]
    plan.grouped_gemm(*operands_for(sizes), stream=3)
    (launched,) = fake.launches
    assert launched.stream == 3
    cached = plan.get_plan(sizes)
    assert cached.problem_sizes == ((96, 128, 512, 1), (200, 256, 1024, 1))


def test_grouped_gemm_needs_sizes_for_raw_pointers(make_fake, artifacts, monkeypatch):
    make_fake()
    monkeypatch.setenv("NVFP4_AOT_ARTIFACTS", str(artifacts))
    with pytest.raises(
        InvalidProblemError, match=r"group 0: a is a raw pointer, so problem_sizes must be given"
    ):
        plan.grouped_gemm([1 << 20], [2 << 20], [3 << 20], [4 << 20], [5 << 20])
    # distinct, non-overlapping buffers (C must alias nothing)
    plan.grouped_gemm(
        [1 << 20], [2 << 20], [3 << 20], [4 << 20], [5 << 20], problem_sizes=[(128, 128, 256)]
    )


# ---------------------------------------------------------------------------------------
# validation


@pytest.mark.parametrize(
    "sizes, message",
    [([], r"problem_sizes is empty"),
     ([(128, 128)], r"group 0: problem size must have 3 \(m, n, k\) or 4 \(m, n, k, l\) entries, got 2"),
     ([(128, 128, 256), (0, 128, 256)], r"group 1: m must be >= 1, got 0"),
     ([(128, -1, 256)], r"group 0: n must be >= 1, got -1"),
     ([(128, 128, 256, 2)], r"group 0: l must be 1 .*got 2"),
     ([(128, 128, 48)], r"group 0: k must be a multiple of 32 .*got 48"),
     ([(128, 100, 256)], r"group 0: n must be a multiple of 32 .*got 100"),
     ([(128, 128, 1.5)], r"group 0: problem size must be integers"),
     ([(1 << 20, 4096, 4096)], r"group 0: m \* k must be < 2\*\*31 .*got 4294967296")],
)  # fmt: skip
def test_problem_size_validation(sizes, message):
    with pytest.raises(InvalidProblemError, match=message):
        validation.problem_sizes(sizes)


def test_problem_sizes_accept_numpy():
    sizes = np.array([[128, 256, 512, 1]], dtype=np.int64)
    assert validation.problem_sizes(sizes) == ((128, 256, 512, 1),)


def _bad_operands(sizes, field, replacement):
    ops = operands_for(sizes)
    ops["a b c sfa sfb".split().index(field)][0] = replacement
    return ops


M, N, K = 96, 128, 256
BASE = 0x7000_0000_0000


@pytest.mark.parametrize(
    "field, replacement, message",
    [("a", FakeArray(BASE, (M, K // 2), "<f2"), r"group 0: a must have dtype .*got f2"),
     ("a", FakeArray(BASE, (M, K), "|u1"), r"group 0: a must have shape \(96, 128\), got \(96, 256\)"),
     ("b", FakeArray(BASE, (N, K // 2), "|u1", strides=(256, 1)), r"group 0: b must be C-contiguous"),
     ("c", FakeArray(BASE, (M, N), "<f2", readonly=True), r"group 0: c is read-only"),
     ("c", FakeArray(BASE, (M, N), "<f4"), r"group 0: c: unsupported dtype \(typestr '<f4'\)"),
     ("sfa", FakeArray(BASE, (100,), "|u1"), r"group 0: sfa must hold at least 2048 bytes .*got 100"),
     ("sfb", FakeArray(BASE, (128, 8), "|u1", strides=(16, 1)), r"group 0: sfb must be dense"),
     ("a", FakeArray(BASE + 16, (M, K // 2), "|u1"), r"group 0: a must be 32-byte aligned, got address 0x700000000010"),
     ("b", 0, r"group 0: b is a null pointer"),
     ("sfa", 0x1234, r"group 0: sfa must be 32-byte aligned"),
     ("a", "nope", r"group 0: a: expected a device pointer"),
     ("a", FakeArray(BASE, (M, K // 2), "|u1", device=1), r"group 0: a is on device 1, the plan runs on device 0")],
)  # fmt: skip
def test_operand_validation(make_fake, artifacts, field, replacement, message):
    fake = make_fake()
    with plan.GroupedGemmPlan([(M, N, K)], artifacts=artifacts) as p:
        with pytest.raises(InvalidProblemError, match=message):
            p.run(*_bad_operands([(M, N, K)], field, replacement))
        assert not fake.launches


def test_operand_count_and_overlap(make_fake, artifacts):
    make_fake()
    sizes = [(M, N, K)] * 2
    with plan.GroupedGemmPlan(sizes, artifacts=artifacts) as p:
        a, b, c, sfa, sfb = operands_for(sizes)
        with pytest.raises(InvalidProblemError, match=r"b has 1 operands, the plan has 2 groups"):
            p.run(a, b[:1], c, sfa, sfb)
        c[1] = FakeArray(c[0].__cuda_array_interface__["data"][0] + 1024, (M, N), "<f2")
        with pytest.raises(InvalidProblemError, match=r"group 1: c overlaps group 0's c"):
            p.run(a, b, c, sfa, sfb)


def test_gpu_mode_style_operands_accepted(make_fake, artifacts):
    """(m, k/2, 1) views with l == 1 and permuted-but-dense blocked scales."""
    fake = make_fake()
    with plan.GroupedGemmPlan([(M, N, K)], artifacts=artifacts) as p:
        a, b, c, sfa, sfb = operands_for([(M, N, K)])
        a[0] = FakeArray(BASE, (M, K // 2, 1), "|u1", strides=(K // 2, 1, M * K // 2))
        c[0] = FakeArray(BASE + (1 << 30), (M, N, 1), "<f2", strides=(2 * N, 2, 2 * M * N))
        # (32, 4, rest_m, 4, rest_k, l) permuted view of a dense blocked buffer
        sfa[0] = FakeArray(BASE + (2 << 30), (32, 4, 1, 4, 4, 1), "|u1",
                           strides=(16, 4, 2048, 1, 512, 2048))  # fmt: skip
        p.run(a, b, c, sfa, sfb)
        assert len(fake.launches) == 1


# ---------------------------------------------------------------------------------------
# operands and streams without the plan


class _CudaStreamProtocol:
    def __cuda_stream__(self):
        return (0, 0xABC)


class _TorchLike:
    cuda_stream = 0xDEF


class _CupyLike:
    ptr = 0x123


def test_stream_handles():
    from cuda.bindings import driver as real

    assert operands.stream_handle(None) == 0
    assert operands.stream_handle(42) == 42
    assert operands.stream_handle(real.CUstream(77)) == 77
    assert operands.stream_handle(_CudaStreamProtocol()) == 0xABC
    assert operands.stream_handle(_TorchLike()) == 0xDEF
    assert operands.stream_handle(_CupyLike()) == 0x123
    with pytest.raises(TypeError, match=r"cannot get a CUDA stream handle from str"):
        operands.stream_handle("stream")
    assert operands.dlpack_stream_argument(0) == 1


class _DLPackArray:
    """Makes a real DLPack capsule (DLManagedTensor) with ctypes, as PyTorch would."""

    def __init__(
        self, pointer, shape, dtype, strides=None, device=(2, 0), byte_offset=0, versioned=False
    ):
        self.device = device
        self._shape = (ctypes.c_int64 * len(shape))(*shape)
        self._strides = (ctypes.c_int64 * len(shape))(*strides) if strides else None
        tensor = operands._DLTensor()
        tensor.data = pointer
        tensor.device = operands._DLDevice(*device)
        tensor.ndim = len(shape)
        tensor.dtype = operands._DLDataType(*dtype)
        tensor.shape = self._shape
        tensor.strides = self._strides
        tensor.byte_offset = byte_offset
        if versioned:
            self._managed = operands._DLManagedTensorVersioned()
            self._managed.version = operands._DLPackVersion(1, 1)
            self._managed.dl_tensor = tensor
            self._name = b"dltensor_versioned"
        else:
            self._managed = operands._DLManagedTensor()
            self._managed.dl_tensor = tensor
            self._name = b"dltensor"
        self.streams = []

    def __dlpack_device__(self):
        return self.device

    def __dlpack__(self, stream=None, max_version=None):
        self.streams.append(stream)
        new = ctypes.pythonapi.PyCapsule_New
        new.restype = ctypes.py_object
        new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        return new(ctypes.addressof(self._managed), self._name, None)


@pytest.mark.parametrize("versioned", [False, True])
def test_dlpack_operand(versioned):
    array = _DLPackArray(
        0x7000_0000, (96, 64), (1, 8, 1), device=(2, 1), byte_offset=256, versioned=versioned
    )
    described = operands.device_array(array, stream=0)
    assert described == operands.DeviceArray(0x7000_0100, (96, 64), None, "u1", False, 1)
    assert array.streams == [1]  # legacy default stream is 1 in DLPack


def test_dlpack_fp4_and_fp8_dtypes():
    fp4 = operands.device_array(_DLPackArray(256, (96, 128), (17, 4, 1)), stream=5)
    assert fp4.dtype == "e2m1" and operands.check_matrix(fp4, ("e2m1",), 96, 64) is None
    fp8 = operands.device_array(_DLPackArray(256, (512,), (10, 8, 1)), stream=5)
    assert fp8.dtype == "e4m3"


def test_dlpack_rejects_host_memory_and_odd_dtypes():
    with pytest.raises(ValueError, match=r"lives on a CPU device, expected a CUDA device"):
        operands.device_array(_DLPackArray(256, (4,), (1, 8, 1), device=(1, 0)))
    with pytest.raises(
        ValueError, match=r"unsupported DLPack dtype \(code, bits, lanes\) = \(2, 32, 1\)"
    ):
        operands.device_array(_DLPackArray(256, (4,), (2, 32, 1)))


def test_dlpack_operand_in_plan(make_fake, artifacts):
    fake = make_fake()
    with plan.GroupedGemmPlan([(M, N, K)], artifacts=artifacts) as p:
        a, b, c, sfa, sfb = operands_for([(M, N, K)])
        a[0] = _DLPackArray(BASE, (M, K // 2), (1, 8, 1))
        p.run(a, b, c, sfa, sfb, stream=9)
        assert a[0].streams == [9]
        table = np.frombuffer(fake.copies[-1][1], np.int64)
        assert table[0] == BASE


# ---------------------------------------------------------------------------------------
# paths, import hygiene


def test_artifacts_dir_env(tmp_path, monkeypatch, artifacts):
    from nvfp4_aot import paths

    monkeypatch.setenv("NVFP4_AOT_ARTIFACTS", str(artifacts))
    assert paths.artifacts_dir() == artifacts
    monkeypatch.setenv("NVFP4_AOT_ARTIFACTS", str(tmp_path / "none"))
    with pytest.raises(ArtifactError, match=r"no manifest.json found .*NVFP4_AOT_ARTIFACTS"):
        paths.artifacts_dir()


def assert_script_prints_ok(script: str) -> None:
    """Run ``script`` in a fresh interpreter (the repo on its path); it must print ok."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=REPO
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_runtime_needs_no_dsl_and_no_torch(artifacts):
    """Import and build/run a plan with cutlass and torch made unimportable."""
    script = textwrap.dedent(
        f"""
        import sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("cutlass", "torch", "cupy", "jax"):
                    raise ImportError(f"{{name}} is blocked in this test")
        sys.meta_path.insert(0, Block())
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        import nvfp4_aot
        assert "cuda.bindings.driver" not in sys.modules, "import nvfp4_aot loaded the driver"
        from nvfp4_aot import driver
        from fake_driver import FakeDriver
        from test_runtime_cpu import kernel_params_of, operands_for
        manifest = nvfp4_aot.load_manifest({str(artifacts)!r})
        fake = FakeDriver(capability=(9, 0), kernel_params=kernel_params_of(manifest))
        driver.use_backend(fake)
        with nvfp4_aot.GroupedGemmPlan([(128, 256, 512)], artifacts={str(artifacts)!r}) as plan:
            plan.run(*operands_for([(128, 256, 512)]))
        assert len(fake.launches) == 1
        bad = [m for m in sys.modules if m.split(".")[0] in ("cutlass", "torch")]
        assert not bad, bad
        print("ok")
        """
    )
    assert_script_prints_ok(script)


def test_committed_manifest_reads_if_present():
    directory = REPO / "artifacts"
    if not (directory / MANIFEST_NAME).exists():
        pytest.skip("no committed artifacts")
    manifest = loader.load_manifest(directory)
    for variant in manifest.variants:
        loader.read_cubin(directory, variant)  # sha256, size and arch all agree
    json.loads((directory / MANIFEST_NAME).read_text())


def test_many_raw_pointers(make_fake, artifacts):
    """From 32 groups pointers are checked and staged as one int64 array."""
    fake = make_fake()
    sizes = [(64, 128, 256)] * 40
    with plan.GroupedGemmPlan(sizes, artifacts=artifacts) as p:
        ops = [[0x10_0000_0000 + (f << 32) + g * 0x10_0000 for g in range(40)] for f in range(5)]
        p.run(*ops)
        table = np.frombuffer(fake.copies[-1][1], np.int64)
        assert table[: 120 * 3].reshape(120, 3)[:40].tolist() == [list(r) for r in zip(*ops[:3])]
        ops[3][17] += 8
        with pytest.raises(InvalidProblemError, match=r"group 17: sfa must be 32-byte aligned"):
            p.run(*ops)
        ops[3][17] = -32
        with pytest.raises(
            InvalidProblemError, match=r"group 17: sfa is not a device address: -32"
        ):
            p.run(*ops)


def test_overlapping_c_among_many_groups(make_fake, artifacts):
    make_fake()
    sizes = [(64, 128, 256)] * 40
    with plan.GroupedGemmPlan(sizes, artifacts=artifacts) as p:
        ops = [[0x10_0000_0000 + (f << 32) + g * 0x10_0000 for g in range(40)] for f in range(5)]
        ops[2][30] = ops[2][7] + 64
        with pytest.raises(InvalidProblemError, match=r"group 30: c overlaps group 7's c"):
            p.run(*ops)


# ---------------------------------------------------------------------------------------
# direct driver entry points (driver.DirectCalls) and the numpy-free launch path


def run_with(fake_class, manifest, artifacts, sizes, runs, **fake_kwargs):
    """Install a fake of ``fake_class``, run a plan on ``runs`` operand sets (stream 5)."""
    with installed(fake_class(kernel_params=kernel_params_of(manifest), **fake_kwargs)) as fake:
        with plan.GroupedGemmPlan(sizes, artifacts=artifacts, ring_slots=2) as p:
            for ops in runs:
                p.run(*ops, stream=5)
            calls = type(p._calls).__name__
    return fake, calls


def test_direct_calls_launch_exactly_what_the_bindings_launch(manifest, artifacts):
    sizes = [(128, 256, 512), (64, 512, 256), (200, 128, 1024)]
    runs = [operands_for(sizes, base=0x10_0000_0000 * (i % 3 + 1)) for i in range(5)]
    bindings, bindings_calls = run_with(FakeDriver, manifest, artifacts, sizes, runs)
    direct, direct_calls = run_with(DirectFakeDriver, manifest, artifacts, sizes, runs)
    assert (bindings_calls, direct_calls) == ("BindingsCalls", "DirectCalls")
    assert direct.entry_calls.count("cuLaunchKernelEx") == 5  # through the entry points
    assert direct.entry_calls.count("cuMemcpyHtoDAsync") == 5
    assert len(bindings.launches) == len(direct.launches) == 5
    for ex, plain in zip(bindings.launches, direct.launches):
        assert (ex.grid, ex.block, ex.shared_bytes, ex.stream, ex.params) == (
            plain.grid, plain.block, plain.shared_bytes, plain.stream, plain.params)  # fmt: skip
    assert bindings.copies == direct.copies  # same slots, same tables, same stream
    records = [args for name, args in direct.calls if name == "cuEventRecord"]
    assert records == [args for name, args in bindings.calls if name == "cuEventRecord"]
    assert len(records) == 5


def test_direct_call_failure_names_the_operation(manifest, artifacts):
    with installed(DirectFakeDriver(kernel_params=kernel_params_of(manifest))) as fake:
        sizes = [(128, 256, 512)]
        with plan.GroupedGemmPlan(sizes, artifacts=artifacts) as p:
            fake.fail["cuLaunchKernelEx"] = 1  # CUDA_ERROR_INVALID_VALUE
            with pytest.raises(CudaError, match="cuLaunchKernelEx.*CUDA_ERROR_INVALID_VALUE"):
                p.run(*operands_for(sizes), stream=5)
            # the table copy was queued: the slot's event still covers it
            assert fake.entry_calls[-3:] == ["cuMemcpyHtoDAsync", "cuLaunchKernelEx",
                                             "cuEventRecord"]  # fmt: skip
            assert p._slot_seq[0] == p._seq == 1
            fake.fail["cuLaunchKernelEx"] = 9999  # a code the bindings do not know
            with pytest.raises(CudaError, match="cuLaunchKernelEx.*CUresult 9999"):
                p.run(*operands_for(sizes), stream=5)
            del fake.fail["cuLaunchKernelEx"]
            fake.capturing_streams = {9}  # capture is seen through the direct query too
            records = fake.names().count("cuEventRecord")
            p.run(*operands_for(sizes), stream=9)
            assert fake.copies[-1][0] == p.kernel_inputs(p.graph_slot)[0]["abc_pointers"]
            assert fake.names().count("cuEventRecord") == records  # no ring event captured


def test_direct_launch_passes_the_bindings_launch_config(manifest, artifacts):
    """The direct launch hands the driver the CUlaunchConfig the bindings built: grid,
    block, shared memory, stream and every launch attribute arrive as in the manifest."""
    sizes = [(128, 256, 512)]
    direct, _calls = run_with(DirectFakeDriver, manifest, artifacts, sizes,
                              [operands_for(sizes)])  # fmt: skip
    (launch,) = direct.launches
    variant = next(v for v in manifest.variants if v.kernel_symbol == launch.function.symbol)
    assert launch.stream == 5 and launch.block == variant.block
    assert launch.shared_bytes == variant.dynamic_smem_bytes
    expected = {a.id: a.values for a in variant.launch_attributes}
    assert [i for i, _value in launch.attributes] == list(expected)
    for attr_id, value in launch.attributes:
        words = struct.unpack_from(f"<{len(expected[attr_id])}I", value)
        assert words == tuple(expected[attr_id])


def test_launch_path_imports_no_numpy(artifacts):
    """Plan creation and runs (direct calls, raw pointers) with numpy made unimportable:
    the cold start and the steady state pay no numpy import."""
    script = textwrap.dedent(
        f"""
        import sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("numpy", "cutlass", "torch"):
                    raise ImportError(f"{{name}} is blocked in this test")
        sys.meta_path.insert(0, Block())
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        import nvfp4_aot
        from nvfp4_aot import driver
        from fake_driver import DirectFakeDriver
        manifest = nvfp4_aot.load_manifest({str(artifacts)!r})
        params = {{v.kernel_symbol: [(p.offset, p.size) for p in v.params]
                   for v in manifest.variants}}
        fake = DirectFakeDriver(capability=(9, 0), kernel_params=params)
        driver.use_backend(fake)
        sizes = [(128, 256, 512)] * 3
        with nvfp4_aot.GroupedGemmPlan(sizes, artifacts={str(artifacts)!r}) as plan:
            for i in range(4):
                ops = [[(i + 1 << 40) + (f << 32) + (g << 24) for g in range(3)]
                       for f in range(5)]
                plan.run(*ops, stream=7)
        assert fake.entry_calls.count("cuLaunchKernelEx") == 4
        print("ok")
        """
    )
    assert_script_prints_ok(script)


def test_known_pointers_in_an_iterator_are_refused_cleanly(make_fake, artifacts):
    """The steady-state lookup consumes iterables; a validated set passed as an iterator
    still gets the sequence error, nothing is launched."""
    fake = make_fake()
    sizes = [(128, 256, 512)]
    with plan.GroupedGemmPlan(sizes, artifacts=artifacts) as p:
        ops = [[address_of(x) for x in column] for column in operands_for(sizes)]
        p.run(*ops)
        launches = len(fake.launches)
        with pytest.raises(InvalidProblemError, match="a must be a sequence .* list_iterator"):
            p.run(iter(ops[0]), *ops[1:])
        assert len(fake.launches) == launches


def address_of(array) -> int:
    return array.__cuda_array_interface__["data"][0]


# ---------------------------------------------------------------------------------------
# kernel families: per-plan choice, the decode-once kernel's workspace

A16 = "sm90_nvfp4_grouped_gemm_a16"
A16_WORKSPACE = Workspace(
    bytes_per_block=512, activation_bytes_per_element=2, activation_k_multiple=128, zero_once=True
)
A16_EXTRA = {"family": A16, "workspace": A16_WORKSPACE, "cooperative": 1}


@pytest.fixture(scope="module")
def hopper_artifacts(tmp_path_factory) -> Path:
    """sm_90a with both families, as the committed artifacts have them."""
    directory = tmp_path_factory.mktemp("hopper")
    write_synthetic(
        directory,
        [("sm_90a", 8), ("sm_90a", 120), ("sm_90a", 8, A16_EXTRA), ("sm_90a", 120, A16_EXTRA)],
    )
    return directory


@pytest.fixture
def hopper_fake(hopper_artifacts):
    manifest = loader.load_manifest(hopper_artifacts)
    with installed(FakeDriver(capability=(9, 0), kernel_params=kernel_params_of(manifest))) as fake:
        yield fake


def _benchmark_sizes():
    cases = json.loads((REPO / "tests" / "data" / "shapes.json").read_text())["benchmarks"]
    return [list(zip(c["m"], c["n"], c["k"])) for c in cases]


def test_family_rule_on_the_measured_benchmarks():
    """H200 (docs/hopper_kernel_notes.md): decoding once was faster on benchmarks 0 and 1
    (groups 4096 / 7168 wide, k 7168 / 2048), slower on 2 (3072 wide) and 3 (k 1536)."""
    from nvfp4_aot.selection import activations_once_pays

    assert [activations_once_pays(sizes) for sizes in _benchmark_sizes()] == [
        True, True, False, False]  # fmt: skip
    assert activations_once_pays([(128, 4096, 2048)] * 8)
    assert not activations_once_pays([(512, 2048, 7168)] * 8)  # narrow groups
    assert not activations_once_pays([(512, 4096, 1024)] * 8)  # short K


def test_plan_picks_the_family_per_problem(hopper_fake, hopper_artifacts):
    wide, _wide2, narrow, _short = _benchmark_sizes()
    with plan.GroupedGemmPlan(wide, artifacts=hopper_artifacts) as p:
        assert p.family == A16
        assert {launch.name for launch in p.variants} == {f"{A16}.sm_90a.g8"}
    with plan.GroupedGemmPlan(narrow, artifacts=hopper_artifacts) as p:
        assert p.family == "sm90_nvfp4_grouped_gemm"
    with plan.GroupedGemmPlan(wide, artifacts=hopper_artifacts, kernel=FAMILY["sm_90a"]) as p:
        assert p.family == FAMILY["sm_90a"]
    with pytest.raises(InvalidProblemError, match=f"kernel 'nope' is not baked.*{A16}"):
        plan.GroupedGemmPlan(wide, artifacts=hopper_artifacts, kernel="nope")
    with pytest.raises(InvalidProblemError, match="sm100_nvfp4_grouped_gemm' is not baked"):
        plan.GroupedGemmPlan(wide, artifacts=hopper_artifacts, kernel="sm100_nvfp4_grouped_gemm")


def test_decode_once_workspace_is_sized_for_every_sub_launch_and_zeroed(
    hopper_fake, hopper_artifacts
):
    """121 groups: two sub-launches of different grids share one workspace, which holds
    the larger one's descriptors + FP16 scratch; both workspaces (eager, graph) start
    zeroed (the kernel's grid-barrier counter) before anything can launch."""
    hopper_fake.alloc_fill = 0xA5
    sizes = [(40, 256, 224)] * 120 + [(300, 4096, 4128)]
    with plan.GroupedGemmPlan(sizes, artifacts=hopper_artifacts, kernel=A16) as p:
        first, second = p.launches
        assert (first.persistent_blocks, second.persistent_blocks) == (132, 96)
        need_first = 132 * 512 + 120 * 40 * 256 * 2  # k 224 pads to 256
        need_second = 96 * 512 + 300 * 4224 * 2  # k 4128 pads to 4224
        assert need_second > need_first
        assert p.workspace_bytes == -(-need_second // 128) * 128
        names = hopper_fake.names()
        assert names.index("cuMemsetD8") < names.index("cuCtxSynchronize")
        inputs = p.kernel_inputs(0)
        for workspace in (inputs[0]["tensormap_workspace"],
                          p.kernel_inputs(p.graph_slot)[0]["tensormap_workspace"]):  # fmt: skip
            assert hopper_fake.read(workspace, p.workspace_bytes) == bytes(p.workspace_bytes)
        assert inputs[0]["tensormap_workspace"] == inputs[1]["tensormap_workspace"]
        p.run(*operands_for(sizes))
        assert [dict(launch.attributes)[2].cooperative for launch in hopper_fake.launches] == [1, 1]


def test_per_cta_family_workspace_is_descriptors_only(hopper_fake, hopper_artifacts):
    hopper_fake.alloc_fill = 0xA5
    sizes = [(128, 4096, 512)] * 3
    with plan.GroupedGemmPlan(sizes, artifacts=hopper_artifacts, kernel=FAMILY["sm_90a"]) as p:
        assert p.workspace_bytes == 96 * 512
        assert "cuMemsetD8" not in hopper_fake.names()


def test_workspace_field_round_trips_and_is_checked(tmp_path):
    manifest = write_synthetic(tmp_path / "a", [("sm_90a", 8, A16_EXTRA), ("sm_90a", 120)])
    again = Manifest.from_json(manifest.to_json())
    assert again.variants[0].workspace == A16_WORKSPACE
    assert again.variants[1].workspace == Workspace()
    assert A16_WORKSPACE.bytes_for([(3, 64, 130, 1), (1, 8, 128)], 2) == 2 * 512 + (3 * 256 + 128) * 2
    raw = json.loads(manifest.to_json())
    raw["variants"][0]["workspace"]["zero_once"] = 1
    with pytest.raises(ArtifactError, match=r"variants\[0\]\.workspace\.zero_once: expected bool"):
        Manifest.from_json(json.dumps(raw))
    raw["variants"][0]["workspace"] = {"activation_k_multiple": 0}
    with pytest.raises(ArtifactError, match="activation_k_multiple must be >= 1"):
        Manifest.from_json(json.dumps(raw))
