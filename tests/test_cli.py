"""The command line (nvfp4_aot.cli) without a GPU: CliRunner against fake drivers.

``ComputingDriver`` extends tests/fake_driver.py with what the CLI needs (memset,
device-to-host copies, timing events) and, on each launch, computes the grouped GEMM
from the simulated device memory exactly as the kernel would read it (problem sizes,
pointer tables, blocked scales), so that ``verify`` runs end to end on the committed
artifacts. It also captures and replays graphs (a captured copy or launch runs again at
each replay) and models the MoE routing kernel (device counts -> the GEMM's tables, as
nvfp4_aot/kernels/moe_routing.py writes them), so that ``verify --moe`` and ``bench
--moe`` run end to end too. The model checks the CLI's
flow, not the kernel: the GPU runs that (tests/test_moe_gpu.py, bench/h200_batch.sh).
"""

from __future__ import annotations

import ctypes
import json
import struct
import sys
from functools import partial
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from fake_driver import SUCCESS, FakeDriver, real
from nvfp4_aot import cli, cli_moe, driver, fp8_blocks, loader, plan
from nvfp4_aot.cubin_pack import pack_name, read_pack, write_packs
from nvfp4_aot.layouts import (
    blocked_scale_bytes,
    blocked_to_scales,
    encode_output,
    float_to_bf16_bits,
)
from nvfp4_aot.manifest import ROLE_ROUTED_GEMM, ROLE_ROUTING
from nvfp4_aot.moe_data import ROUTING_KINDS, routing_array
from nvfp4_aot.moe_layout import (
    C_WORDS,
    LAYOUTS,
    P_A_ROW_BYTES,
    P_B_EXPERT_BYTES,
    P_C_ROW_BYTES,
    P_HEADER_WORDS,
    P_SFA_EXPERT_BYTES,
    P_SFA_ROW_BYTES,
    P_SFB_EXPERT_BYTES,
    SF_BLOCK_ROWS,
)
from nvfp4_aot.reference import dequantize
from support import kernel_params_of, write_safetensors

REPO = Path(__file__).resolve().parents[1]
ARTIFACTS = REPO / "artifacts"
MANIFEST = loader.load_manifest(ARTIFACTS)


class NoDriver:
    """A backend whose libcuda cannot be loaded (what cuda.bindings raises then)."""

    def cuInit(self, flags):
        raise RuntimeError("libcuda.so.1: cannot open shared object file")


