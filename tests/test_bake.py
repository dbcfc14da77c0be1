"""Build side: the captured launch ABI reproduces the DSL host launcher byte for byte.

These tests compile real kernels, so they need the build extra (nvidia-cutlass-dsl) and
gcc; CI installs both. Every committed variant is compiled and baked once per run (the
``bake`` fixture); the fresh bake is compared with ``artifacts/`` as
``build_kernels.py --check`` would, and the ``--check`` command line itself is run on
that bake instead of compiling everything a second time.
"""

from __future__ import annotations

import importlib.util
import random
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

import build_kernels
from nvfp4_aot.bake import capture
from nvfp4_aot.bake.artifacts import (
    BakedVariant,
    CompiledVariant,
    bake_compiled,
    compare_artifacts,
    compile_variant,
    describe_variant,
    variant_key,
    write_artifacts,
)
from nvfp4_aot.bake.capture import capture_once, link_recorder, random_inputs
from nvfp4_aot.cubin_pack import pack_name
from nvfp4_aot.errors import CaptureError
from nvfp4_aot.manifest import INPUT_KINDS, INPUT_NAMES, InputSlot, read_manifest
from nvfp4_aot.packing import ParamPacker, launch_geometry

REPO = Path(__file__).resolve().parents[1]
ARTIFACTS = REPO / "artifacts"
COMMITTED = read_manifest(ARTIFACTS)
VARIANTS = [variant_key(v) for v in COMMITTED.variants]
NAMES = [v.name for v in COMMITTED.variants]
needs_dsl = pytest.mark.skipif(
    importlib.util.find_spec("cutlass") is None,
    reason="the build extra (nvidia-cutlass-dsl) is not installed",
)


@dataclass(frozen=True)
class Bake:
    compiled: dict[tuple, CompiledVariant]  # by variant_key
    baked: dict[tuple, BakedVariant]
    directory: Path  # the artifacts written from ``baked``


@pytest.fixture(scope="session")
def bake(tmp_path_factory) -> Bake:
    """Every committed variant compiled, captured and written once per test run."""
    pytest.importorskip("cutlass", reason="the build extra (nvidia-cutlass-dsl) is not installed")
    work = tmp_path_factory.mktemp("compile")
    compiled = {key: compile_variant(*key, work) for key in VARIANTS}
    baked = {key: bake_compiled(c) for key, c in compiled.items()}
    directory = tmp_path_factory.mktemp("rebuilt")
    write_artifacts(directory, list(baked.values()))
    return Bake(compiled, baked, directory)


@pytest.fixture
def compiled(bake):
    return bake.compiled


def test_fresh_bake_reproduces_committed_artifacts(bake):
    """What ``build_kernels.py --check`` proves: cubins and manifest byte-identical."""
    assert compare_artifacts(ARTIFACTS, bake.directory) == []
    assert (bake.directory / "manifest.json").read_bytes() == (
        ARTIFACTS / "manifest.json"
    ).read_bytes()


@pytest.mark.parametrize("key", VARIANTS, ids=NAMES)
def test_packed_params_equal_dsl_host_launcher(bake, key, tmp_path):
    c = bake.compiled[key]
    variant = bake.baked[key].variant
    packer = ParamPacker(variant)
    library = link_recorder(c.exported, tmp_path)
    sizes = [p.size for p in variant.params]
    rng = random.Random(variant.name)
    for trial in range(4):
        inputs = random_inputs(rng, realistic=trial % 2 == 0, kinds=variant.input_kinds)
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


@pytest.mark.parametrize("key", VARIANTS[:1], ids=NAMES[:1])
def test_capture_is_deterministic(compiled, key, tmp_path):
    c = compiled[key]
    first = describe_variant(c, tmp_path / "a", seed=1)
    second = describe_variant(c, tmp_path / "b", seed=2)
    assert first == second


