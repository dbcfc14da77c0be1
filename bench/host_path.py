#!/usr/bin/env python3
"""Host-side cost of the nvfp4-aot runtime on a GPU machine; prints a table.

1. Cold start, in fresh processes (median of --processes): ``import nvfp4_aot`` and the
   runtime modules, the cuda.bindings import, cuInit + primary context, plan creation
   for the first benchmark shape of shapes.json (manifest, cubin checks and load,
   buffers), first run completed. Next to it: a bare ``python3 -c pass`` and the driver floor from C
   (``bench/driver_floor.c``: dlopen libcuda + cuInit, context, library load), which any
   CUDA program pays. The DSL baseline (import + ``cute.compile`` of both variants) was
   measured on the CPU development machine and is recorded below.
2. Steady state: host wall time per ``plan.run`` with new pointers on every call (input
   sets alternate) and unchanged shapes, on a one-tile problem; median over batches.
   Also with repeated pointers and through ``launch_pointers``; each piece of the path
   alone; the same driver calls made from C (the floor); and the GPU time per run when
   runs are queued back to back, which shows what the table copy costs the GPU.
3. CUDA graph: N runs captured (relaxed mode), alternating between two plans, replayed.
   The target applies to the host time of one cuGraphLaunch divided by N (launched on
   an idle queue, so it never blocks); the GPU time per run is shown, as is a graph of
   one plan with the same pointers.

Uses only nvfp4_aot, cuda.bindings (through nvfp4_aot.driver), numpy and a C compiler
(optional, for the floors).

    python bench/host_path.py [--shapes /work/shared/shapes.json] [--device 0] [--json FILE]
"""

from __future__ import annotations

import argparse
import ctypes
import itertools
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from nvfp4_aot import driver  # noqa: E402
from nvfp4_aot.device_data import DeviceOperands  # noqa: E402
from nvfp4_aot.intmath import ceil_div  # noqa: E402
from nvfp4_aot.plan import GroupedGemmPlan  # noqa: E402

# The DSL path, measured 2026-12-02 on the CPU development machine (x86-64, 2 cores,
# Python 3.11.7, nvidia-cutlass-dsl 4.8.1, no GPU): wall time of a fresh
#   CUTE_DSL_ARCH=sm_100a python3 -c 'import nvfp4_aot.kernels.sm100_grouped_gemm as k;
#                                     k.compile(8); k.compile(120)'
# median of 5 processes (3.68 .. 4.14 s); in process: import 0.90 s, compile(8) 1.30 s,
# compile(120) 1.10 s. It includes no CUDA initialisation and no launch.
DSL_BASELINE_S = 3.96
DSL_BASELINE_DATE = "2026-12-02"

# GPU MODE nvfp4_group_gemm, first benchmark shape (used when no shapes file is found)
FIRST_BENCHMARK = [(m, 4096, 7168) for m in (80, 176, 128, 72, 64, 248, 96, 160)]
SMALL = [(128, 128, 256)]  # one output tile: a short kernel, so the GPU keeps up
TARGET_RUN_US = 10.0
UPLOAD_SETS, UPLOAD_SLOTS, UPLOAD_BATCH = 48, 32, 25
TARGET_GRAPH_US = 3.0

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import nvfp4_aot
t1 = time.perf_counter()
from nvfp4_aot import GroupedGemmPlan, driver, validation
from nvfp4_aot.intmath import round_up
t2 = time.perf_counter()
driver.backend()  # imports cuda.bindings (loaded lazily by the runtime)
t3 = time.perf_counter()
device = int(sys.argv[1]); sizes = json.loads(sys.argv[2])
driver.init(); driver.activate(device)
t4 = time.perf_counter()
plan = GroupedGemmPlan(sizes, device)
t5 = time.perf_counter()
columns = [[], [], [], [], []]
offset = 0
for m, n, k in sizes:
    b = validation.operand_bytes(m, n, k)
    for f, name in enumerate(validation.OPERAND_FIELDS):
        columns[f].append(offset)
        offset += round_up(b[name], 256)
base = driver.mem_alloc(offset)
driver.memset_d8(base, 0, offset)
columns = [[base + o for o in col] for col in columns]
t6 = time.perf_counter()
plan.run(*columns)
plan.synchronize()
t7 = time.perf_counter()
print(json.dumps({"import_package": t1 - t0, "import_runtime": t2 - t1, "import_bindings": t3 - t2,
                  "cuda_init": t4 - t3, "plan": t5 - t4, "operands": t6 - t5, "first_run": t7 - t6,
                  "numpy_imported": float("numpy" in sys.modules)}))