class ComputingDriver(FakeDriver):
    """A fake GPU of compute capability 9.0 that computes what the kernels would: the
    grouped GEMM and the MoE routing kernel (a model of it), eagerly and in graphs.

    Faults to inject: ``skip_group`` (that group of every GEMM launch is not computed),
    ``stray_row`` (every GEMM launch also writes the row after its last group's rows)
    and ``graph_skips_routing`` (a replay of a graph captured in relaxed mode, the
    CLI's, leaves the routing kernel out, so its GEMM tables stay as they were; a
    routed GEMM, which routes itself, is left out)."""

    def __init__(
        self, skip_group: int | None = None, stray_row=False, graph_skips_routing=False,
        ignore_alpha=False, **kwargs,
    ):  # fmt: skip
        super().__init__(capability=(9, 0), kernel_params=kernel_params_of(MANIFEST), **kwargs)
        self.skip_group = skip_group
        self.stray_row = stray_row
        self.graph_skips_routing = graph_skips_routing
        self.ignore_alpha = ignore_alpha  # a kernel that forgot its alpha
        self.elapsed = 0.0
        self.capturing_streams: set[int] = set()
        self.graphs: dict[int, list] = {}
        self.relaxed: set[int] = set()  # graphs captured in relaxed mode (the CLI's)
        self.replays: dict[int, int] = {}
        self._captured: list | None = None
        self._relaxed = False

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

    def compute(self, launch) -> None:
        """What the launched kernel would write, from its parameters and the memory."""
        sha = self.images[launch.function.library]
        variant = next(v for v in MANIFEST.variants if v.sha256 == sha)
        buffer = bytearray(variant.param_bytes)
        for param, data in zip(variant.params, launch.params):
            buffer[param.offset : param.offset + param.size] = data

        def pointer(name):
            ((offset, _size),) = variant.slots_for(name)
            return struct.unpack_from("<Q", buffer, offset)[0]

        if variant.role == ROLE_ROUTING:
            self.route(pointer("plan"), pointer("run"), launch.grid[0])
            return
        if variant.role == ROLE_ROUTED_GEMM:  # the tables from the counts, as its CTAs do
            tables = self.routed_tables(pointer("plan"), pointer("run"), variant.num_groups)
            self.gemm(variant, *tables[:3], tables[4])
            return
        g_count = variant.num_groups
        sizes = np.frombuffer(self.read(pointer("problem_sizes"), g_count * 16), np.int32)
        abc = np.frombuffer(self.read(pointer("abc_pointers"), g_count * 24), np.uint64)
        scales = np.frombuffer(self.read(pointer("scale_pointers"), g_count * 16), np.uint64)
        alphas = None
        if variant.alpha:
            alphas = np.frombuffer(self.read(pointer("alpha_pointers"), g_count * 8), np.uint64)
        self.gemm(variant, sizes, abc, scales, alphas)

    def gemm(self, variant, sizes, abc, scales, alphas) -> None:
        """The grouped GEMM over its tables (flat arrays, as in memory)."""
        sizes, abc, scales = (np.ravel(t) for t in (sizes, abc, scales))
        for g in range(variant.num_groups):
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

            c = (operand(a_ptr, sfa_ptr, m) @ operand(b_ptr, sfb_ptr, n).T).astype(np.float32)
            if variant.alpha and not self.ignore_alpha:  # the kernels scale the FP32 accumulator
                c = c * np.frombuffer(self.read(int(alphas[g]), 4), np.float32)[0]
            self._write(c_ptr, encode_output(c, variant.out_dtype).tobytes())
        if self.stray_row:
            self._write_stray_row(sizes.reshape(-1, 4), abc.reshape(-1, 3))

    # streams, stream capture and graphs: a captured copy or launch is recorded in order
    # and runs again (computing) at each replay

    def cli_replays(self) -> list[int]:
        """Replays of each graph the CLI captured (relaxed mode; a plan may capture its
        own graphs, thread-local)."""
        return [self.replays.get(graph, 0) for graph in sorted(self.relaxed)]

    def cuStreamSynchronize(self, stream):
        self._record("cuStreamSynchronize", stream)
        return (SUCCESS,)

    def cuStreamBeginCapture(self, stream, mode):
        self._record("cuStreamBeginCapture", stream)
        self.capturing_streams.add(int(stream))
        self._captured = []
        self._relaxed = mode == real.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED
        return (SUCCESS,)

    def cuStreamEndCapture(self, stream):
        self._record("cuStreamEndCapture", stream)
        self.capturing_streams.discard(int(stream))
        graph = self._handle()
        self.graphs[graph] = self._captured
        if self._relaxed:
            self.relaxed.add(graph)
        self._captured = None
        return (SUCCESS, graph)

    def cuGraphInstantiate(self, graph, flags):
        return (SUCCESS, graph)

    def cuGraphLaunch(self, executable, stream):
        self._record("cuGraphLaunch", executable, stream)
        self.replays[executable] = self.replays.get(executable, 0) + 1
        for step in self.graphs[executable]:
            step()
        return (SUCCESS,)

    def cuGraphExecDestroy(self, executable):
        self._record("cuGraphExecDestroy", executable)
        return (SUCCESS,)

    def cuGraphDestroy(self, graph):
        self._record("cuGraphDestroy", graph)
        return (SUCCESS,)

    def cuMemcpyHtoDAsync(self, dst, src, size, stream):
        if int(stream) not in self.capturing_streams:
            return super().cuMemcpyHtoDAsync(dst, src, size, stream)
        # a captured copy reads its (pinned) source at each replay
        self._captured.append(lambda: self._write(int(dst), ctypes.string_at(src, size)))
        return (SUCCESS,)

    def cuLaunchKernelEx(self, config, function, kernel_params, extra):
        result = super().cuLaunchKernelEx(config, function, kernel_params, extra)
        launch = self.launches[-1]
        if int(config.hStream) not in self.capturing_streams:
            self.compute(launch)
        elif not (self.graph_skips_routing and self._relaxed and self._routes(launch)):
            self._captured.append(partial(self.compute, launch))
        return result

    def _routes(self, launch) -> bool:
        """Whether the launch turns the counts into tables: the routing kernel, or a routed
        GEMM (whose replays, with the fault, then compute nothing)."""
        sha = self.images[launch.function.library]
        role = next(v for v in MANIFEST.variants if v.sha256 == sha).role
        return role in (ROLE_ROUTING, ROLE_ROUTED_GEMM)

    def _write_stray_row(self, sizes, abc) -> None:
        """Zeros into the row after the last non-empty group's rows of C."""
        active = [g for g in range(len(sizes)) if sizes[g, 0] > 0]
        if active:
            m, n = int(sizes[active[-1], 0]), int(sizes[active[-1], 1])
            self._write(int(abc[active[-1], 2]) + m * n * 2, bytes(2 * n))

    def route(self, plan_words: int, run_words: int, num_chunks: int) -> None:
        """nvfp4_aot/kernels/moe_routing.py in numpy: the GEMM tables of every chunk."""
        for chunk in range(num_chunks):
            record = np.frombuffer(
                self.read(plan_words + 8 * (P_HEADER_WORDS + C_WORDS * chunk), 8 * C_WORDS),
                np.int64,
            )
            first, chunk_experts, groups, *addresses = (int(v) for v in record[:8])
            tables = self.routed_tables(plan_words, run_words, groups, first, chunk_experts)
            for address, table in zip(addresses, tables):
                if address:
                    self._write(address, table.tobytes())

    def routed_tables(self, plan_words, run_words, groups, first=0, chunk_experts=None):
        """The tables (sizes, abc, scales, prefix, alphas) of ``groups`` groups for experts
        ``first`` .. ``first + chunk_experts`` (None: all) of the run's routing: what the
        routing kernel writes for a chunk and a routed GEMM's CTAs build."""
        header = np.frombuffer(self.read(plan_words, 8 * P_HEADER_WORDS), np.int64)
        experts, layout, capacity, n, k, tile_m, tile_n = (int(v) for v in header[:7])
        routing_ptr, a, b, c, sfa, sfb, alpha = (
            int(v) for v in np.frombuffer(self.read(run_words, 56), np.uint64)
        )
        contiguous = LAYOUTS[layout] == "contiguous"
        count = experts + 1 if contiguous else experts
        values = np.frombuffer(self.read(routing_ptr, 4 * count), np.int32).astype(np.int64)
        if contiguous:
            start = np.clip(values[:-1], 0, capacity)
            rows = np.minimum(np.maximum(values[1:], start), capacity) - start
        else:
            start = np.arange(experts) * capacity
            rows = np.clip(values, 0, capacity)
        padded = -(-rows // SF_BLOCK_ROWS) * SF_BLOCK_ROWS
        sf_row = np.concatenate([[0], np.cumsum(padded)])
        chunk_experts = experts if chunk_experts is None else chunk_experts
        sizes = np.zeros((groups, 4), np.int32)
        abc = np.zeros((groups, 3), np.uint64)
        scales = np.zeros((groups, 2), np.uint64)
        prefix = np.zeros(groups + 1, np.int32)
        alphas = np.zeros(groups, np.uint64)
        slot = tiles = 0
        for e in range(first, first + chunk_experts):
            m = int(rows[e])
            if m == 0:
                continue
            sizes[slot] = (m, n, k, 1)
            abc[slot] = (
                a + int(start[e]) * int(header[P_A_ROW_BYTES]),
                b + e * int(header[P_B_EXPERT_BYTES]),
                c + int(start[e]) * int(header[P_C_ROW_BYTES]),
            )
            sf = (
                int(sf_row[e]) * int(header[P_SFA_ROW_BYTES])
                if contiguous
                else (e * int(header[P_SFA_EXPERT_BYTES]))
            )
            scales[slot] = (sfa + sf, sfb + e * int(header[P_SFB_EXPERT_BYTES]))
            alphas[slot] = alpha + 4 * e
            prefix[slot] = tiles
            tiles += -(-m // tile_m) * -(-n // tile_n)
            slot += 1
        prefix[slot:] = tiles
        return sizes, abc, scales, prefix, alphas


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
    writes = {v["name"]: v["writes"] for v in data["variants"]}
    assert writes["sm90_nvfp4_grouped_gemm.sm_90a.g8"] == "float16"
    assert writes["sm90_nvfp4_grouped_gemm.sm_90a.g8.bf16.alpha"] == "bfloat16 x alpha"
    assert writes["moe_routing.sm_90a.g120"] is None
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
    # the cubin as the checkout holds it, or in its family's pack as the installed wheel does
    plain, pack = tmp_path / victim, tmp_path / pack_name(victim)
    if plain.exists():
        data = bytearray(plain.read_bytes())
        data[100] ^= 0xFF
        plain.write_bytes(bytes(data))
    else:
        cubins = read_pack(pack)
        for name, data in cubins.items():
            (tmp_path / name).write_bytes(data)
        pack.unlink()
        data = bytearray(cubins[victim])
        data[100] ^= 0xFF
        (tmp_path / victim).write_bytes(bytes(data))
        write_packs(tmp_path, tmp_path)
        for name in cubins:
            (tmp_path / name).unlink()
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


@pytest.mark.parametrize("out_dtype", ["float16", "bfloat16"])
def test_verify_with_alpha_and_out_dtype(use_driver, out_dtype):
    use_driver(ComputingDriver())
    args = ["--shape", "96,128,128", "--shape", "128,256,512", "--shape", "40,64,128"]
    result = invoke("verify", *args, "--out-dtype", out_dtype, "--alpha", "--json")
    assert result.exit_code == 0, result.output
    (case,) = json.loads(result.stdout)["cases"]
    suffix = ".bf16.alpha" if out_dtype == "bfloat16" else ".alpha"
    assert case["variants"] == [f"sm90_nvfp4_grouped_gemm.sm_90a.g8{suffix}"]
    assert case["epilogue"] == f"{out_dtype} x alpha"
    assert all(g["ok"] for g in case["groups"])


def test_verify_catches_a_kernel_that_ignores_alpha(use_driver):
    use_driver(ComputingDriver(ignore_alpha=True))
    result = invoke("verify", "--shape", "96,128,128", "--alpha")
    assert result.exit_code == 1
    assert "1 of 1 group(s) failed verification" in result.output


@pytest.mark.parametrize("layout", ["contiguous", "masked"])
def test_moe_verify_with_alpha_and_bf16(use_driver, layout):
    use_driver(ComputingDriver())
    result = invoke(
        "verify", "--moe", "12,128,256", "--layout", layout, "--tokens", "24", "--top-k", "2",
        "--routings", "3", "--out-dtype", "bfloat16", "--alpha", "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    (case,) = json.loads(result.stdout)["cases"]
    assert case["epilogue"] == "bfloat16 x alpha"
    assert case["variants"][-1].endswith(".bf16.alpha")
    assert all(r["ok"] for r in case["routings"])


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


# MoE: options, routings, and verify / bench end to end against the graph fake ------------

MOE = ["--moe", "8,256,512"]
FAMILIES = ["sm90_nvfp4_grouped_gemm", "sm90_nvfp4_grouped_gemm_a16"]


def test_moe_cases_and_their_defaults():
    cases, kinds, routings = cli_moe.collect_moe_cases(
        "verify", [(8, 256, 512)], (), (), None, (), None, False
    )
    assert cases == [cli_moe.MoeCase(8, 256, 512, "contiguous", 64, 1)]
    assert kinds == ROUTING_KINDS and routings == 2 * len(ROUTING_KINDS)
    cases, kinds, routings = cli_moe.collect_moe_cases(
        "bench", [(8, 256, 512), (32, 128, 256)], ("contiguous", "masked"), (16, 64), 4,
        ("skewed", "uniform", "skewed"), None, False,
    )  # fmt: skip
    assert kinds == ("skewed", "uniform") and routings == 2  # one of each kind
    assert [(c.experts, c.layout, c.tokens) for c in cases] == [
        (e, layout, t) for e in (8, 32) for layout in ("contiguous", "masked") for t in (16, 64)
    ]
    contiguous, masked = cases[1], cases[3]
    assert (contiguous.capacity, contiguous.routed) == (64 * 4, 64 * 4)
    assert (masked.capacity, masked.routed) == (64, 64 * 4)  # max_m: each token once per expert
    assert contiguous.name == "E8-n256-k512-contiguous-T64-top4"
    assert cli_moe.collect_moe_cases("bench", (), (), (), None, (), None, True) == ([], (), 0)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_moe_routings_take_the_kinds_in_turn(layout):
    case = cli_moe.MoeCase(16, 128, 128, layout, 50, 4)
    steps = cli_moe.moe_counts(
        case, ("uniform", "one_expert", "empty"), 7, np.random.default_rng(0)
    )
    assert [kind for kind, _ in steps] == ["uniform", "one_expert", "empty"] * 2 + ["uniform"]
    for kind, counts in steps:
        assert counts.shape == (16,) and (counts >= 0).all()
        if layout == "masked":
            assert counts.max() <= case.capacity  # clamped to max_m
        elif kind != "empty":
            assert counts.sum() == case.routed == 200
    assert steps[2][1].sum() == 0
    assert routing_array(case.layout, [3, 0, 5] + [0] * 13).tolist()[:4] == (
        [0, 3, 3, 8] if layout == "contiguous" else [3, 0, 5, 0]
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["verify", "--layout", "masked"], "--layout describes a MoE problem: it needs --moe"),
        (["bench", "--routings", "3"], "--routings describes a MoE problem: it needs --moe"),
        (["verify", *MOE, "--shape", "128,256,512"], "--moe cannot be combined with"),
    ],
)
def test_moe_option_combinations_are_usage_errors(args, message, use_driver):
    use_driver(NoDriver())
    result = invoke(*args)
    assert result.exit_code == 2, result.output
    assert message in result.output


@pytest.mark.parametrize("command", ["verify", "bench"])
def test_moe_without_a_driver_fails_cleanly(command, use_driver):
    use_driver(NoDriver())
    result = invoke(command, *MOE)
    assert result.exit_code == 1 and "no CUDA device" in result.output
    assert "Traceback" not in result.output


def test_moe_verify_end_to_end_both_layouts(use_driver):
    fake = use_driver(ComputingDriver())
    args = [*MOE, "--tokens", "40", "--top-k", "2", "--routings", "6", "--json"]
    result = invoke("verify", *args, "--layout", "contiguous", "--layout", "masked")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["passed"] is True and data["failed_routings"] == 0
    assert [(c["layout"], c["capacity"]) for c in data["cases"]] == [
        ("contiguous", 80),
        ("masked", 40),
    ]
    for case in data["cases"]:
        (gemm,) = case["variants"]  # a routed GEMM: no routing kernel before it
        assert gemm.startswith(case["family"] + "_routed.sm_90a")
        assert [s["kind"] for s in case["routings"]] == list(ROUTING_KINDS)
        for step in case["routings"]:
            for check in (step["eager"], step["graph"]):
                assert check["ok"] and check["stray_rows"] == 0
                assert check["relative_error"] < 1e-3
        empty = case["routings"][ROUTING_KINDS.index("empty")]
        assert empty["rows"] == 0 and empty["active_experts"] == 0
    assert sum(s["rows"] for s in data["cases"][0]["routings"][:1]) == 80  # uniform: all rows
    # one graph per plan, captured once and replayed for every routing
    assert fake.cli_replays() == [6, 6]


def test_moe_verify_prints_a_line_per_routing(use_driver):
    use_driver(ComputingDriver())
    result = invoke("verify", *MOE, "--tokens", "24", "--routing", "skewed", "--routings", "3")
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if "E8-n256-k512" in line]
    assert len(lines) == 3 and all("skewed" in line and line.endswith("ok") for line in lines)
    assert "3/3 routings within tol 0.001, eager and in one CUDA graph" in result.output