def test_unexplained_parameter_byte_fails_the_capture(compiled, tmp_path, monkeypatch):
    """A byte that varies but no input explains (here: a sentinel we corrupt) is fatal."""
    c = compiled[VARIANTS[0]]
    real = capture.capture_once

    def corrupting(*args, **kwargs):
        run = real(*args, **kwargs)
        params = list(run.params)
        params[-1] = bytes([params[-1][0] ^ (1 + args[3] % 7)]) + params[-1][1:]
        return capture.RawCapture(**{**run.__dict__, "params": tuple(params)})

    monkeypatch.setattr(capture, "capture_once", corrupting)
    with pytest.raises(CaptureError, match="explained by no input"):
        describe_variant(c, tmp_path)


@pytest.fixture
def bake_from_session(bake, monkeypatch):
    """``build_kernels`` bakes by handing out the session's bake (no second compile)."""
    calls = []

    def bake_variant(family, arch, num_groups, epilogue, workdir):
        calls.append((family, arch, num_groups, epilogue))
        return bake.baked[(family, arch, num_groups, epilogue)]

    monkeypatch.setattr(build_kernels, "bake_variant", bake_variant)
    return calls


def test_check_passes_on_committed_artifacts(bake_from_session):
    """``--check`` rebakes every variant the manifest names and finds no difference."""
    result = CliRunner().invoke(build_kernels.main, ["--check", "--quiet", "--out", str(ARTIFACTS)])
    assert result.exit_code == 0, result.output
    assert "a fresh build reproduces" in result.output
    assert sorted(bake_from_session, key=str) == sorted(VARIANTS, key=str)


def test_check_fails_on_a_difference(bake_from_session, tmp_path):
    copy = tmp_path / "artifacts"
    shutil.copytree(ARTIFACTS, copy)
    victim = COMMITTED.variants[-1]
    cubin = bytearray((copy / victim.cubin).read_bytes())
    cubin[200] ^= 0x01
    (copy / victim.cubin).write_bytes(bytes(cubin))
    result = CliRunner().invoke(build_kernels.main, ["--check", "--quiet", "--out", str(copy)])
    assert result.exit_code == 1, result.output
    assert f"{victim.name}: cubin file {victim.cubin} differs" in result.output


def test_compare_names_every_difference(tmp_path):
    copy = tmp_path / "artifacts"
    shutil.copytree(ARTIFACTS, copy)
    victim = COMMITTED.variants[0]
    cubin = bytearray((copy / victim.cubin).read_bytes())
    cubin[100] ^= 0xFF
    (copy / victim.cubin).write_bytes(bytes(cubin))
    text = (
        (copy / "manifest.json")
        .read_text()
        .replace('"dynamic_smem_bytes": ', '"dynamic_smem_bytes": 1', 1)
    )
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


