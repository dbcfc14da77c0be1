#!/usr/bin/env python3
"""Host-side cost of the nvfp4-aot runtime on a GPU machine; prints a table.

1. Cold start, in fresh processes (median of --processes): ``import nvfp4_aot`` and the
   runtime modules, cuInit + primary context, plan creation for the first benchmark
   shape of shapes.json (manifest, cubin checks and load, device buffers), first run
   completed. The baseline is the CuTe DSL path (import + ``cute.compile`` of both
   variants), measured on the CPU development machine and recorded below.
2. Steady state: host wall time per ``plan.run`` with new pointers on every call (input
   sets alternate) and unchanged shapes, on a one-tile problem so the GPU keeps up;
   median over batches. Also with repeated pointers, through ``launch_pointers`` and the
   bare ``cuLaunchKernelEx`` floor.
3. CUDA graph: N runs captured (relaxed mode), alternating between two plans, replayed.
   The target applies to the host time of one cuGraphLaunch divided by N (launched on
   an idle queue, so it never blocks); wall and GPU time per run with replays queued are
   bound by the kernel itself (about 11 us for one tile of the sm_90a kernel) and are
   shown, as is a graph of kernel nodes only (same pointers, copies skipped).

Uses only nvfp4_aot, cuda.bindings (through nvfp4_aot.driver) and numpy.

    python bench/host_path.py [--shapes /work/shared/shapes.json] [--device 0] [--json FILE]
"""

from __future__ import annotations