def test_moe_verify_catches_an_unwritten_expert(use_driver):
    use_driver(ComputingDriver(skip_group=1))
    result = invoke("verify", *MOE, "--tokens", "40", "--routing", "uniform",
                    "--routing", "empty", "--routings", "2", "--json")  # fmt: skip
    assert result.exit_code == 1
    assert "1 of 2 routing(s) failed verification" in result.output
    uniform, empty = json.loads(result.stdout)["cases"][0]["routings"]
    for check in (uniform["eager"], uniform["graph"]):
        assert not check["ok"] and not check["finite"]  # the poison is a NaN
    assert empty["ok"]


def test_moe_verify_catches_a_write_outside_the_routed_rows(use_driver):
    use_driver(ComputingDriver(stray_row=True))
    result = invoke("verify", *MOE, "--routing", "one_expert", "--routings", "1", "--json")
    assert result.exit_code == 1
    (step,) = json.loads(result.stdout)["cases"][0]["routings"]
    assert step["eager"]["stray_rows"] == step["graph"]["stray_rows"] == 1
    assert step["eager"]["relative_error"] < 1e-3  # the expert itself is right
    result = invoke("verify", *MOE, "--routing", "one_expert", "--routings", "1")
    assert "+1 rows" in result.output and "FAIL" in result.output


