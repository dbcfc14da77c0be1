"""The wheel, installed as a user would: a fresh virtual environment, no source tree.

Builds the wheel from a copy of the package sources (building in the checkout would
write build/ and *.egg-info there, and a stale build/lib could leak into the wheel),
checks its size and contents, installs it with its runtime dependencies and pytest from
the package index into a new venv (no build extra, no torch), then, from a directory
that holds only copies of the no-GPU runtime tests:

* ``cutlass`` and ``torch`` are not importable there;
* ``nvfp4-aot info --json`` (the venv's console script) lists every variant of the
  committed manifest, each cubin verified, read from the artifacts inside the installed
  package;
* the runtime's no-GPU test files pass against the installed package, and a generated
  test asserts that ``import nvfp4_aot`` resolved to the venv's site-packages.

Slow (about a minute: index downloads, one venv); CI runs it. Skipped, with the reason,
only when the package index cannot be reached at all.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from nvfp4_aot.cubin_pack import pack_name

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
TESTS = REPO / "tests"
WHEEL_SIZE_LIMIT = 1_000_000  # bytes
# No-GPU tests of the runtime that need only the installed package (add new ones here).
RUNTIME_TESTS = [
    "test_loader.py",
    "test_driver.py",
    "test_plan.py",
    "test_plan_ring.py",
    "test_validation.py",
    "test_operands.py",
    "test_paths.py",
    "test_imports.py",
    "test_selection.py",
    "test_workspace.py",
    "test_cli.py",
    "test_layouts.py",
    "test_reference.py",
]
OPTIONAL_RUNTIME_TESTS = ["test_bad_inputs.py"]  # copied too when present
TEST_SUPPORT = ["conftest.py", "support.py", "fake_driver.py", "data"]
SOURCES = ["setup.py", "pyproject.toml", "README.md", "nvfp4_aot", "artifacts"]
NETWORK_ERRORS = (
    "NewConnectionError",
    "Failed to establish a new connection",
    "Temporary failure in name resolution",
    "Network is unreachable",
    "No route to host",
)


def _clean_env(**extra: str) -> dict[str, str]:
    """The environment without anything that could point Python at the source tree."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "NVFP4_AOT_ARTIFACTS")
    }
    env.update(extra)
    return env


def _run(args, *, cwd, env=None, timeout=900) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [str(a) for a in args],
        cwd=cwd, env=env or _clean_env(), capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    if result.returncode != 0:
        output = result.stdout + result.stderr
        if any(marker in output for marker in NETWORK_ERRORS):
            pytest.skip(f"the package index is unreachable: {' '.join(map(str, args[:4]))}")
        pytest.fail(
            f"{' '.join(map(str, args))} exited {result.returncode}\n"
            f"stdout:\n{result.stdout[-6000:]}\nstderr:\n{result.stderr[-6000:]}"
        )
    return result


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    source = tmp_path_factory.mktemp("source")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for name in SOURCES:
        path = REPO / name
        if path.is_dir():
            shutil.copytree(path, source / name, ignore=ignore)
        else:
            shutil.copy2(path, source / name)
    out = tmp_path_factory.mktemp("wheelhouse")
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", out, "."], cwd=source)
    wheels = list(out.glob("nvfp4_aot-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("venv")
    _run([sys.executable, "-m", "venv", root], cwd=root)
    _run([root / "bin" / "python", "-m", "pip", "install", "-q", wheel, "pytest"], cwd=root)
    return root


def _manifest_variants() -> set[str]:
    manifest = json.loads((REPO / "artifacts" / "manifest.json").read_text())
    return {v["name"] for v in manifest["variants"]}


def _site_packages(venv: Path) -> Path:
    result = _run(
        [venv / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        cwd=venv,
    )
    return Path(result.stdout.strip()).resolve()


def test_wheel_size_and_contents(wheel):
    size = wheel.stat().st_size
    print(f"\n{wheel.name}: {size} bytes")
    assert size < WHEEL_SIZE_LIMIT, f"{wheel.name} is {size} bytes, the goal is < 1 MB"
    names = zipfile.ZipFile(wheel).namelist()
    shipped = {n.rsplit("/", 1)[1] for n in names if n.startswith("nvfp4_aot/artifacts/")}
    # the cubins in one xz pack per family (setup.py); the installed tests below load them
    committed = {pack_name(p.name) for p in (REPO / "artifacts").iterdir() if p.suffix == ".cubin"}
    assert shipped == committed | {"manifest.json"}
    assert "nvfp4_aot/cli.py" in names and "nvfp4_aot/bake/recorder.c" in names
    assert not [n for n in names if n.startswith(("tests/", "bench/", "examples/"))]
    metadata = next(n for n in names if n.endswith(".dist-info/METADATA"))
    requires = [
        line for line in zipfile.ZipFile(wheel).read(metadata).decode().splitlines()
        if line.startswith("Requires-Dist:") and "extra ==" not in line
    ]  # fmt: skip
    assert not [r for r in requires if "cutlass" in r or "torch" in r], requires


def test_installed_has_no_dsl_and_no_torch(venv):
    probe = "import importlib.util as u; print([m for m in ('cutlass', 'torch') if u.find_spec(m)])"
    result = _run([venv / "bin" / "python", "-c", probe], cwd=venv)
    assert result.stdout.strip() == "[]"


def test_info_json_from_the_installed_script(venv, tmp_path):
    result = _run([venv / "bin" / "nvfp4-aot", "info", "--json"], cwd=tmp_path)
    data = json.loads(result.stdout)
    artifacts = Path(data["artifacts"]).resolve()
    assert artifacts == _site_packages(venv) / "nvfp4_aot" / "artifacts"
    assert {v["name"] for v in data["variants"]} == _manifest_variants()
    assert all(v["cubin_check"] == "ok" for v in data["variants"]), data["variants"]


def test_runtime_tests_pass_against_the_installed_package(venv, tmp_path):
    site = _site_packages(venv)
    tests = tmp_path / "tests"
    tests.mkdir()
    optional = [name for name in OPTIONAL_RUNTIME_TESTS if (TESTS / name).exists()]
    for name in RUNTIME_TESTS + optional + TEST_SUPPORT:
        path = TESTS / name
        assert path.exists(), f"tests/{name} is listed in RUNTIME_TESTS/TEST_SUPPORT but missing"
        if path.is_dir():
            shutil.copytree(path, tests / name)
        else:
            shutil.copy2(path, tests / name)
    # the tests read <root>/artifacts: give them the installed package's, i.e. the shipped ones
    shutil.copytree(site / "nvfp4_aot" / "artifacts", tmp_path / "artifacts")
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\nmarkers =\n    gpu: needs an NVIDIA GPU\n    slow: slow\naddopts = -ra\n"
    )
    (tests / "test_zz_installed_origin.py").write_text(
        textwrap.dedent(
            f"""
            import importlib.util
            from pathlib import Path

            import nvfp4_aot
            from nvfp4_aot import paths


            def test_imports_the_installed_package():
                package = Path(nvfp4_aot.__file__).resolve().parent
                assert package == Path({str(site)!r}) / "nvfp4_aot", package
                assert paths.artifacts_dir() == package / "artifacts"
                assert importlib.util.find_spec("cutlass") is None
                assert importlib.util.find_spec("torch") is None
            """
        )
    )
    result = _run(
        [venv / "bin" / "python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=tmp_path,
    )
    summary = result.stdout.strip().splitlines()[-1]
    print(f"\ninstalled-package run: {summary}")
    assert re.search(r"\b\d+ passed\b", summary), summary
    assert not re.search(r"\b\d+ (failed|errors?)\b", summary), summary