import argparse
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
TARGET_GRAPH_US = 3.0

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import nvfp4_aot
t1 = time.perf_counter()
from nvfp4_aot import GroupedGemmPlan, driver, validation
t2 = time.perf_counter()
device = int(sys.argv[1]); sizes = json.loads(sys.argv[2])
driver.init(); driver.activate(device)
t3 = time.perf_counter()
plan = GroupedGemmPlan(sizes, device)
t4 = time.perf_counter()
columns = [[], [], [], [], []]
layout, offset = [], 0
for m, n, k in sizes:
    b = validation.operand_bytes(m, n, k)
    for f, name in enumerate(("a", "b", "c", "sfa", "sfb")):
        columns[f].append(offset)
        offset += -(-b[name] // 256) * 256
base = driver.mem_alloc(offset)
driver.memset_d8(base, 0, offset)
columns = [[base + o for o in col] for col in columns]
t5 = time.perf_counter()
plan.run(*columns)
plan.synchronize()
t6 = time.perf_counter()
print(json.dumps({"import_package": t1 - t0, "import_runtime": t2 - t1, "cuda_init": t3 - t2,
                  "plan": t4 - t3, "operands": t5 - t4, "first_run": t6 - t5}))
"""


def first_benchmark_shape(path: Path | None) -> list[tuple[int, int, int]]:
    if path is None or not path.is_file():
        return FIRST_BENCHMARK
    case = json.loads(path.read_text())["benchmarks"][0]
    return [tuple(v) for v in zip(case["m"], case["n"], case["k"])]


def cold_start(device: int, sizes, processes: int) -> dict[str, float]:
    """Median over fresh processes of each step (seconds) and of the process wall time."""
    runs = []
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for _ in range(processes):
        start = time.perf_counter()
        out = subprocess.run(
            [sys.executable, "-c", CHILD, str(device), json.dumps(sizes)],
            capture_output=True,
            text=True,
            cwd=REPO,
            env=env,
        )
        wall = time.perf_counter() - start
        if out.returncode != 0:
            raise SystemExit(f"cold-start child failed:\n{out.stderr}")
        steps = json.loads(out.stdout.strip().splitlines()[-1])
        steps["process_wall"] = wall
        runs.append(steps)
    return {key: statistics.median(r[key] for r in runs) for key in runs[0]}


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


def steady_state(device: int, calls: int, pointer_sets: int) -> dict[str, float]:
    batches, per_batch = 20, max(1, calls // 20)
    # a ring slot per call of a batch: the runs of a batch never wait for the GPU (one
    # small kernel takes ~11 us, longer than the host needs to launch it)
    plan = GroupedGemmPlan(SMALL, device, ring_slots=per_batch + 1)
    stream = int(driver.call("cuStreamCreate", 1))  # CU_STREAM_NON_BLOCKING
    sets = [Operands(SMALL) for _ in range(pointer_sets)]
    columns = [s.columns for s in sets]
    flat = [plan.pointers(*c, stream)[0] for c in columns]

    def run_new(i):
        plan.run(*columns[i % pointer_sets], stream=stream)

    def run_same(_i):
        plan.run(*columns[0], stream=stream)

    def launch_new(i):
        plan.launch_pointers(flat[i % pointer_sets], stream)

    result = {}
    for name, call in (("run_new", run_new), ("run_same", run_same), ("launch_new", launch_new)):
        for i in range(200):  # warm-up
            call(i)
        plan.synchronize()
        result[name] = per_call_us(call, batches, per_batch, drain=plan.synchronize)
        sync_start = time.perf_counter()
        plan.synchronize()
        result[name + "_drain_us"] = (time.perf_counter() - sync_start) * 1e6
    try:  # the floor: one prepared cuLaunchKernelEx (plan internals, for reference only)
        function, config, params = plan._functions[0], plan._configs[0], plan._params[0][0]
        config.hStream = stream
        result["launch_floor"] = per_call_us(
            lambda _i: driver.launch(function, config, params), batches, per_batch
        )
    except AttributeError:
        result["launch_floor"] = float("nan")
    # pieces of the new-pointer path (plan internals, for reference only)
    try:
        slot = plan._last_slot
        row, size = plan._staging[slot], plan._slot_bytes
        address, host = plan._slot_address(slot), row.ctypes.data
        event = plan._events[slot]
        pieces = {
            "piece_activate": lambda _i: driver.activate(device),
            "piece_memcpy_async": lambda _i: driver.memcpy_htod_async(address, host, size, stream),
            "piece_event_record": lambda _i: driver.event_record(event, stream),
            "piece_event_query": lambda _i: driver.event_query(event),
            "piece_pointers": lambda i: plan.pointers(*columns[i % pointer_sets], stream),
            "piece_row_ctypes_data": lambda _i: row.ctypes.data,
        }
        for name, call in pieces.items():
            result[name] = per_call_us(call, batches, per_batch)
            plan.synchronize()
    except AttributeError:
        pass
    # GPU time per eager run, runs queued back to back
    start, end = driver.call("cuEventCreate", 0), driver.call("cuEventCreate", 0)
    driver.event_record(start, stream)
    for i in range(calls):
        run_new(i)
    driver.event_record(end, stream)
    driver.event_synchronize(end)
    result["eager_gpu_per_run"] = float(driver.call("cuEventElapsedTime", start, end)) * 1e3 / calls
    plan.close()
    return result


def graph(device: int, runs_per_graph: int, replays: int, alternate: bool = True) -> dict:
    """Capture ``runs_per_graph`` runs and replay the graph.

    Under capture a plan records into its graph slot (a pointer-table copy node and the
    kernel node per run). With ``alternate`` the runs alternate between two plans with
    two input sets, so the replay must write both sets' C; without, one plan.
    """
    sets = [Operands(SMALL) for _ in range(2 if alternate else 1)]
    plans = [GroupedGemmPlan(SMALL, device) for _ in sets]
    stream = int(driver.call("cuStreamCreate", 1))
    mode = driver.backend().CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED
    driver.call("cuStreamBeginCapture", stream, mode)
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
    start, end = driver.call("cuEventCreate", 0), driver.call("cuEventCreate", 0)
    t0 = time.perf_counter()
    driver.event_record(start, stream)
    for _ in range(replays):
        driver.call("cuGraphLaunch", executable, stream)
    driver.event_record(end, stream)
    driver.event_synchronize(end)
    wall = time.perf_counter() - t0
    gpu_ms = float(driver.call("cuEventElapsedTime", start, end))
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
    cold = cold_start(args.device, sizes, args.processes)
    steady = steady_state(args.device, args.calls, args.pointer_sets)
    graphed = graph(args.device, args.graph_runs, args.replays)
    kernels_only = graph(args.device, args.graph_runs, args.replays, alternate=False)

    ours_s = sum(cold[k] for k in ("import_package", "import_runtime", "cuda_init", "plan"))
    ours_s += cold["first_run"]
    ms = 1e3
    rows = [
        ("cold: import nvfp4_aot", f"{cold['import_package'] * ms:.1f} ms", "", ""),
        ("cold: import runtime modules", f"{cold['import_runtime'] * ms:.1f} ms", "", ""),
        ("cold: cuInit + primary context", f"{cold['cuda_init'] * ms:.1f} ms", "", ""),
        ("cold: plan (manifest, cubin load, buffers)", f"{cold['plan'] * ms:.1f} ms", "", ""),
        ("cold: first run + sync", f"{cold['first_run'] * ms:.1f} ms", "", ""),
        ("cold: total of the above", f"{ours_s * ms:.1f} ms", "", ""),
        ("cold: (operand alloc, not counted)", f"{cold['operands'] * ms:.1f} ms", "", ""),
        ("cold: process wall, spawn to exit", f"{cold['process_wall'] * ms:.1f} ms", "", ""),
        (
            f"baseline: DSL import + compile x2 (CPU box, {DSL_BASELINE_DATE})",
            f"{DSL_BASELINE_S * ms:.0f} ms",
            "",
            "",
        ),
        (
            "cold: process wall vs DSL baseline",
            f"{DSL_BASELINE_S / cold['process_wall']:.1f}x faster",
            "< baseline",
            "pass" if cold["process_wall"] < DSL_BASELINE_S else "FAIL",
        ),
        (
            "run(), new pointers each call",
            f"{steady['run_new']:.2f} us",
            f"<= {TARGET_RUN_US:g} us",
            "pass" if steady["run_new"] <= TARGET_RUN_US else "FAIL",
        ),
        ("run(), same pointers (copy skipped)", f"{steady['run_same']:.2f} us", "", ""),
        ("launch_pointers(), new pointers", f"{steady['launch_new']:.2f} us", "", ""),
        ("cuLaunchKernelEx alone (floor)", f"{steady['launch_floor']:.2f} us", "", ""),
        ("eager GPU time per run (queued)", f"{steady['eager_gpu_per_run']:.2f} us", "", ""),
        (
            f"graph: host time per run (cuGraphLaunch / {args.graph_runs})",
            f"{graphed['host_per_run_us']:.2f} us",
            f"<= {TARGET_GRAPH_US:g} us",
            "pass" if graphed["host_per_run_us"] <= TARGET_GRAPH_US else "FAIL",
        ),
        (
            "graph: wall per run, replays queued (GPU-bound)",
            f"{graphed['wall_per_run_us']:.2f} us",
            "",
            "",
        ),
        ("graph: GPU time per run", f"{graphed['gpu_per_run_us']:.2f} us", "", ""),
        ("graph: host per cuGraphLaunch", f"{graphed['host_per_graph_launch_us']:.1f} us", "", ""),
        ("graph: nodes captured", str(graphed["nodes"]), "", ""),
        (
            "graph: replay wrote every C",
            "yes" if graphed["wrote_every_c"] else "no",
            "yes",
            "pass" if graphed["wrote_every_c"] else "FAIL",
        ),
        ("graph: plan.close() after capture", graphed["close_after_capture"], "", ""),
        (
            "graph, same pointers: GPU time per run (kernel)",
            f"{kernels_only['gpu_per_run_us']:.2f} us",
            "",
            "",
        ),
        ("graph, same pointers: nodes", str(kernels_only["nodes"]), "", ""),
    ]
    rows += [
        (f"piece: {key[len('piece_') :]}", f"{value:.2f} us", "", "")
        for key, value in steady.items()
        if key.startswith("piece_")
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    header = ("metric", "value", "target", "result")
    widths = [max(w, len(h)) for w, h in zip(widths, header)]
    for row in (header, tuple("-" * w for w in widths), *rows):
        print("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip())
    if args.json is not None:
        args.json.write_text(
            json.dumps(
                {
                    "device": name,
                    "cold": cold,
                    "steady": steady,
                    "graph": graphed,
                    "graph_same_pointers": kernels_only,
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