def test_moe_verify_checks_the_graph_on_its_own(use_driver):
    use_driver(ComputingDriver(graph_skips_routing=True))
    result = invoke("verify", *MOE, "--routing", "uniform", "--routings", "2", "--json")
    assert result.exit_code == 1
    for step in json.loads(result.stdout)["cases"][0]["routings"]:
        assert step["eager"]["ok"] and not step["graph"]["ok"]


def test_moe_bench_json(use_driver):
    fake = use_driver(ComputingDriver())
    result = invoke("bench", *MOE, "--tokens", "16", "--top-k", "2", "--layout", "masked",
                    "--routings", "3", "--repeats", "4", "--warmup", "1", "--json",
                    *[x for f in FAMILIES for x in ("--kernel", f)])  # fmt: skip
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert [c["family"] for c in data["cases"]] == FAMILIES
    for case in data["cases"]:
        assert case["capacity"] == 16 and case["variants"][-1].startswith(case["family"])
        assert [s["kind"] for s in case["routings"]] == list(ROUTING_KINDS[:3])
        for step in case["routings"]:
            assert step["graph_p10_us"] <= step["graph_median_us"] <= step["graph_p90_us"]
            assert step["flops"] == 2 * step["rows"] * 256 * 512
            assert step["eager_wall_us"] > 0 and step["host_us_per_run"] > 0
            assert step["eager_over_graph"] == step["eager_wall_us"] / step["graph_median_us"]
        uniform = case["routings"][0]
        assert uniform["bytes"] == uniform["active_experts"] * (
            256 * 256 + blocked_scale_bytes(256, 512)
        ) + uniform["rows"] * (256 + 32 + 512)
    # one graph per plan; per routing: warm-up + 4 timed replays
    assert fake.cli_replays() == [3 * (1 + 4)] * 2


