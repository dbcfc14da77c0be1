"""The command line (nvfp4_aot.cli) without a GPU: CliRunner against fake drivers.

``ComputingDriver`` extends tests/fake_driver.py with what the CLI needs (memset,
device-to-host copies, timing events) and, on each launch, computes the grouped GEMM
from the simulated device memory exactly as the kernel would read it (problem sizes,
pointer tables, blocked scales), so that ``verify`` runs end to end on the committed
artifacts.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import struct
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from fake_driver import SUCCESS, FakeDriver
from nvfp4_aot import cli, driver, loader, plan
from nvfp4_aot.layouts import blocked_scale_bytes, blocked_to_scales
from nvfp4_aot.reference import dequantize

REPO = Path(__file__).resolve().parents[1]
ARTIFACTS = REPO / "artifacts"
MANIFEST = loader.load_manifest(ARTIFACTS)


class NoDriver:
    """A backend whose libcuda cannot be loaded (what cuda.bindings raises then)."""

    def cuInit(self, flags):
        raise RuntimeError("libcuda.so.1: cannot open shared object file")


class ComputingDriver(FakeDriver):
    """A fake GPU of compute capability 9.0 that computes what the kernel would."""

    def __init__(self, skip_group: int | None = None, **kwargs):
        params = {
            v.kernel_symbol: [(p.offset, p.size) for p in v.params] for v in MANIFEST.variants
        }
        super().__init__(capability=(9, 0), kernel_params=params, **kwargs)
        self.skip_group = skip_group
        self.images: dict[int, str] = {}  # library handle -> sha256
        self.elapsed = 0.0

    def cuDriverGetVersion(self):
        return (SUCCESS, 13000)

    def cuCtxSynchronize(self):
        return (SUCCESS,)

    def cuMemsetD16(self, dst, value, count):
        self._write(int(dst), struct.pack("<H", value) * count)
        return (SUCCESS,)

    def cuMemcpyDtoH(self, dst, src, size):
        data = self.read(int(src), size)
        ctypes.memmove(dst, data, size)
        return (SUCCESS,)

    def cuEventElapsedTime(self, start, end):
        self.elapsed += 0.001
        return (SUCCESS, 0.010 + self.elapsed)

    def cuLibraryLoadData(self, image, *options):
        result = super().cuLibraryLoadData(image, *options)
        self.images[result[1]] = hashlib.sha256(image).hexdigest()
        return result

    def cuLaunchKernelEx(self, config, function, kernel_params, extra):
        result = super().cuLaunchKernelEx(config, function, kernel_params, extra)
        sha = self.images[function.library]
        variant = next(v for v in MANIFEST.variants if v.sha256 == sha)
        buffer = bytearray(variant.param_bytes)
        for param, data in zip(variant.params, self.launches[-1].params):
            buffer[param.offset : param.offset + param.size] = data

        def pointer(name):
            ((offset, _size),) = variant.slots_for(name)
            return struct.unpack_from("<Q", buffer, offset)[0]

        g_count = variant.num_groups
        sizes = np.frombuffer(self.read(pointer("problem_sizes"), g_count * 16), np.int32)
        abc = np.frombuffer(self.read(pointer("abc_pointers"), g_count * 24), np.uint64)
        scales = np.frombuffer(self.read(pointer("scale_pointers"), g_count * 16), np.uint64)
        for g in range(g_count):
            m, n, k, _l = (int(v) for v in sizes[4 * g : 4 * g + 4])
            if m == 0 or g == self.skip_group:
                continue
            a_ptr, b_ptr, c_ptr = (int(v) for v in abc[3 * g : 3 * g + 3])
            sfa_ptr, sfb_ptr = (int(v) for v in scales[2 * g : 2 * g + 2])

            def operand(data_ptr, scale_ptr, rows, k=k):
                data = np.frombuffer(self.read(data_ptr, rows * k // 2), np.uint8)
                blocked = np.frombuffer(
                    self.read(scale_ptr, blocked_scale_bytes(rows, k)), np.uint8
                )
                return dequantize(
                    data.reshape(rows, k // 2), blocked_to_scales(blocked, rows, k // 16)
                )

            c = operand(a_ptr, sfa_ptr, m) @ operand(b_ptr, sfb_ptr, n).T
            self._write(c_ptr, c.astype(np.float16).tobytes())
        return result


@pytest.fixture
def use_driver():
    """Install a fake backend for one test; restores the previous one afterwards."""
    previous = []

    def install(backend):
        previous.append(driver.use_backend(backend))
        loader.clear_caches()
        plan.clear_plan_cache()
        return backend

    yield install
    if previous:
        driver.use_backend(previous[0])
        loader.clear_caches()


def invoke(*args):
    return CliRunner().invoke(cli.main, list(args), catch_exceptions=False)


# info ------------------------------------------------------------------------------------


def test_info_json_lists_committed_variants_without_a_driver(use_driver):
    use_driver(NoDriver())
    result = invoke("info", "--json", "--artifacts", str(ARTIFACTS))
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert {v["name"] for v in data["variants"]} == {v.name for v in MANIFEST.variants}
    assert all(v["cubin_check"] == "ok" for v in data["variants"])
    assert data["manifest"]["dsl_version"] == MANIFEST.dsl_version
    scratch = {
        v["family"]: v["workspace"]["activation_bytes_per_element"] for v in data["variants"]
    }
    assert scratch["sm90_nvfp4_grouped_gemm_a16"] == 2 and scratch["sm90_nvfp4_grouped_gemm"] == 0
    assert data["cuda"]["available"] is False
    assert data["cuda"]["error"].startswith("no CUDA driver")
    assert data["gpus"] == []


def test_info_table_says_no_cuda_driver(use_driver):
    use_driver(NoDriver())
    result = invoke("info")
    assert result.exit_code == 0, result.output
    assert "no CUDA driver" in result.output
    for v in MANIFEST.variants:
        assert v.name in result.output


def test_info_lists_gpus_and_their_variants(use_driver):
    use_driver(ComputingDriver(devices=2))
    data = json.loads(invoke("info", "--json").stdout)
    assert data["cuda"] == {"available": True, "driver_version": "13.0", "error": None}
    assert [g["ordinal"] for g in data["gpus"]] == [0, 1]
    sm90 = sorted(v.name for v in MANIFEST.variants if v.arch == "sm_90a")
    assert sorted(data["gpus"][0]["variants"]) == sm90
    assert data["gpus"][0]["compute_capability"] == [9, 0]


def test_info_explains_why_a_gpu_has_no_variant(use_driver):
    fake = use_driver(ComputingDriver())
    fake.attributes.update({75: 8, 76: 6})  # an sm_86 GPU
    result = invoke("info")
    assert result.exit_code == 0, result.output
    assert "no variant: no baked kernel runs on a device of compute capability 8.6" in result.output


def test_info_reports_a_corrupt_cubin(tmp_path, use_driver):
    use_driver(NoDriver())
    for path in ARTIFACTS.iterdir():
        (tmp_path / path.name).write_bytes(path.read_bytes())
    victim = MANIFEST.variants[0].cubin
    data = bytearray((tmp_path / victim).read_bytes())
    data[100] ^= 0xFF
    (tmp_path / victim).write_bytes(bytes(data))
    info = json.loads(invoke("info", "--json", "--artifacts", str(tmp_path)).stdout)
    checks = {v["cubin"]: v["cubin_check"] for v in info["variants"]}
    assert "sha256" in checks[victim]
    assert sum(c == "ok" for c in checks.values()) == len(checks) - 1


def test_artifacts_without_manifest_is_a_clean_error(tmp_path, use_driver):
    use_driver(NoDriver())
    result = invoke("info", "--artifacts", str(tmp_path))
    assert result.exit_code == 1
    assert "Traceback" not in result.output
    assert "manifest.json" in result.output


# bad options -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["verify", "--shapes", "/does/not/exist.json"], "does not exist"),
        (["verify", "--shape", "128,256"], "expected M,N,K"),
        (["verify", "--shape", "a,b,c"], "expected M,N,K"),
        (["verify", "--shape", "128,250,512"], "n must be a multiple of 32"),
        (["verify", "--shape", "128,256,100"], "k must be a multiple of 32"),
        (["verify", "--tol", "0"], "--tol"),
        (["verify", "--tol", "-1e-3"], "--tol"),
        (["verify", "--groups-json", "[[1, 2]"], "is not JSON"),
        (["verify", "--groups-json", "[[128, 256]]"], "three integers"),
        (
            ["verify", "--groups-json", '{"m": [128], "n": [256, 256], "k": [512]}'],
            "one entry per group",
        ),
        (["bench", "--repeats", "0"], "--repeats"),
        (["bench", "--device", "-1"], "--device"),
    ],
)
def test_bad_options_are_clean_errors(args, message, use_driver):
    use_driver(NoDriver())
    result = invoke(*args)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output


def test_shapes_file_errors(tmp_path, use_driver):
    use_driver(NoDriver())
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    result = invoke("verify", "--shapes", str(bad))
    assert result.exit_code == 2 and "cannot read" in result.output
    bad.write_text(json.dumps({"benchmarks": []}))
    result = invoke("verify", "--shapes", str(bad))
    assert result.exit_code == 2 and "no 'tests' list" in result.output


def test_cases_from_shapes_file(tmp_path):
    path = tmp_path / "shapes.json"
    path.write_text(
        json.dumps(
            {
                "tests": [{"m": [96, 128], "n": [128, 256], "k": [128, 512]}],
                "benchmarks": [{"m": [64], "n": [4096], "k": [7168], "sol_b200_us": 1.0}],
            }
        )
    )
    (case,) = cli.cases_from_file(path, "tests")
    assert case.sizes == ((96, 128, 128), (128, 256, 512))
    (case,) = cli.cases_from_file(path, "benchmarks")
    assert case.sizes == ((64, 4096, 7168),)
    cases = cli.collect_cases(path, "tests", ["[[128, 256, 512]]"], [(64, 64, 64)], ())
    assert [len(c.sizes) for c in cases] == [2, 1, 1]


# no GPU --------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["verify", "bench"])
def test_gpu_commands_without_a_driver_fail_cleanly(command, use_driver):
    use_driver(NoDriver())
    result = invoke(command, "--shape", "128,256,512")
    assert result.exit_code == 1
    assert "no CUDA device" in result.output
    assert "Traceback" not in result.output


def test_missing_device_ordinal(use_driver):
    use_driver(ComputingDriver())
    result = invoke("verify", "--device", "3", "--shape", "128,256,512")
    assert result.exit_code == 1
    assert "--device 3 does not exist; this machine has 1 GPU(s)" in result.output


def test_unsupported_gpu_is_a_clean_error(use_driver):
    fake = use_driver(ComputingDriver())
    fake.attributes.update({75: 8, 76: 0})
    result = invoke("verify", "--shape", "128,256,512")
    assert result.exit_code == 1
    assert "no baked kernel runs on a device of compute capability 8.0" in result.output
    assert "Traceback" not in result.output


# end to end against the computing fake ---------------------------------------------------------


def test_verify_end_to_end_passes(use_driver):
    use_driver(ComputingDriver())
    result = invoke("verify", "--json", "--seed", "3")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["passed"] is True
    assert [len(c["groups"]) for c in data["cases"]] == [len(s) for _n, s in cli.VERIFY_DEFAULT]
    assert data["cases"][-1]["variants"] == ["sm90_nvfp4_grouped_gemm.sm_90a.g120"]
    assert all(g["relative_error"] < 1e-3 for c in data["cases"] for g in c["groups"])


def test_verify_table_and_shape_options(use_driver):
    use_driver(ComputingDriver())
    result = invoke("verify", "--shape", "96,128,128", "--shape", "128,256,512")
    assert result.exit_code == 0, result.output
    assert "2/2 groups within tol 0.001" in result.output


def test_verify_catches_an_unwritten_group(use_driver):
    use_driver(ComputingDriver(skip_group=1))
    result = invoke("verify", "--shape", "96,128,128", "--shape", "128,256,512", "--json")
    assert result.exit_code == 1
    assert "1 of 2 group(s) failed verification" in result.output
    groups = json.loads(result.stdout)["cases"][0]["groups"]
    assert [g["ok"] for g in groups] == [True, False]
    assert groups[1]["finite"] is False  # the NaN poison was left in C


def test_bench_json_against_the_fake(use_driver):
    fake = use_driver(ComputingDriver())
    result = invoke(
        "bench",
        "--json",
        "--shape",
        "128,256,512",
        "--repeats",
        "5",
        "--warmup",
        "1",
        "--sets",
        "2",
    )
    assert result.exit_code == 0, result.output
    (case,) = json.loads(result.stdout)["cases"]
    assert case["groups"] == 1
    assert case["p10_us"] <= case["median_us"] <= case["p90_us"]
    assert case["flops"] == 2 * 128 * 256 * 512
    assert len(fake.launches) == 6  # warm-up + repeats
    # the two input sets alternate: each set's table is uploaded once, into its own ring
    # slot, and later runs launch from the slot that still holds it
    assert len(fake.copies) == 2
    assert len({data[:8] for _dst, data, _stream in fake.copies}) == 2
    assert len({dst for dst, _data, _stream in fake.copies}) == 2


def test_python_dash_m_entry_point():
    import subprocess

    result = subprocess.run(
        [sys.executable, "-m", "nvfp4_aot", "--version"], capture_output=True, text=True, cwd=REPO
    )
    assert result.returncode == 0
    assert "nvfp4-aot" in result.stdout


def test_kernel_option_runs_each_case_with_each_family(use_driver):
    use_driver(ComputingDriver())
    families = ["sm90_nvfp4_grouped_gemm", "sm90_nvfp4_grouped_gemm_a16"]
    args = ["--shape", "96,128,128", "--shape", "128,256,512", "--json"]
    result = invoke("verify", *args, "--kernel", families[0], "--kernel", families[1])
    assert result.exit_code == 0, result.output
    cases = json.loads(result.stdout)["cases"]
    assert [c["variants"] for c in cases] == [[f"{f}.sm_90a.g8"] for f in families]
    result = invoke("bench", *args, "--repeats", "2", "--kernel", families[1])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["cases"][0]["variants"] == [f"{families[1]}.sm_90a.g8"]


def test_unknown_kernel_family_is_a_clean_error(use_driver):
    use_driver(ComputingDriver())
    result = invoke("verify", "--shape", "96,128,128", "--kernel", "sm90_nope")
    assert result.exit_code != 0
    assert "kernel 'sm90_nope' is not baked for this device" in result.output
    assert "sm90_nvfp4_grouped_gemm_a16" in result.output
    assert "Traceback" not in result.output
