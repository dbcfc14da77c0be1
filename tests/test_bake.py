"""Build side: the captured launch ABI reproduces the DSL host launcher byte for byte.

These tests compile real kernels, so they need the build extra (nvidia-cutlass-dsl) and
gcc; CI installs both.
"""

from __future__ import annotations

import random
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner

pytest.importorskip("cutlass", reason="the build extra (nvidia-cutlass-dsl) is not installed")

import build_kernels  # noqa: E402
from nvfp4_aot.bake.artifacts import (  # noqa: E402
    compare_artifacts,
    compile_variant,
    describe_variant,
)
from nvfp4_aot.bake.capture import _random_inputs, capture_once, link_recorder  # noqa: E402
from nvfp4_aot.errors import CaptureError  # noqa: E402
from nvfp4_aot.manifest import read_manifest  # noqa: E402
from nvfp4_aot.packing import ParamPacker, launch_geometry  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
ARTIFACTS = REPO / "artifacts"
COMMITTED = read_manifest(ARTIFACTS)
VARIANTS = [(v.family, v.arch, v.num_groups) for v in COMMITTED.variants]


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """Each committed variant compiled once for this module."""
    work = tmp_path_factory.mktemp("compile")
    return {key: compile_variant(*key, work) for key in VARIANTS}


@pytest.mark.parametrize("family,arch,num_groups", VARIANTS)
def test_packed_params_equal_dsl_host_launcher(compiled, family, arch, num_groups, tmp_path):
    c = compiled[(family, arch, num_groups)]
    variant = describe_variant(c, tmp_path)
    packer = ParamPacker(variant)
    library = link_recorder(c.exported, tmp_path)
    sizes = [p.size for p in variant.params]
    rng = random.Random(f"{family}-{arch}-{num_groups}")
    for trial in range(3):
        inputs = _random_inputs(rng)
        poison = 0x11 + trial
        run = capture_once(library, sizes, inputs, poison, 232448)
        expected = packer.pack(inputs)
        for param, captured in zip(variant.params, run.params):
            padding = {i for a, b in param.padding for i in range(a, b)}
            ours = expected[param.offset : param.offset + param.size]
            for i in range(param.size):
                if i in padding:
                    assert captured[i] == poison  # really never written by the DSL
                else:
                    assert ours[i] == captured[i], f"param {param.index} byte {i}"
        geometry = launch_geometry(variant, inputs)
        assert geometry.grid == run.grid
        assert geometry.block == run.block
        assert geometry.dynamic_smem_bytes == run.dynamic_smem_bytes


@pytest.mark.parametrize("family,arch,num_groups", VARIANTS[:1])
def test_capture_is_deterministic(compiled, family, arch, num_groups, tmp_path):
    c = compiled[(family, arch, num_groups)]
    first = describe_variant(c, tmp_path / "a", seed=1)
    second = describe_variant(c, tmp_path / "b", seed=2)
    assert first == second


def test_committed_manifest_matches_fresh_capture(compiled, tmp_path):
    for key, c in compiled.items():
        variant = describe_variant(c, tmp_path / "-".join(map(str, key)))
        assert variant == COMMITTED.variant(*key)


def test_unexplained_parameter_byte_fails_the_capture(compiled, tmp_path, monkeypatch):
    """A byte that varies but no input explains (here: a sentinel we corrupt) is fatal."""
    from nvfp4_aot.bake import capture

    c = compiled[VARIANTS[0]]
    real = capture.capture_once

    def corrupting(*args, **kwargs):
        run = real(*args, **kwargs)
        params = list(run.params)
        params[-1] = bytes([params[-1][0] ^ (1 + args[3] % 7)]) + params[-1][1:]
        return capture.RawCapture(**{**run.__dict__, "params": tuple(params)})

    monkeypatch.setattr(capture, "capture_once", corrupting)
    with pytest.raises(CaptureError, match="explained by no input"):
        capture.capture_launch(c.exported, tmp_path)


def test_check_passes_on_committed_artifacts():
    result = subprocess.run(
        [sys.executable, "build_kernels.py", "--check", "--quiet"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    assert "reproduces" in result.stdout


def test_compare_names_every_difference(tmp_path):
    copy = tmp_path / "artifacts"
    shutil.copytree(ARTIFACTS, copy)
    victim = COMMITTED.variants[0]
    cubin = bytearray((copy / victim.cubin).read_bytes())
    cubin[100] ^= 0xFF
    (copy / victim.cubin).write_bytes(bytes(cubin))
    text = (copy / "manifest.json").read_text().replace('"dynamic_smem_bytes": ', '"dynamic_smem_bytes": 1', 1)
    (copy / "manifest.json").write_text(text)
    problems = compare_artifacts(copy, ARTIFACTS)
    assert any(f"cubin file {victim.cubin} differs" in p for p in problems)
    assert any("dynamic_smem_bytes differs" in p for p in problems)


@pytest.mark.parametrize(
    "args,message",
    [
        (["--arch", "sm_80"], "no kernel family supports arch 'sm_80'"),
        (["--groups", "0"], "group count 0 is outside"),
        (["--groups", "-3"], "group count -3 is outside"),
        (["--groups", "5000"], "group count 5000 is outside"),
    ],
)
def test_bad_build_options_exit_nonzero(args, message, tmp_path):
    result = CliRunner().invoke(build_kernels.main, [*args, "--out", str(tmp_path / "a")])
    assert result.exit_code != 0
    assert message in result.output
    assert not (tmp_path / "a").exists()


def test_missing_dsl_names_the_build_extra(monkeypatch, tmp_path):
    monkeypatch.setattr(build_kernels.importlib.util, "find_spec", lambda name: None)
    result = CliRunner().invoke(build_kernels.main, ["--out", str(tmp_path / "a")])
    assert result.exit_code != 0
    assert "pip install -e '.[build]'" in result.output


def test_unwritable_output_leaves_nothing(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    result = CliRunner().invoke(
        build_kernels.main,
        ["--arch", "sm_100a", "--groups", "8", "--quiet", "--out", str(blocker / "artifacts")],
    )
    assert result.exit_code != 0
    assert "cannot write to the output directory" in result.output


def test_compiler_failure_is_reported_and_writes_nothing(monkeypatch, tmp_path):
    from nvfp4_aot import kernels

    broken = kernels.KernelFamily("sm100_nvfp4_grouped_gemm", "nvfp4_aot.kernels.no_such_kernel", ("sm_100a",))
    monkeypatch.setattr(kernels, "FAMILIES", (broken,))
    out = tmp_path / "artifacts"
    result = CliRunner().invoke(
        build_kernels.main, ["--arch", "sm_100a", "--groups", "8", "--quiet", "--out", str(out)]
    )
    assert result.exit_code != 0
    assert "compiling sm100_nvfp4_grouped_gemm for sm_100a, G=8 failed" in result.output
    assert not out.exists()


def test_wheel_contains_the_artifacts(tmp_path):
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(REPO)],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("nvfp4_aot-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "nvfp4_aot/artifacts/manifest.json" in names
    for v in COMMITTED.variants:
        assert f"nvfp4_aot/artifacts/{v.cubin}" in names
    assert "nvfp4_aot/bake/recorder.c" in names
    assert wheel.stat().st_size < 1 << 20