def test_moe_bench_table(use_driver):
    use_driver(ComputingDriver())
    result = invoke("bench", *MOE, "--routing", "sparse", "--repeats", "2", "--warmup", "0")
    assert result.exit_code == 0, result.output
    assert "eager/graph" in result.output and "host us" in result.output
    assert "E8-n256-k512-contiguous-T256-top1" in result.output


# quantize ----------------------------------------------------------------------------------


def test_quantize_writes_the_weight_files(tmp_path):
    from nvfp4_aot.quantize import quantize

    rng = np.random.default_rng(0)
    weight = rng.standard_normal((130, 96)).astype(np.float32)  # k % 64 == 32
    np.save(tmp_path / "w.npy", weight)
    out = tmp_path / "out"
    result = invoke("quantize", str(tmp_path / "w.npy"), "--out", str(out))
    assert result.exit_code == 0, result.output
    assert "(130, 96) float32" in result.output
    q = quantize(weight)
    b, sfb = np.load(out / "B.npy"), np.load(out / "SFB.npy")
    assert b.dtype == np.uint8 and np.array_equal(b, q.packed)
    assert sfb.dtype == np.uint8 and np.array_equal(sfb, q.scales_blocked)
    assert sfb.shape == (blocked_scale_bytes(130, 96),)
    scale_2, g = np.load(out / "scale_2.npy"), np.load(out / "global_scale.npy")
    assert scale_2.dtype == g.dtype == np.float32 and scale_2.shape == g.shape == ()
    assert scale_2 == q.scale_2 and g == q.global_scale
    described = json.loads((out / "quantize.json").read_text())
    assert described["experts"] is None and (described["n"], described["k"]) == (130, 96)
    assert described["files"]["B"]["shape"] == [130, 48]
    back = dequantize(b, blocked_to_scales(sfb, 130, 6)) * float(scale_2)
    assert np.linalg.norm(back - weight) / np.linalg.norm(weight) < 0.12


@pytest.mark.parametrize("dtype", ["float16", "bfloat16-bits"])
def test_quantize_experts_float16_and_bfloat16_bits(tmp_path, dtype):
    from nvfp4_aot.quantize import quantize

    rng = np.random.default_rng(1)
    weight = rng.standard_normal((3, 40, 32)).astype(np.float32)
    if dtype == "float16":
        stored = weight.astype(np.float16)
    else:
        stored = (weight.view(np.uint32) >> 16).astype(np.uint16)
    np.save(tmp_path / "w.npy", stored)
    result = invoke("quantize", str(tmp_path / "w.npy"), "--out", str(tmp_path), "--json")
    assert result.exit_code == 0, result.output
    described = json.loads(result.stdout)
    assert described["experts"] == 3 and described["files"]["SFB"]["bytes_per_expert"] == 512
    b, sfb = np.load(tmp_path / "B.npy"), np.load(tmp_path / "SFB.npy")
    scale_2 = np.load(tmp_path / "scale_2.npy")
    assert b.shape == (3, 40, 16) and sfb.shape == (3 * 512,) and scale_2.shape == (3,)
    for e in range(3):
        q = quantize(stored[e])
        assert np.array_equal(b[e], q.packed)
        assert np.array_equal(sfb[e * 512 : (e + 1) * 512], q.scales_blocked)
        assert scale_2[e] == q.scale_2


def test_quantize_experts_axis_one(tmp_path):
    rng = np.random.default_rng(2)
    weight = rng.standard_normal((2, 8, 16)).astype(np.float32)
    np.save(tmp_path / "a.npy", weight)
    np.save(tmp_path / "b.npy", np.moveaxis(weight, 0, 1))
    assert invoke("quantize", str(tmp_path / "a.npy"), "--out", str(tmp_path / "a")).exit_code == 0
    result = invoke(
        "quantize", str(tmp_path / "b.npy"), "--out", str(tmp_path / "b"), "--experts-axis", "1"
    )
    assert result.exit_code == 0, result.output
    for name in ("B.npy", "SFB.npy", "scale_2.npy"):
        assert np.array_equal(np.load(tmp_path / "a" / name), np.load(tmp_path / "b" / name))