@needs_dsl
def test_unwritable_output_leaves_nothing(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    result = CliRunner().invoke(
        build_kernels.main,
        ["--arch", "sm_100a", "--groups", "8", "--quiet", "--out", str(blocker / "artifacts")],
    )
    assert result.exit_code != 0
    assert "cannot write to the output directory" in result.output


@needs_dsl
def test_compiler_failure_is_reported_and_writes_nothing(monkeypatch, tmp_path):
    from nvfp4_aot import kernels

    broken = kernels.KernelFamily(
        "sm100_nvfp4_grouped_gemm", "nvfp4_aot.kernels.no_such_kernel", ("sm_100a",)
    )
    monkeypatch.setattr(kernels, "FAMILIES", (broken,))
    out = tmp_path / "artifacts"
    result = CliRunner().invoke(
        build_kernels.main, ["--arch", "sm_100a", "--groups", "8", "--quiet", "--out", str(out)]
    )
    assert result.exit_code != 0
    assert "compiling sm100_nvfp4_grouped_gemm.sm_100a.g8 failed" in result.output
    assert not out.exists()


@needs_dsl
def test_wheel_contains_the_artifacts(tmp_path):
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(REPO)],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("nvfp4_aot-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "nvfp4_aot/artifacts/manifest.json" in names
    for v in COMMITTED.variants:  # each cubin in its family's pack
        assert f"nvfp4_aot/artifacts/{pack_name(v.cubin)}" in names
    assert "nvfp4_aot/bake/recorder.c" in names
    assert wheel.stat().st_size < 1 << 20


# ---------------------------------------------------------------------------------------
# the differential capture's trials and byte classification, on synthetic captures


def _runs(host, schedule=None) -> list[capture.RawCapture]:
    """What ``host(inputs, poison) -> bytes`` (one kernel parameter) writes in each trial."""
    return [
        capture.RawCapture(
            inputs=inputs, poison=poison, smem_optin=smem, grid=(1, 1, 1), block=(1, 1, 1),
            dynamic_smem_bytes=0, launch_attributes=(), calls=(),
            params=(host(inputs, poison),), kernel_name="k", embedded_cubins=(),
        )
        for inputs, poison, smem in (schedule or capture.trials(seed=0))
    ]  # fmt: skip


def _int32(value: int) -> bytes:
    return value.to_bytes(4, "little")


def _classify(runs):
    return capture._classify_param(0, 0, 8, runs)


def test_trials_mix_realistic_and_sentinel_values_all_distinct():
    int32s = [n for n, k in INPUT_KINDS.items() if k == "int32"]
    for seed in range(200):
        schedule = capture.trials(seed)
        assert len({poison for _, poison, _ in schedule}) == len(schedule)
        kinds = set()
        for inputs, _, _ in schedule:
            assert sorted(inputs) == sorted(INPUT_NAMES)
            assert len(set(inputs.values())) == len(inputs), inputs
            assert all(v % 16 == 0 for n, v in inputs.items() if INPUT_KINDS[n] == "pointer")
            small = [inputs[n] in capture.REALISTIC_INT32 for n in int32s]
            large = [inputs[n] in capture.SENTINEL_INT32 for n in int32s]
            assert all(small) or all(large)
            kinds.add(all(small))
        assert kinds == {True, False}


def test_trial_count_is_checked():
    for captures in (1, len(capture._POISONS) + 1):
        with pytest.raises(CaptureError, match="captures asked for"):
            capture.trials(0, captures)


def test_slots_hold_their_input_in_every_trial():
    def host(inputs, poison):
        return (
            inputs["tensormap_workspace"].to_bytes(8, "little")
            + _int32(inputs["persistent_blocks"])
            + bytes([poison] * 4)
        )

    param = _classify(_runs(host))
    assert param.slots == (
        InputSlot("tensormap_workspace", 0, 8),
        InputSlot("persistent_blocks", 8, 4),
    )
    assert param.padding == ((12, 16),)


def test_value_clamped_by_the_host_code_is_not_baked_as_a_constant():
    """Host code that clamps (or otherwise derives from) a realistic value: with sentinels
    alone the byte looks constant and the manifest would bake it; the realistic trials
    expose it."""

    def host(inputs, poison):
        return _int32(min(inputs["persistent_blocks"], 65535)) + bytes(4)

    sentinel_only = [t for t in capture.trials(0) if t[0]["persistent_blocks"] >= 1 << 16]
    assert _classify(_runs(host, sentinel_only)).slots == ()  # the blind spot
    with pytest.raises(CaptureError, match="explained by no input"):
        _classify(_runs(host))


def test_small_constant_equal_to_a_realistic_value_is_a_constant():
    """A constant 7 is not mistaken for an input that is 7 in the realistic trials."""
    schedule = capture.trials(0)
    for inputs, _, _ in schedule:
        if inputs["total_tiles"] in capture.REALISTIC_INT32:
            inputs["total_tiles"] = 7
            if inputs["persistent_blocks"] == 7:
                inputs["persistent_blocks"] = 8
    param = _classify(_runs(lambda inputs, poison: _int32(7) + bytes(4), schedule))
    assert param.slots == ()
    assert param.constant_hex == _int32(7).hex() + "00" * 4


def test_two_inputs_with_equal_values_are_ambiguous():
    """Where two inputs held the same values, the bytes cannot say which one they are."""
    schedule = capture.trials(0)
    for inputs, _, _ in schedule:
        inputs["total_tiles"] = inputs["persistent_blocks"]

    def host(inputs, poison):
        return _int32(inputs["persistent_blocks"]) + bytes(4)

    with pytest.raises(CaptureError, match="and another input at once"):
        _classify(_runs(host, schedule))
