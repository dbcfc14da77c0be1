"""Fixtures shared by the test files; helpers are in support.py, the driver fake in
fake_driver.py (test files never import from one another).

* CPU: ``artifacts`` (synthetic artifacts of every arch), ``manifest``, ``make_fake``
  (installs a FakeDriver for one test), ``hopper_artifacts`` / ``hopper_fake`` (sm_90a
  with both kernel families).
* GPU: ``device``, device 0 when it can run a baked kernel. Where it cannot (no GPU, no
  usable driver, no baked kernel for the GPU) the test is skipped, or fails under
  ``NVFP4_AOT_REQUIRE_GPU=1`` (bench/h200_batch.sh sets it).

GPU tests live in ``*_gpu.py`` files and carry the ``gpu`` marker, both or neither;
collection stops with a usage error where a test breaks that rule.
"""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

import pytest

from fake_driver import FakeDriver, installed
from nvfp4_aot import driver, loader
from nvfp4_aot.errors import ArtifactError, CudaError, UnsupportedDeviceError
from support import (
    A16_EXTRA,
    ALL_COMBOS,
    gpu_unavailable,
    installed_h200,
    kernel_params_of,
    write_synthetic,
)


def pytest_collection_modifyitems(config, items):
    """GPU tests: in a ``*_gpu.py`` file if and only if marked ``gpu``."""
    wrong = [
        item.nodeid
        for item in items
        if item.path.name.endswith("_gpu.py") != (item.get_closest_marker("gpu") is not None)
    ]
    if wrong:
        raise pytest.UsageError(
            "GPU tests belong in tests/*_gpu.py and carry the gpu marker (both or neither): "
            + ", ".join(wrong)
        )


# ---------------------------------------------------------------------------------------
# CPU: synthetic artifacts and the fake driver


@pytest.fixture(scope="session")
def artifacts(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("artifacts")
    write_synthetic(directory, ALL_COMBOS)
    return directory


@pytest.fixture
def manifest(artifacts):
    return loader.load_manifest(artifacts)


@pytest.fixture
def make_fake(manifest):
    """Install a FakeDriver (capability etc. as given) for the test; restore afterwards."""
    with ExitStack() as stack:

        def make(**kwargs) -> FakeDriver:
            kwargs.setdefault("kernel_params", kernel_params_of(manifest))
            return stack.enter_context(installed(FakeDriver(**kwargs)))

        yield make


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
    with installed_h200(hopper_artifacts) as fake:
        yield fake


# ---------------------------------------------------------------------------------------
# GPU


@pytest.fixture(scope="module")
def device() -> int:
    """Device 0, activated, when it can run a baked kernel; otherwise the test is
    skipped, or fails under NVFP4_AOT_REQUIRE_GPU=1 (``support.gpu_unavailable``)."""
    reason = None
    try:
        if driver.device_count() < 1:
            reason = "no CUDA device"
        else:
            loader.variants_for(loader.load_manifest(), driver.compute_capability(0))
    except CudaError as exc:
        reason = f"no usable CUDA driver: {exc}"
    except (ArtifactError, UnsupportedDeviceError) as exc:
        reason = f"no baked kernel for this GPU: {exc}"
    if reason:
        gpu_unavailable(reason)  # outside the except: the report shows only the reason
    driver.activate(0)
    return 0