def test_quantize_a_safetensors_tensor(tmp_path):
    """One tensor of a checkpoint beside others: the files its BF16 bits give from a .npy,
    the JSON naming the tensor and its dtype."""
    rng = np.random.default_rng(3)
    w1 = float_to_bf16_bits(rng.standard_normal((2, 40, 64)))
    write_safetensors(tmp_path / "model.safetensors",
                      {"experts.w1": ("BF16", w1),
                       "experts.w2": ("F32", rng.standard_normal((2, 64, 32)))},
                      metadata={"format": "pt"})  # fmt: skip
    np.save(tmp_path / "w1.npy", w1)
    assert (
        invoke("quantize", str(tmp_path / "w1.npy"), "--out", str(tmp_path / "npy")).exit_code == 0
    )
    result = invoke("quantize", str(tmp_path / "model.safetensors"), "--tensor", "experts.w1",
                    "--out", str(tmp_path / "st"), "--json")  # fmt: skip
    assert result.exit_code == 0, result.output
    described = json.loads(result.stdout)
    assert described["source"] == "model.safetensors:experts.w1"
    assert described["source_dtype"] == "BF16" and described["experts"] == 2
    for name in ("B.npy", "SFB.npy", "scale_2.npy", "global_scale.npy"):
        assert np.array_equal(np.load(tmp_path / "npy" / name), np.load(tmp_path / "st" / name))


def test_quantize_a_moe_layers_experts_from_safetensors(tmp_path):
    """experts.{e}.w: the per-expert tensors of a layer as one (E, n, k) weight, the
    files the stacked bits give from a .npy, each expert with its own global scale."""
    rng = np.random.default_rng(4)
    experts = [float_to_bf16_bits(rng.standard_normal((24, 32)) * (e + 1)) for e in range(3)]
    path = tmp_path / "layer.safetensors"
    write_safetensors(path, {f"experts.{e}.w": ("BF16", w) for e, w in enumerate(experts)})
    np.save(tmp_path / "stacked.npy", np.stack(experts))
    assert (
        invoke("quantize", str(tmp_path / "stacked.npy"), "--out", str(tmp_path / "npy")).exit_code
        == 0
    )
    result = invoke(
        "quantize", str(path), "--tensor", "experts.{e}.w", "--out", str(tmp_path / "st"), "--json"
    )
    assert result.exit_code == 0, result.output
    described = json.loads(result.stdout)
    assert described["experts"] == 3 and described["source"] == "layer.safetensors:experts.{e}.w"
    for name in ("B.npy", "SFB.npy", "scale_2.npy", "global_scale.npy"):
        assert np.array_equal(np.load(tmp_path / "npy" / name), np.load(tmp_path / "st" / name))
    assert len(set(np.load(tmp_path / "st" / "global_scale.npy").tolist())) == 3
    assert "quantizing experts" in result.stderr  # the progress bar, off stdout's JSON
    result = invoke("quantize", str(path), "--tensor", "experts.{e}.w", "--workers", "3",
                    "--out", str(tmp_path / "w3"))  # fmt: skip
    assert result.exit_code == 0, result.output
    for name in ("B.npy", "SFB.npy", "scale_2.npy", "global_scale.npy"):
        assert np.array_equal(np.load(tmp_path / "w3" / name), np.load(tmp_path / "st" / name))
    result = invoke("quantize", str(path), "--workers", "0", "--out", str(tmp_path / "w0"))
    assert result.exit_code == 2 and "--workers" in result.output
    result = invoke("quantize", str(path), "--tensor", "experts.{e}.w", "--experts-axis", "1",
                    "--out", str(tmp_path / "o"))  # fmt: skip
    assert result.exit_code == 1 and "stacked on axis 0, not 1" in result.output