"""

# The driver's own share of the cold start, in a fresh process (bench/driver_floor.c).
FLOOR_CHILD = r"""
import ctypes, json, sys
floor = ctypes.CDLL(sys.argv[1])
out = (ctypes.c_double * 3)()
status = floor.cold_floor(sys.argv[2].encode(), sys.argv[3].encode(), out)
print(json.dumps({"status": status, "libcuda_and_cuinit": out[0] / 1e3,
                  "context": out[1] / 1e3, "library_and_function": out[2] / 1e3}))
"""

PYTHON_ONLY = "pass"


def build_floor() -> Path | None:
    """Compile bench/driver_floor.c (None where there is no C compiler)."""
    target = Path("/tmp/nvfp4_aot_driver_floor.so")
    source = REPO / "bench" / "driver_floor.c"
    result = subprocess.run(
        ["cc", "-O2", "-shared", "-fPIC", "-o", str(target), str(source), "-ldl"],
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        print(f"(no driver floor: cc failed: {result.stderr.strip()[:200]})")
        return None
    return target


def first_benchmark_shape(path: Path | None) -> list[tuple[int, int, int]]:
    if path is None or not path.is_file():
        return FIRST_BENCHMARK
    case = json.loads(path.read_text())["benchmarks"][0]
    return [tuple(v) for v in zip(case["m"], case["n"], case["k"])]


def _median_child(code: str, args, processes: int) -> dict[str, float]:
    """Median over fresh processes of each reported step and of the process wall time."""
    runs = []
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for _ in range(processes):
        start = time.perf_counter()
        out = subprocess.run(
            [sys.executable, "-c", code, *map(str, args)],
            capture_output=True,
            text=True,
            cwd=REPO,
            env=env,
        )
        wall = time.perf_counter() - start
        if out.returncode != 0:
            raise SystemExit(f"cold-start child failed:\n{out.stderr}")
        lines = out.stdout.strip().splitlines()
        steps = json.loads(lines[-1]) if lines else {}
        steps["process_wall"] = wall
        runs.append(steps)
    return {key: statistics.median(r[key] for r in runs) for key in runs[0]}


def cold_start(device: int, sizes, processes: int, floor: Path | None) -> dict:
    """Ours per step, a bare Python process, and the driver floor."""
    result = {
        "ours": _median_child(CHILD, [device, json.dumps(sizes)], processes),
        "python": _median_child(PYTHON_ONLY, [], processes),
    }
    if floor is not None:
        from nvfp4_aot import loader

        manifest = loader.load_manifest()
        variant = loader.variants_for(manifest, driver.compute_capability(device), device)[0]
        cubin = loader.artifacts_dir() / variant.cubin
        result["floor"] = _median_child(
            FLOOR_CHILD, [floor, cubin, variant.kernel_symbol], processes
        )
    return result


class Operands(DeviceOperands):
    """Zero-filled A, B, C, SFA, SFB for ``sizes`` in one allocation (timing only)."""

    def c_is_zero(self) -> bool:
        return not any(self.c_raw(g).any() for g in range(len(self.sizes)))


def per_call_us(call, batches: int, per_batch: int, drain=None) -> float:
    """Median over batches of the wall time per call, in microseconds.

    ``drain`` (untimed, between batches) empties the GPU queue, so that a batch measures
    the host's cost and not a GPU that is slower than the host.
    """
    samples = []
    for _ in range(batches):
        if drain is not None:
            drain()
        start = time.perf_counter()
        for i in range(per_batch):
            call(i)
        samples.append((time.perf_counter() - start) / per_batch * 1e6)
    return statistics.median(samples)


def steady_state(device: int, calls: int, pointer_sets: int, floor) -> dict:
    batches, per_batch = 20, max(1, calls // 20)
    # a ring slot per call of a batch: the runs of a batch never wait for the GPU (one
    # small kernel takes ~11 us, longer than the host needs to launch it)
    plan = GroupedGemmPlan(SMALL, device, ring_slots=per_batch + 1)
    stream = driver.stream_create()
    sets = [Operands(SMALL) for _ in range(pointer_sets)]
    columns = [s.columns for s in sets]
    flat = [plan.pointers(*c, stream)[0] for c in columns]

    def run_new(i):
        plan.run(*columns[i % pointer_sets], stream=stream)

    def run_same(_i):
        plan.run(*columns[0], stream=stream)

    def launch_new(i):
        plan.launch_pointers(flat[i % pointer_sets], stream)

    # Every run uploads its table: UPLOAD_SETS sets (all validated before, < the 64 a plan
    # remembers) rotate through a ring of UPLOAD_SLOTS slots, so no slot still holds the
    # table a run needs. Short batches keep the GPU less than UPLOAD_SLOTS runs behind.
    upload_plan = GroupedGemmPlan(SMALL, device, ring_slots=UPLOAD_SLOTS)
    upload_sets = [Operands(SMALL) for _ in range(UPLOAD_SETS)]
    upload_columns = [s.columns for s in upload_sets]
    for c in upload_columns:
        upload_plan.pointers(*c, stream)

    rotation = itertools.count()  # not the batch index: it restarts every batch

    def run_upload(_i):
        upload_plan.run(*upload_columns[next(rotation) % UPLOAD_SETS], stream=stream)

    result = {}
    for name, call, gemm, batch in (
        ("run_new", run_new, plan, per_batch),
        ("run_same", run_same, plan, per_batch),
        ("launch_new", launch_new, plan, per_batch),
        ("run_upload", run_upload, upload_plan, UPLOAD_BATCH),
    ):
        for i in range(200):  # warm-up
            call(i)
        gemm.synchronize()
        result[name] = per_call_us(call, batches, batch, drain=gemm.synchronize)
        sync_start = time.perf_counter()
        gemm.synchronize()
        result[name + "_drain_us"] = (time.perf_counter() - sync_start) * 1e6
    slots_before = list(upload_plan._launcher._slot_table)
    run_upload(0)
    assert upload_plan._launcher._slot_table != slots_before, "run_upload did not stage a table"
    upload_plan.close()
    for s in upload_sets:
        s.free()
    # pieces of the new-pointer path (plan internals, for reference only)
    launcher = plan._launcher
    calls_ = launcher._calls
    slot = launcher._last_slot
    spec, params = launcher._launch_specs[0], launcher._params[slot][0]
    table = plan._tables.table(tuple(flat[0]))
    key_columns = columns[0]
    pieces = {
        "piece_table_lookup": lambda _i: plan._tables.get(
            (*key_columns[0], *key_columns[1], *key_columns[2], *key_columns[3], *key_columns[4])
        ),
        "piece_stage_write": lambda _i: launcher._staging[slot].__setitem__(slice(None), table),
        "piece_is_capturing": lambda _i: calls_.stream_is_capturing(stream),
        "piece_set_context": lambda _i: calls_.set_context(launcher._context),
        "piece_launch": lambda _i: calls_.launch(spec, stream, params),
        "piece_event_record": lambda _i: calls_.event_record(launcher._events[slot], stream),
        "piece_event_query": lambda _i: calls_.event_query(launcher._events[slot]),
    }
    pieces["piece_memcpy_async"] = lambda _i: calls_.memcpy_htod_async(
        launcher.slot_address(slot),
        launcher._staging_addresses[slot],
        plan.layout.slot_bytes,
        stream,
    )
    for name, call in pieces.items():
        result[name] = per_call_us(call, batches, per_batch)
        plan.synchronize()
    if floor is not None and type(calls_).__name__ == "DirectCalls":
        library = ctypes.CDLL(str(floor))
        library.steady_floor.restype = ctypes.c_double
        address = lambda f: ctypes.c_void_p(ctypes.cast(f, ctypes.c_void_p).value)  # noqa: E731
        for key, copy in (("c_floor", calls_._cuMemcpyHtoDAsync), ("c_floor_no_copy", None)):
            samples = []
            for _ in range(batches):
                plan.synchronize()
                samples.append(
                    library.steady_floor(
                        ctypes.c_int(per_batch),
                        address(calls_._cuStreamIsCapturing),
                        address(calls_._cuCtxSetCurrent),
                        address(copy) if copy is not None else None,
                        address(calls_._cuLaunchKernelEx),
                        address(calls_._cuEventRecord),
                        ctypes.c_void_p(launcher._context),
                        ctypes.c_uint64(launcher.slot_address(slot)),
                        ctypes.c_void_p(launcher._staging_addresses[slot]),
                        ctypes.c_size_t(plan.layout.slot_bytes),
                        ctypes.c_void_p(spec.config_address),
                        ctypes.c_void_p(spec.function),
                        ctypes.c_void_p(stream),
                        ctypes.c_void_p(params),
                        ctypes.c_void_p(launcher._events[slot]),
                    )
                )
            result[key] = statistics.median(samples)
    # GPU time per eager run, runs queued back to back, new pointers each run
    start, end = driver.timing_event_create(), driver.timing_event_create()
    plan.synchronize()
    driver.event_record(start, stream)
    for i in range(calls):
        run_new(i)
    driver.event_record(end, stream)
    driver.event_synchronize(end)
    result["eager_gpu_per_run"] = driver.event_elapsed_ms(start, end) * 1e3 / calls
    plan.close()
    return result


def graph(device: int, runs_per_graph: int, replays: int, alternate: bool = True) -> dict:
    """Capture ``runs_per_graph`` runs and replay the graph.

    Under capture every run of a plan records into a capture slot of its own (a
    pointer-table copy node and the kernel node per run), so each plan gets a slot per
    captured run. With ``alternate`` the runs alternate between two plans with two input
    sets, so the replay must write both sets' C; without, one plan.
    """
    sets = [Operands(SMALL) for _ in range(2 if alternate else 1)]
    slots = ceil_div(runs_per_graph, len(sets))
    plans = [GroupedGemmPlan(SMALL, device, capture_slots=slots) for _ in sets]
    stream = driver.stream_create()
    driver.capture_begin(stream, relaxed=True)
    try:
        for i in range(runs_per_graph):
            plans[i % len(plans)].run(*sets[i % len(sets)].columns, stream=stream)
    finally:
        cuda_graph = driver.call("cuStreamEndCapture", stream)
    _nodes, node_count = driver.call("cuGraphGetNodes", cuda_graph, 0)
    executable = driver.call("cuGraphInstantiate", cuda_graph, 0)
    for s in sets:
        s.poison_c()
    driver.synchronize()
    for _ in range(3):
        driver.call("cuGraphLaunch", executable, stream)
    driver.stream_synchronize(stream)
    wrote_c = all(s.c_is_zero() for s in sets)

    host_samples = []  # one launch on an idle queue: the host cost, never blocked
    for _ in range(replays):
        t0 = time.perf_counter()
        driver.call("cuGraphLaunch", executable, stream)
        host_samples.append(time.perf_counter() - t0)
        driver.stream_synchronize(stream)
    start, end = driver.timing_event_create(), driver.timing_event_create()
    t0 = time.perf_counter()
    driver.event_record(start, stream)
    for _ in range(replays):
        driver.call("cuGraphLaunch", executable, stream)
    driver.event_record(end, stream)
    driver.event_synchronize(end)
    wall = time.perf_counter() - t0
    gpu_ms = driver.event_elapsed_ms(start, end)
    total = replays * runs_per_graph
    try:
        for plan in plans:
            plan.close()
        close = "ok"
    except Exception as exc:
        close = f"{type(exc).__name__}: {exc}"
    return {
        "nodes": int(node_count),
        "wrote_every_c": wrote_c,
        "wall_per_run_us": wall / total * 1e6,
        "gpu_per_run_us": gpu_ms * 1e3 / total,
        "host_per_graph_launch_us": statistics.median(host_samples) * 1e6,
        "host_per_run_us": statistics.median(host_samples) / runs_per_graph * 1e6,
        "close_after_capture": close,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shapes", type=Path, default=Path("/work/shared/shapes.json"))
    parser.add_argument("--device", type=int, default=0)
    parser.add_argument("--processes", type=int, default=5)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--pointer-sets", type=int, default=2)
    parser.add_argument("--graph-runs", type=int, default=64)
    parser.add_argument("--replays", type=int, default=50)
    parser.add_argument("--json", type=Path, default=None, help="Also write the results here.")
    args = parser.parse_args()

    sizes = first_benchmark_shape(args.shapes)
    driver.init()
    name = driver.device_name(args.device)
    print(f"device {args.device}: {name}; cold-start shape: {len(sizes)} groups {sizes[0]}...")
    floor = build_floor()
    cold = cold_start(args.device, sizes, args.processes, floor)
    driver.activate(args.device)
    steady = steady_state(args.device, args.calls, args.pointer_sets, floor)
    graphed = graph(args.device, args.graph_runs, args.replays)
    kernels_only = graph(args.device, args.graph_runs, args.replays, alternate=False)

    ms = 1e3
    rows = []

    def row(metric, value, target="", result=""):
        rows.append((metric, value, target, result))

    steps = (
        "import_package",
        "import_runtime",
        "import_bindings",
        "cuda_init",
        "plan",
        "first_run",
    )
    ours = cold["ours"]
    total = sum(ours[k] for k in steps)
    for step in steps:
        row(f"cold: {step.replace('_', ' ')}", f"{ours[step] * ms:.1f} ms")
    row("cold: numpy imported", "yes" if ours["numpy_imported"] else "no", "no",
        "FAIL" if ours["numpy_imported"] else "pass")  # fmt: skip
    row("cold: total in process", f"{total * ms:.1f} ms", "<= 100 ms",
        "pass" if total <= 0.1 else "FAIL")  # fmt: skip
    row("cold: process wall, spawn to exit", f"{ours['process_wall'] * ms:.1f} ms")
    row("bare python3 process wall (-c pass)", f"{cold['python']['process_wall'] * ms:.1f} ms")
    if "floor" in cold and cold["floor"].get("status", -1) == 0:
        f = cold["floor"]
        driver_ms = (f["libcuda_and_cuinit"] + f["context"] + f["library_and_function"]) * ms
        row("C floor: dlopen libcuda + cuInit", f"{f['libcuda_and_cuinit'] * ms:.1f} ms")
        row("C floor: primary context", f"{f['context'] * ms:.1f} ms")
        row("C floor: library load + kernel function", f"{f['library_and_function'] * ms:.1f} ms")
        row("cold: ours beyond the C floor", f"{total * ms - driver_ms:.1f} ms")
    row(f"baseline: DSL import + compile x2 (CPU box, {DSL_BASELINE_DATE})",
        f"{DSL_BASELINE_S * ms:.0f} ms")  # fmt: skip
    wall = ours["process_wall"]
    row("cold: process wall vs DSL baseline", f"{DSL_BASELINE_S / wall:.1f}x faster",
        "< baseline", "pass" if wall < DSL_BASELINE_S else "FAIL")  # fmt: skip

    row("run(), new pointers each call (2 sets, tables resident)", f"{steady['run_new']:.2f} us",
        f"<= {TARGET_RUN_US:g} us", "pass" if steady["run_new"] <= TARGET_RUN_US else "FAIL")  # fmt: skip
    row(f"run(), new pointers each call ({UPLOAD_SETS} sets, table uploaded every run)",
        f"{steady['run_upload']:.2f} us", f"<= {TARGET_RUN_US:g} us",
        "pass" if steady["run_upload"] <= TARGET_RUN_US else "FAIL")  # fmt: skip
    row("run(), same pointers", f"{steady['run_same']:.2f} us")
    row("launch_pointers(), new pointers", f"{steady['launch_new']:.2f} us")
    if "c_floor" in steady:
        row("C floor: the same driver calls from C, with the copy", f"{steady['c_floor']:.2f} us")
        row("C floor: the same, without the copy", f"{steady['c_floor_no_copy']:.2f} us")
    row("eager GPU time per run (queued)", f"{steady['eager_gpu_per_run']:.2f} us")
    for key, value in steady.items():
        if key.startswith("piece_"):
            row(f"piece: {key[len('piece_') :]}", f"{value:.2f} us")

    row(f"graph: host time per run (cuGraphLaunch / {args.graph_runs})",
        f"{graphed['host_per_run_us']:.2f} us", f"<= {TARGET_GRAPH_US:g} us",
        "pass" if graphed["host_per_run_us"] <= TARGET_GRAPH_US else "FAIL")  # fmt: skip
    row("graph: GPU time per run", f"{graphed['gpu_per_run_us']:.2f} us")
    row("graph: nodes captured", str(graphed["nodes"]))
    row("graph: replay wrote every C", "yes" if graphed["wrote_every_c"] else "no", "yes",
        "pass" if graphed["wrote_every_c"] else "FAIL")  # fmt: skip
    row("graph: plan.close() after capture", graphed["close_after_capture"])
    row(
        "graph, one plan, same pointers: GPU time per run",
        f"{kernels_only['gpu_per_run_us']:.2f} us",
    )

    header = ("metric", "value", "target", "result")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(4)]
    for r in (header, tuple("-" * w for w in widths), *rows):
        print("  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip())
    if args.json is not None:
        args.json.write_text(
            json.dumps(
                {"device": name, "cold": cold, "steady": steady, "graph": graphed,
                 "graph_same_pointers": kernels_only},
                indent=2,
            )
        )  # fmt: skip


if __name__ == "__main__":
    main()
