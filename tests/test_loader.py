"""Loading kernels against the fake driver (nvfp4_aot.loader): the variant for the
device's compute capability, cubins checked (sha256, size, arch) before anything is
loaded, the driver's view of the kernel parameters, function attributes, one load per
library, device limits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fake_driver import FakeDriver
from nvfp4_aot import driver, loader, plan
from nvfp4_aot.errors import ArtifactError, UnsupportedDeviceError
from nvfp4_aot.manifest import MANIFEST_NAME, SCHEMA_VERSION, Manifest, Variant
from support import (
    REPO,
    SMEM,
    fake_cubin,
    kernel_params_of,
    synthetic_variant,
    write_synthetic,
)


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
    key = next(key for key in params if key[1] == "kernel_sm_100a_g8")
    params[key] = params[key][:-1] + [(824, 4)]
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


def test_committed_manifest_reads_if_present():
    directory = REPO / "artifacts"
    if not (directory / MANIFEST_NAME).exists():
        pytest.skip("no committed artifacts")
    manifest = loader.load_manifest(directory)
    for variant in manifest.variants:
        loader.read_cubin(directory, variant)  # sha256, size and arch all agree
    json.loads((directory / MANIFEST_NAME).read_text())