def test_quantize_fused_gate_and_up_from_a_sharded_checkpoint(tmp_path):
    """A sharded checkpoint's directory (its index maps each tensor to a shard): the gate
    and up experts, split over two shards, fused as one weight give the files their
    concatenated bits give from a .npy."""
    rng = np.random.default_rng(6)
    gate, up = ([float_to_bf16_bits(rng.standard_normal((16, 32))) for _ in range(4)]
                for _ in range(2))  # fmt: skip
    root = tmp_path / "ckpt"
    root.mkdir()
    weight_map = {}
    for shard, experts in (("model-00001-of-00002.safetensors", range(3)),
                           ("model-00002-of-00002.safetensors", range(3, 4))):  # fmt: skip
        tensors = {
            f"l.{e}.{p}": ("BF16", w[e]) for e in experts for p, w in (("g", gate), ("u", up))
        }
        write_safetensors(root / shard, tensors)
        weight_map.update(dict.fromkeys(tensors, shard))
    (root / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    np.save(tmp_path / "fused.npy", np.concatenate([np.stack(gate), np.stack(up)], axis=1))
    result = invoke("quantize", str(tmp_path / "fused.npy"), "--out", str(tmp_path / "npy"))
    assert result.exit_code == 0, result.output
    result = invoke("quantize", str(root), "--tensor", "l.{e}.g", "--tensor", "l.{e}.u",
                    "--out", str(tmp_path / "st"), "--json")  # fmt: skip
    assert result.exit_code == 0, result.output
    described = json.loads(result.stdout)
    assert (described["experts"], described["n"], described["k"]) == (4, 32, 32)
    for name in ("B.npy", "SFB.npy", "scale_2.npy", "global_scale.npy"):
        assert np.array_equal(np.load(tmp_path / "npy" / name), np.load(tmp_path / "st" / name))
    (root / "model-00002-of-00002.safetensors").unlink()
    result = invoke("quantize", str(root), "--tensor", "l.{e}.g", "--out", str(tmp_path / "x"))
    assert result.exit_code == 1
    assert "tensor 'l.3.g' is in 'model-00002-of-00002.safetensors', which is not a file" in (
        result.output
    )


def test_quantize_an_fp8_block_scaled_checkpoint(tmp_path):
    """DeepSeek's FP8 format (F8_E4M3 codes, <name>_scale_inv per 128 x 128 block): a
    dense weight and a layer's fused gate + up experts give the files that their BF16
    dequantization (fp8_blocks, checked against a scalar reference in its own tests)
    gives from a .npy; a weight without its scales is refused naming them."""
    rng = np.random.default_rng(7)
    n, k, experts = 136, 256, 3  # a partial last block row

    def fp8(rows, cols):
        codes = rng.integers(0, 0x7E, (rows, cols), dtype=np.uint8)  # finite, both signs
        codes |= rng.integers(0, 2, (rows, cols), dtype=np.uint8) << 7
        return codes, (rng.random(fp8_blocks.blocks(rows, cols)) * 1e-3 + 1e-4).astype(np.float32)

    dense = fp8(n, k)
    gate, up = ([fp8(n, k) for _ in range(experts)] for _ in range(2))
    tensors = {"dense.weight": ("F8_E4M3", dense[0]), "dense.weight_scale_inv": ("F32", dense[1])}
    for e in range(experts):
        for proj, (codes, scale) in (("gate", gate[e]), ("up", up[e])):
            tensors[f"mlp.experts.{e}.{proj}.weight"] = ("F8_E4M3", codes)
            tensors[f"mlp.experts.{e}.{proj}.weight_scale_inv"] = ("F32", scale)
    write_safetensors(tmp_path / "fp8.safetensors", tensors)
    np.save(tmp_path / "dense.npy", fp8_blocks.dequantize(*dense))
    fused = [
        np.concatenate([fp8_blocks.dequantize(*gate[e]), fp8_blocks.dequantize(*up[e])])
        for e in range(experts)
    ]
    np.save(tmp_path / "fused.npy", np.stack(fused))
    for npy, names in (("dense.npy", ["dense.weight"]),
                       ("fused.npy", ["mlp.experts.{e}.gate.weight", "mlp.experts.{e}.up.weight"])):  # fmt: skip
        result = invoke("quantize", str(tmp_path / npy), "--out", str(tmp_path / "npy"))
        assert result.exit_code == 0, result.output
        options = [item for name in names for item in ("--tensor", name)]
        result = invoke("quantize", str(tmp_path / "fp8.safetensors"), *options,
                        "--out", str(tmp_path / "fp8"), "--json")  # fmt: skip
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)["source_dtype"] == "F8_E4M3"
        for name in ("B.npy", "SFB.npy", "scale_2.npy", "global_scale.npy"):
            assert np.array_equal(
                np.load(tmp_path / "npy" / name), np.load(tmp_path / "fp8" / name)
            )
    del tensors["dense.weight_scale_inv"]
    write_safetensors(tmp_path / "fp8.safetensors", tensors)
    result = invoke("quantize", str(tmp_path / "fp8.safetensors"), "--tensor", "dense.weight",
                    "--out", str(tmp_path / "x"))  # fmt: skip
    assert result.exit_code == 1
    assert "the F8_E4M3 weight 'dense.weight' needs its block scales 'dense.weight_scale_inv'" in (
        result.output
    )


def test_quantize_a_weight_stored_k_first(tmp_path):
    """--k-first: a weight stored (E, k, n) — a .npy, Llama 4's fused gate_up_proj as one
    3-D tensor, or per-expert (k, n) gate and up tensors fused along n — gives the files
    of its (E, n, k) transpose; the JSON says it was transposed."""
    rng = np.random.default_rng(10)
    experts, k, n = 3, 64, 48
    gate_up = float_to_bf16_bits(rng.standard_normal((experts, 2 * n, k)))  # K last
    np.save(tmp_path / "k_last.npy", gate_up)
    stored = np.ascontiguousarray(np.swapaxes(gate_up, 1, 2))  # (E, k, 2n) as stored
    np.save(tmp_path / "k_first.npy", stored)
    per_expert = {}
    for e in range(experts):
        per_expert[f"e.{e}.gate"] = ("BF16", np.ascontiguousarray(stored[e, :, :n]))
        per_expert[f"e.{e}.up"] = ("BF16", np.ascontiguousarray(stored[e, :, n:]))
    write_safetensors(tmp_path / "llama4.safetensors", {"experts.gate_up_proj": ("BF16", stored)})
    write_safetensors(tmp_path / "split.safetensors", per_expert)
    assert (
        invoke("quantize", str(tmp_path / "k_last.npy"), "--out", str(tmp_path / "ref")).exit_code
        == 0
    )
    for source, names in (("k_first.npy", []),
                          ("llama4.safetensors", ["--tensor", "experts.gate_up_proj"]),
                          ("split.safetensors", ["--tensor", "e.{e}.gate", "--tensor", "e.{e}.up"])):  # fmt: skip
        out = tmp_path / source.replace(".", "_")
        result = invoke("quantize", str(tmp_path / source), *names, "--k-first", "--out", str(out),
                        "--json")  # fmt: skip
        assert result.exit_code == 0, result.output
        described = json.loads(result.stdout)
        assert described["source_k_first"] is True
        assert (described["experts"], described["n"], described["k"]) == (experts, 2 * n, k)
        for name in ("B.npy", "SFB.npy", "scale_2.npy", "global_scale.npy"):
            assert np.array_equal(np.load(tmp_path / "ref" / name), np.load(out / name)), source
    result = invoke("quantize", str(tmp_path / "k_first.npy"), "--k-first", "--experts-axis", "1",
                    "--out", str(tmp_path / "x"))  # fmt: skip
    assert (
        result.exit_code == 1 and "stored K first takes experts on axis 0, not 1" in result.output
    )


