"""The test harness itself (conftest.py, support.py): NVFP4_AOT_REQUIRE_GPU turns a GPU
test's "cannot run here" into a failure, and GPU tests are named and marked consistently.

The end-to-end cases run pytest in a child process on real GPU tests with the GPU hidden
(CUDA_VISIBLE_DEVICES=""), so they hold on a GPU machine as on this one.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from support import REPO, REQUIRE_GPU, gpu_unavailable

TESTS = Path(__file__).resolve().parent
# one GPU test of each GPU file: both take the device fixture from conftest.py
GPU_TESTS = [
    "tests/test_runtime_gpu.py::test_cuda_array_interface_operands",
    "tests/test_examples_gpu.py::test_raw_pointers[0]",
]
NO_DEVICE = r"(no CUDA device|no usable CUDA driver)"


def run_pytest(args, *, cwd, **env) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if k != REQUIRE_GPU}
    environment.update(env, PYTHONPATH=str(REPO))
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_gpu_unavailable_skips_unless_a_gpu_is_required(monkeypatch):
    monkeypatch.delenv(REQUIRE_GPU, raising=False)
    with pytest.raises(pytest.skip.Exception, match="no CUDA device"):
        gpu_unavailable("no CUDA device")
    monkeypatch.setenv(REQUIRE_GPU, "0")
    with pytest.raises(pytest.skip.Exception, match="tests/data/shapes.json is absent"):
        gpu_unavailable("tests/data/shapes.json is absent")
    monkeypatch.setenv(REQUIRE_GPU, "1")
    with pytest.raises(pytest.fail.Exception, match=f"{REQUIRE_GPU}=1, but no CUDA device"):
        gpu_unavailable("no CUDA device")


def test_gpu_tests_skip_without_a_gpu():
    result = run_pytest(GPU_TESTS, cwd=REPO, CUDA_VISIBLE_DEVICES="")
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert re.search(r"\b2 skipped\b", output), output
    assert re.search(rf"SKIPPED \[\d+\] .*: {NO_DEVICE}", output), output


def test_gpu_tests_fail_without_a_gpu_when_one_is_required():
    result = run_pytest(GPU_TESTS, cwd=REPO, CUDA_VISIBLE_DEVICES="", **{REQUIRE_GPU: "1"})
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert re.search(r"\b2 errors?\b", output), output  # the device fixture fails in setup
    assert "skipped" not in output, output
    for test in GPU_TESTS:
        assert f"ERROR at setup of {test.split('::')[1]}" in output, output
    reasons = re.findall(rf"^E? *{REQUIRE_GPU}=1, but {NO_DEVICE}", output, re.M)
    assert len(reasons) == len(GPU_TESTS), output


@pytest.mark.parametrize(
    "name, marked",
    [("test_unmarked_gpu.py", False), ("test_marked_cpu.py", True)],
)
def test_gpu_tests_are_named_and_marked_consistently(tmp_path, name, marked):
    for support in ("conftest.py", "support.py", "fake_driver.py"):
        shutil.copy2(TESTS / support, tmp_path / support)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    gpu: needs an NVIDIA GPU\n")
    mark = "@pytest.mark.gpu\n" if marked else ""
    (tmp_path / name).write_text(f"import pytest\n\n\n{mark}def test_one():\n    pass\n")
    result = run_pytest(["--collect-only", name], cwd=tmp_path)
    output = result.stdout + result.stderr
    assert result.returncode == pytest.ExitCode.USAGE_ERROR, output
    assert (
        f"GPU tests belong in tests/*_gpu.py and carry the gpu marker (both or neither): {name}::test_one"
        in output
    )