def test_quantize_fused_gate_and_up_from_safetensors(tmp_path):
    """Two --tensor patterns concatenated along n: the experts' gate and up projections
    as one (E, 2n, k) weight with one global scale per expert, as the fused GEMM takes."""
    rng = np.random.default_rng(5)
    gate = [float_to_bf16_bits(rng.standard_normal((16, 32))) for _ in range(2)]
    up = [float_to_bf16_bits(rng.standard_normal((16, 32)) * 3) for _ in range(2)]
    tensors = {f"e.{e}.gate": ("BF16", gate[e]) for e in range(2)}
    tensors |= {f"e.{e}.up": ("BF16", up[e]) for e in range(2)}
    tensors["other"] = ("BF16", float_to_bf16_bits(np.ones((2, 8, 48))))  # another k
    write_safetensors(tmp_path / "l.safetensors", tensors)
    np.save(tmp_path / "fused.npy", np.concatenate([np.stack(gate), np.stack(up)], axis=1))
    assert (
        invoke("quantize", str(tmp_path / "fused.npy"), "--out", str(tmp_path / "npy")).exit_code
        == 0
    )
    result = invoke("quantize", str(tmp_path / "l.safetensors"), "--tensor", "e.{e}.gate",
                    "--tensor", "e.{e}.up", "--out", str(tmp_path / "st"), "--json")  # fmt: skip
    assert result.exit_code == 0, result.output
    described = json.loads(result.stdout)
    assert described["source"] == "l.safetensors:e.{e}.gate+e.{e}.up"
    assert (described["experts"], described["n"], described["k"]) == (2, 32, 32)
    for name in ("B.npy", "SFB.npy", "scale_2.npy", "global_scale.npy"):
        assert np.array_equal(np.load(tmp_path / "npy" / name), np.load(tmp_path / "st" / name))
    result = invoke("quantize", str(tmp_path / "l.safetensors"), "--tensor", "e.{e}.gate",
                    "--tensor", "other", "--out", str(tmp_path / "o"))  # fmt: skip
    assert result.exit_code == 1
    assert (
        "'other' (BF16 (2, 8, 48)) cannot be concatenated along n with 'e.{e}.gate'"
        in result.output
    )
    result = invoke("quantize", str(tmp_path / "l.safetensors"), "--tensor", "other", "--tensor",
                    "other", "--experts-axis", "1", "--out", str(tmp_path / "o"))  # fmt: skip
    assert result.exit_code == 1 and "take experts on axis 0, not 1" in result.output
    assert not (tmp_path / "o").exists()


def test_quantize_safetensors_errors_name_the_tensor(tmp_path):
    path = tmp_path / "model.safetensors"
    write_safetensors(path, {"a": ("F32", np.ones((4, 16), np.float32)),
                             "b": ("I32", np.ones((4, 16), np.int32))})  # fmt: skip
    result = invoke("quantize", str(path), "--out", str(tmp_path / "o"))
    assert result.exit_code == 1 and "holds 2 tensors; name one (a, b)" in result.output
    result = invoke("quantize", str(path), "--tensor", "b", "--out", str(tmp_path / "o"))
    assert (
        result.exit_code == 1 and "tensor 'b': dtype 'I32' is not a weight dtype" in result.output
    )
    np.save(tmp_path / "w.npy", np.ones((4, 16), np.float32))
    result = invoke(
        "quantize", str(tmp_path / "w.npy"), "--tensor", "a", "--out", str(tmp_path / "o")
    )
    assert result.exit_code == 1 and "are for a .safetensors checkpoint" in result.output
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "array, args, message",
    [
        (np.ones(32, dtype=np.float32), [], "2-D (n, k) or 3-D"),
        (np.ones((2, 2, 2, 16), dtype=np.float32), [], "2-D (n, k) or 3-D"),
        (np.ones((4, 24), dtype=np.float32), [], "multiple of 16, got 24"),
        (np.ones((4, 16), dtype=np.int32), [], "int32"),
        (np.ones((4, 16), dtype=np.float32), ["--experts-axis", "0"], "no experts axis"),
        (np.ones((2, 4, 16), dtype=np.float32), ["--experts-axis", "2"], "K is the last axis"),
        (np.full((4, 16), np.nan, dtype=np.float32), [], "inf or NaN"),
    ],
)
def test_quantize_bad_weights_are_clean_errors(tmp_path, array, args, message):
    np.save(tmp_path / "w.npy", array)
    result = invoke("quantize", str(tmp_path / "w.npy"), "--out", str(tmp_path / "out"), *args)
    assert result.exit_code == 1
    assert "w.npy" in result.output and message in result.output
    assert not (tmp_path / "out").exists()


def test_quantize_missing_or_unreadable_file(tmp_path):
    result = invoke("quantize", str(tmp_path / "nope.npy"), "--out", str(tmp_path))
    assert (
        result.exit_code == 2 and "nope.npy" in result.output and "does not exist" in result.output
    )
    (tmp_path / "text.npy").write_text("not an array")
    result = invoke("quantize", str(tmp_path / "text.npy"), "--out", str(tmp_path / "o"))
    assert result.exit_code == 1 and "cannot read" in result.output and "text.npy" in result.output
    result = invoke("quantize", str(tmp_path / "text.npy"))
    assert result.exit_code == 2 and "--out" in result.output
