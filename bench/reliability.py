#!/usr/bin/env python3
"""Reliability of the nvfp4-aot runtime on a GPU: prints a table, writes JSON.

a. Bad inputs on the GPU: C is poisoned with 0xFFFF, a bad call is made (each must
   raise its documented exception), the device is synchronised and C downloaded: every
   element must still be 0xFFFF. A good run afterwards must still be correct.
b. Concurrency: 4 host threads drive 8 non-blocking streams (2 each); each thread owns
   2 plans of different shapes with 3 input sets each and launches on a randomly chosen
   stream of its own, 1,000 launches in all. Every C is poisoned before its launch and
   every result is checked against the float64 reference (finite, relative error
   <= 1e-3): a stale pointer, a shared workspace or a lost ordering shows as a mismatch.
c. CUDA graphs: one plan.run captured (relaxed mode), instantiated, then for several
   input sets: set_graph_pointers, cuGraphLaunch, synchronise, check. Replay time per
   launch (CUDA events, and host time per cuGraphLaunch) next to eager plan.run.
d. Soak: 100,000 runs rotating 4 input sets, spot checks every 10,000, then 200 plan
   create/run/close cycles; device memory in use (cuMemGetInfo), process RSS and open
   file descriptors before and after. PASS if none grew beyond noise.

Needs only nvfp4_aot, cuda.bindings (through nvfp4_aot.driver) and numpy. About a
minute on an H200 (--quick: a few seconds).

    python bench/reliability.py [--device 0] [--quick] [--kernel FAMILY] [--json FILE]

Exit status 0 when every section passes, 1 otherwise.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import random
import sys
import threading
import time
import traceback
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from nvfp4_aot import driver  # noqa: E402
from nvfp4_aot.device_data import DeviceOperands  # noqa: E402
from nvfp4_aot.errors import InvalidProblemError, Nvfp4Error  # noqa: E402
from nvfp4_aot.layouts import random_problem  # noqa: E402
from nvfp4_aot.plan import GroupedGemmPlan  # noqa: E402
from nvfp4_aot.reference import reference_gemm, relative_error  # noqa: E402

TOLERANCE = 1e-3
POISON = 0xFFFF  # FP16 NaN: an unwritten element never passes the check
MiB = 1 << 20
# growth allowed in the soak (noise: allocator slack, lazily loaded driver pieces)
DEVICE_NOISE = 2 * MiB
RSS_NOISE = 16 * MiB
# every plan of the run (main() fixes the kernel family when --kernel is given)
make_plan = GroupedGemmPlan


# ---------------------------------------------------------------------------------------
# device data


class InputSet(DeviceOperands):
    """Random problems for ``sizes`` on the device (one allocation), with references."""

    def __init__(self, sizes, rng: np.random.Generator):
        self.problems = [random_problem(m, n, k, rng) for m, n, k in sizes]
        self.references = [reference_gemm(p) for p in self.problems]
        super().__init__(sizes, [(p.a, p.b, p.sfa_blocked, p.sfb_blocked) for p in self.problems])

    def poison(self, stream: int | None = None) -> None:
        """Fill every C with 0xFFFF: on ``stream`` (ordered with its launches) or now."""
        self.poison_c(POISON, stream)

    def untouched(self) -> bool:
        return all((self.c_raw(g) == POISON).all() for g in range(len(self.sizes)))

    def errors(self) -> list[float]:
        """Relative error of every group's C (inf when non-finite)."""
        return [
            relative_error(self.c_raw(g).view(np.float16).astype(np.float64), ref)
            for g, ref in enumerate(self.references)
        ]

    def correct(self) -> bool:
        return all(e <= TOLERANCE for e in self.errors())


class CudaArray:
    """A minimal ``__cuda_array_interface__`` producer (for the bad-input cases)."""

    def __init__(self, pointer, shape, typestr, *, readonly=False, device=None):
        self.__cuda_array_interface__ = {
            "version": 3, "shape": tuple(shape), "typestr": typestr,
            "data": (pointer, readonly), "strides": None, "stream": None,
        }  # fmt: skip
        if device is not None:
            self.device = type("Device", (), {"id": device})()


# ---------------------------------------------------------------------------------------
# a. bad inputs on the GPU

BAD_SIZES = [(128, 256, 512), (80, 384, 256)]


def _bad_cases(data: InputSet):
    """(name, call(plan) that must raise, expected exception, message fragment)."""
    a, b, c, sfa, sfb = (list(col) for col in data.columns)
    m0, n0, k0 = BAD_SIZES[0]

    def with_(field, value, group=0):
        cols = [list(a), list(b), list(c), list(sfa), list(sfb)]
        cols["a b c sfa sfb".split().index(field)][group] = value
        return cols

    return [
        ("a misaligned by 16", lambda p: p.run(*with_("a", a[0] + 16)),
         InvalidProblemError, "group 0: a must be 32-byte aligned"),
        ("b null pointer", lambda p: p.run(*with_("b", 0, 1)),
         InvalidProblemError, "group 1: b is a null pointer"),
        ("sfa too small", lambda p: p.run(*with_("sfa", CudaArray(sfa[0], (100,), "|u1"))),
         InvalidProblemError, "group 0: sfa must hold at least"),
        ("c read-only", lambda p: p.run(*with_("c", CudaArray(c[0], (m0, n0), "<f2", readonly=True))),
         InvalidProblemError, "group 0: c is read-only"),
        ("c wrong dtype (uint8)", lambda p: p.run(*with_("c", CudaArray(c[0], (m0, 2 * n0), "|u1"))),
         InvalidProblemError, "group 0: c must have dtype f2"),
        ("c wrong shape (transposed)", lambda p: p.run(*with_("c", CudaArray(c[0], (n0, m0), "<f2"))),
         InvalidProblemError, "group 0: c must have shape"),
        ("c overlaps group 0's c", lambda p: p.run(*with_("c", c[0] + 256, 1)),
         InvalidProblemError, "group 1: c overlaps group 0's c"),
        ("a on another device", lambda p: p.run(*with_("a", CudaArray(a[0], (m0, k0 // 2), "|u1", device=p.device + 1))),
         InvalidProblemError, "group 0: a is on device"),
        # known runtime gaps (tests/test_bad_inputs.py, xfail): they must still launch
        # nothing, but may raise another exception until fixed
        ("a host numpy array (gap)", lambda p: p.run(*with_("a", np.zeros((m0, k0 // 2), np.uint8))),
         InvalidProblemError, "group 0: a: the array lives on a CPU device"),
        ("a pointer >= 2**63 (gap)", lambda p: p.run(*with_("a", 1 << 63)),
         InvalidProblemError, "group 0: a is not a device address"),
        ("sfb list too short", lambda p: p.run(a, b, c, sfa, sfb[:1]),
         InvalidProblemError, "sfb has 1 operands"),
        ("unknown stream object", lambda p: p.run(a, b, c, sfa, sfb, stream=object()),
         TypeError, "cannot get a CUDA stream handle"),
        ("set_graph_pointers misaligned c", lambda p: p.set_graph_pointers(*with_("c", c[1] + 2, 1)),
         InvalidProblemError, "group 1: c must be 32-byte aligned"),
        ("plan with k % 32 != 0", lambda p: make_plan([(128, 256, 48)], p.device),
         InvalidProblemError, "group 0: k must be a multiple of 32"),
    ]  # fmt: skip


def section_bad_inputs(device: int, seed: int) -> dict:
    data = InputSet(BAD_SIZES, np.random.default_rng([seed, 1]))
    rows, failures = [], 0
    try:
        with make_plan(BAD_SIZES, device) as plan:
            closed = make_plan(BAD_SIZES, device)
            closed.close()
            cases = _bad_cases(data) + [
                ("closed plan", lambda _p: closed.run(*data.columns), Nvfp4Error, "closed"),
            ]
            for name, call, error, fragment in cases:
                gap = name.endswith("(gap)")
                data.poison()
                driver.synchronize()
                raised = None
                try:
                    call(plan)
                except Exception as exc:  # judged below
                    raised = exc
                driver.synchronize()
                untouched = data.untouched()
                ok_raise = isinstance(raised, error) and fragment in str(raised)
                # a known gap passes when nothing ran (any exception); it is reported
                ok = untouched and (ok_raise or (gap and raised is not None))
                failures += not ok
                rows.append({
                    "case": name,
                    "raised": f"{type(raised).__name__}: {raised}" if raised else "nothing",
                    "expected": f"{error.__name__}: ...{fragment}...",
                    "c_untouched": untouched,
                    "right_exception": ok_raise,
                    "known_gap": gap and not ok_raise,
                    "pass": ok,
                })  # fmt: skip
            # the plan is still sound after all that
            data.poison()
            plan.run(*data.columns)
            plan.synchronize()
            after = data.errors()
    finally:
        data.free()
    good_after = all(e <= TOLERANCE for e in after)
    return {
        "pass": failures == 0 and good_after,
        "cases": rows,
        "failed_cases": failures,
        "good_run_after": {"pass": good_after, "relative_errors": after},
    }


# ---------------------------------------------------------------------------------------
# b. concurrency

THREAD_PLANS = [
    [[(128, 256, 512)], [(64, 128, 256), (200, 96, 256)]],
    [[(256, 128, 256)], [(32, 64, 128)] * 3],
    [[(96, 384, 512)], [(128, 128, 1024)]],
    [[(192, 256, 256), (80, 128, 512)], [(1, 32, 32)]],
]
SETS_PER_PLAN = 3
STREAMS_PER_THREAD = 2


def _worker(index: int, device: int, launches: int, seed: int, out: dict, barrier) -> None:
    """Rounds of: poison every (plan, set)'s C on the stream about to run it, run each
    on a random stream of this thread, synchronise, check every result."""
    record = {"launches": 0, "checked": 0, "mismatches": 0, "first_mismatch": None, "error": None}
    out[index] = record
    plans, sets, streams = [], [], []
    try:
        driver.activate(device)
        rng = np.random.default_rng([seed, 2, index])
        pick = random.Random(seed * 100 + index)
        streams = [driver.stream_create() for _ in range(STREAMS_PER_THREAD)]
        for sizes in THREAD_PLANS[index]:
            plans.append(make_plan(sizes, device, ring_slots=4))
            sets.append([InputSet(sizes, rng) for _ in range(SETS_PER_PLAN)])
        barrier.wait()
        while record["launches"] < launches:
            order = [(p, s) for p in range(len(plans)) for s in range(SETS_PER_PLAN)]
            pick.shuffle(order)
            order = order[: launches - record["launches"]]
            for p, s in order:
                stream = pick.choice(streams)
                sets[p][s].poison(stream)
                plans[p].run(*sets[p][s].columns, stream=stream)
                record["launches"] += 1
            for stream in streams:
                driver.stream_synchronize(stream)
            for p, s in order:
                errors = sets[p][s].errors()
                record["checked"] += 1
                if any(not e <= TOLERANCE for e in errors):
                    record["mismatches"] += 1
                    if record["first_mismatch"] is None:
                        record["first_mismatch"] = {
                            "plan_sizes": THREAD_PLANS[index][p], "set": s,
                            "relative_errors": errors,
                        }  # fmt: skip
    except BaseException as exc:
        record["error"] = f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"
        try:
            barrier.abort()
        except Exception:
            pass
    finally:
        for plan in plans:
            try:
                plan.close()
            except Exception as exc:
                record["error"] = record["error"] or f"close: {exc}"
        for group in sets:
            for data in group:
                data.free()
        for stream in streams:
            driver.stream_destroy(stream)


def section_concurrency(device: int, total: int, seed: int) -> dict:
    threads_n = len(THREAD_PLANS)
    per_thread = [total // threads_n + (i < total % threads_n) for i in range(threads_n)]
    out: dict[int, dict] = {}
    barrier = threading.Barrier(threads_n + 1)
    threads = [
        threading.Thread(target=_worker, args=(i, device, per_thread[i], seed, out, barrier))
        for i in range(threads_n)
    ]
    for t in threads:
        t.start()
    try:
        barrier.wait()
    except threading.BrokenBarrierError:
        pass
    start = time.perf_counter()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    records = [out.get(i, {"error": "thread did not start"}) for i in range(threads_n)]
    launches = sum(r.get("launches", 0) for r in records)
    checked = sum(r.get("checked", 0) for r in records)
    mismatches = sum(r.get("mismatches", 0) for r in records)
    errors = [r["error"] for r in records if r.get("error")]
    return {
        "pass": not errors and mismatches == 0 and checked == total,
        "threads": threads_n,
        "streams": threads_n * STREAMS_PER_THREAD,
        "plans": sum(len(p) for p in THREAD_PLANS),
        "launches": launches,
        "checked": checked,
        "mismatches": mismatches,
        "errors": errors,
        "wall_s": wall,
        "per_thread": records,
    }


# ---------------------------------------------------------------------------------------
# c. CUDA graphs

GRAPH_SIZES = [(128, 256, 512), (80, 384, 256), (256, 128, 128)]


def section_graphs(device: int, input_sets: int, rounds: int, replays: int, seed: int) -> dict:
    rng = np.random.default_rng([seed, 3])
    sets = [InputSet(GRAPH_SIZES, rng) for _ in range(input_sets)]
    stream = driver.stream_create()
    cuda_graph = executable = None
    events = []
    checks, mismatches = [], 0
    result: dict = {}
    try:
        with make_plan(GRAPH_SIZES, device) as plan:
            driver.capture_begin(stream, relaxed=True)
            try:
                plan.run(*sets[0].columns, stream=stream)
            finally:
                cuda_graph = driver.call("cuStreamEndCapture", stream)
            _nodes, node_count = driver.call("cuGraphGetNodes", cuda_graph, 0)
            executable = driver.call("cuGraphInstantiate", cuda_graph, 0)
            result["nodes"] = int(node_count)

            # replays with new operands each time (the set order rotates every round)
            for r in range(rounds):
                for i in range(input_sets):
                    data = sets[(i + r) % input_sets]
                    data.poison(stream)
                    driver.stream_synchronize(stream)  # no replay pending: safe to restage
                    plan.set_graph_pointers(*data.columns)
                    driver.call("cuGraphLaunch", executable, stream)
                    driver.stream_synchronize(stream)
                    errors = data.errors()
                    ok = all(e <= TOLERANCE for e in errors)
                    mismatches += not ok
                    checks.append(
                        {
                            "round": r,
                            "set": (i + r) % input_sets,
                            "max_error": max(errors),
                            "pass": ok,
                        }
                    )
            # eager runs of the same plan in between must not disturb the graph
            eager = sets[-1]
            eager.poison(stream)
            plan.run(*eager.columns, stream=stream)
            replayed = sets[0]
            replayed.poison(stream)
            driver.stream_synchronize(stream)
            plan.set_graph_pointers(*replayed.columns)
            driver.call("cuGraphLaunch", executable, stream)
            driver.stream_synchronize(stream)
            interleaved_ok = eager.correct() and replayed.correct()

            # timing: replays back to back (events), host time per cuGraphLaunch, eager runs
            plan.set_graph_pointers(*sets[0].columns)
            events = [driver.timing_event_create() for _ in range(4)]
            host = []
            driver.event_record(events[0], stream)
            for _ in range(replays):
                t0 = time.perf_counter()
                driver.call("cuGraphLaunch", executable, stream)
                host.append(time.perf_counter() - t0)
            driver.event_record(events[1], stream)
            driver.stream_synchronize(stream)
            for i in range(replays):  # eager, rotating two sets (new pointers each run)
                plan.run(*sets[i % 2].columns, stream=stream)
                if i == 0:
                    driver.event_record(events[2], stream)
            driver.event_record(events[3], stream)
            driver.stream_synchronize(stream)
            result.update({
                "replay_gpu_us": driver.event_elapsed_ms(events[0], events[1]) * 1e3 / replays,
                "replay_host_us_median": float(np.median(host)) * 1e6,
                "eager_gpu_us": driver.event_elapsed_ms(events[2], events[3]) * 1e3 / max(replays - 1, 1),
            })  # fmt: skip
    finally:
        for event in events:
            driver.event_destroy(event)
        if executable is not None:
            driver.call("cuGraphExecDestroy", executable)
        if cuda_graph is not None:
            driver.call("cuGraphDestroy", cuda_graph)
        driver.stream_destroy(stream)
        for data in sets:
            data.free()
    result.update({
        "pass": mismatches == 0 and interleaved_ok and len(checks) == rounds * input_sets,
        "checked_replays": len(checks),
        "mismatches": mismatches,
        "eager_between_replays_ok": interleaved_ok,
        "replays_timed": replays,
        "checks": checks,
    })  # fmt: skip
    return result


# ---------------------------------------------------------------------------------------
# d. soak


def resources() -> dict:
    free, total = driver.call("cuMemGetInfo")
    rss = 0
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) * 1024
    return {
        "device_used_bytes": int(total) - int(free),
        "rss_bytes": rss,
        "open_fds": len(os.listdir("/proc/self/fd")),
        "threads": threading.active_count(),
    }


SOAK_SIZES = [(128, 128, 256), (64, 256, 256)]
CHURN_SIZES = [SOAK_SIZES, [(96, 64, 128)], [(32, 32, 32)] * 3]


def section_soak(device: int, runs: int, churn: int, seed: int) -> dict:
    rng = np.random.default_rng([seed, 4])
    sets = [InputSet(SOAK_SIZES, rng) for _ in range(4)]
    churn_sets = [InputSet(sizes, rng) for sizes in CHURN_SIZES]
    stream = driver.stream_create()
    spot_every = max(runs // 10, 1)
    spots, spot_failures, churn_failures = [], 0, 0
    try:
        with make_plan(SOAK_SIZES, device) as plan:
            for i in range(2000):  # warm-up: first-use costs stay out of "before"
                plan.run(*sets[i % 4].columns, stream=stream)
            plan.synchronize()
            driver.synchronize()
            before = resources()
            start = time.perf_counter()
            for i in range(runs):
                if i % spot_every == spot_every - 1:
                    data = sets[i % 4]
                    driver.stream_synchronize(stream)
                    data.poison(stream)
                    plan.run(*data.columns, stream=stream)
                    driver.stream_synchronize(stream)
                    ok = data.correct()
                    spot_failures += not ok
                    spots.append({"run": i + 1, "pass": ok})
                else:
                    plan.run(*sets[i % 4].columns, stream=stream)
            plan.synchronize()
            wall = time.perf_counter() - start
        driver.synchronize()
        after_runs = resources()
        # plans come and go: everything a plan allocates must be returned by close()
        churn_start = time.perf_counter()
        for i in range(churn):
            data = churn_sets[i % len(churn_sets)]
            check = i >= churn - len(churn_sets)  # the last cycle of each shape is checked
            if check:
                data.poison(stream)
            with make_plan(data.sizes, device) as cycle:
                cycle.run(*data.columns, stream=stream)
            if check:
                driver.stream_synchronize(stream)
                churn_failures += not data.correct()
        driver.stream_synchronize(stream)
        churn_wall = time.perf_counter() - churn_start
        driver.synchronize()
        after = resources()
    finally:
        driver.stream_destroy(stream)
        for data in sets + churn_sets:
            data.free()
    growth = {key: after[key] - before[key] for key in before}
    growth_runs = {key: after_runs[key] - before[key] for key in before}
    ok_device = growth["device_used_bytes"] <= DEVICE_NOISE
    ok_rss = growth["rss_bytes"] <= RSS_NOISE
    ok_fds = growth["open_fds"] <= 0
    return {
        "pass": spot_failures == 0 and churn_failures == 0 and ok_device and ok_rss and ok_fds,
        "runs": runs,
        "runs_per_s": runs / wall,
        "us_per_run": wall / runs * 1e6,
        "spot_checks": len(spots),
        "spot_failures": spot_failures,
        "plan_churn": churn,
        "plan_churn_failures": churn_failures,
        "plan_churn_ms_each": churn_wall / max(churn, 1) * 1e3,
        "before": before,
        "after_runs": after_runs,
        "after_churn": after,
        "growth_after_runs": growth_runs,
        "growth": growth,
        "noise_allowed": {"device_used_bytes": DEVICE_NOISE, "rss_bytes": RSS_NOISE, "open_fds": 0},
    }


# ---------------------------------------------------------------------------------------
# output


def _mib(value: int) -> str:
    return f"{value / MiB:+.1f} MiB"


def summary_rows(results: dict) -> list[tuple[str, str, str]]:
    rows = []
    a = results.get("bad_inputs")
    if a:
        passed = sum(c["pass"] for c in a.get("cases", []))
        rows.append(
            (
                "a. bad inputs (GPU)",
                a["pass"],
                f"{passed}/{len(a.get('cases', []))} refused with C untouched "
                f"({sum(c.get('known_gap', False) for c in a.get('cases', []))} known gaps "
                "with another exception); "
                f"good run after: {'ok' if a.get('good_run_after', {}).get('pass') else 'FAIL'}",
            )
        )
    b = results.get("concurrency")
    if b:
        rows.append(
            (
                "b. concurrency",
                b["pass"],
                f"{b.get('launches', 0)} launches, {b.get('threads')} threads x "
                f"{STREAMS_PER_THREAD} streams, {b.get('plans')} plans: "
                f"{b.get('mismatches', '?')} mismatches, {len(b.get('errors', []))} errors, "
                f"{b.get('wall_s', 0):.1f} s",
            )
        )
    c = results.get("graphs")
    if c:
        rows.append(
            (
                "c. CUDA graphs",
                c["pass"],
                f"{c.get('checked_replays', 0)} replays with new operands, "
                f"{c.get('mismatches', '?')} mismatches; replay "
                f"{c.get('replay_gpu_us', float('nan')):.1f} us GPU, "
                f"{c.get('replay_host_us_median', float('nan')):.1f} us host; eager "
                f"{c.get('eager_gpu_us', float('nan')):.1f} us GPU",
            )
        )
    d = results.get("soak")
    if d:
        g = d.get("growth", {})
        rows.append(
            (
                "d. soak",
                d["pass"],
                f"{d.get('runs', 0)} runs at {d.get('runs_per_s', 0):,.0f}/s, "
                f"{d.get('spot_checks', 0)} spot checks ({d.get('spot_failures', '?')} bad), "
                f"{d.get('plan_churn', 0)} plan cycles; growth: device "
                f"{_mib(g.get('device_used_bytes', 0))}, RSS {_mib(g.get('rss_bytes', 0))}, "
                f"fds {g.get('open_fds', 0):+d}",
            )
        )
    for name, section in results.items():
        if isinstance(section, dict) and section.get("crashed"):
            rows.append((name, False, section["crashed"].splitlines()[0]))
    return [(n, "PASS" if ok else "FAIL", text) for n, ok, text in rows]


def print_details(name: str, section: dict) -> None:
    if name == "bad_inputs":
        for case in section.get("cases", []):
            mark = ("gap " if case.get("known_gap") else "ok  ") if case["pass"] else "FAIL"
            print(f"  {mark} {case['case']:<34} C untouched: {case['c_untouched']!s:<5}  "
                  f"{case['raised'][:90]}")  # fmt: skip
    elif name == "concurrency":
        for i, r in enumerate(section.get("per_thread", [])):
            print(f"  thread {i}: {r.get('launches')} launches, {r.get('checked')} checked, "
                  f"{r.get('mismatches')} mismatches" + (f", error: {r['error'].splitlines()[0]}"
                                                          if r.get("error") else ""))  # fmt: skip
    elif name == "soak":
        for key in ("device_used_bytes", "rss_bytes", "open_fds", "threads"):
            print(
                f"  {key:<18} before {section['before'][key]:>14,}  after runs "
                f"{section['after_runs'][key]:>14,}  after churn {section['after_churn'][key]:>14,}"
            )
    if section.get("crashed"):
        print("  " + section["crashed"].replace("\n", "\n  "))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", type=int, default=0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="Smaller counts (seconds).")
    parser.add_argument("--launches", type=int, default=None, help="Concurrency launches (1000).")
    parser.add_argument("--soak-runs", type=int, default=None, help="Soak runs (100000).")
    parser.add_argument("--json", type=Path, default=None, help="Write the results here.")
    parser.add_argument(
        "--sections", default="abcd", help="Which sections to run (letters a-d; default all)."
    )
    parser.add_argument(
        "--kernel", default=None, help="Kernel family of every plan (default: each plan's pick)."
    )
    args = parser.parse_args()
    global make_plan
    make_plan = functools.partial(GroupedGemmPlan, kernel=args.kernel)
    launches = args.launches or (200 if args.quick else 1000)
    soak_runs = args.soak_runs or (10_000 if args.quick else 100_000)
    churn = 20 if args.quick else 200
    replays = 200 if args.quick else 2000

    driver.init()
    driver.activate(args.device)
    name = driver.device_name(args.device)
    capability = driver.compute_capability(args.device)
    print(
        f"device {args.device}: {name} (compute capability {capability[0]}.{capability[1]}),"
        f" kernel {args.kernel or 'per plan'}"
    )
    sections = {
        "a": ("bad_inputs", lambda: section_bad_inputs(args.device, args.seed)),
        "b": ("concurrency", lambda: section_concurrency(args.device, launches, args.seed)),
        "c": ("graphs", lambda: section_graphs(args.device, 4, 3, replays, args.seed)),
        "d": ("soak", lambda: section_soak(args.device, soak_runs, churn, args.seed)),
    }
    results: dict = {}
    started = time.perf_counter()
    for letter in args.sections:
        key, run = sections[letter]
        t0 = time.perf_counter()
        print(f"\n{letter}. {key} ...", flush=True)
        try:
            results[key] = run()
        except Exception as exc:  # a crashed section is a FAIL with its traceback
            results[key] = {
                "pass": False,
                "crashed": f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}",
            }
        results[key]["seconds"] = time.perf_counter() - t0
        print_details(key, results[key])
        print(f"   {'PASS' if results[key]['pass'] else 'FAIL'} in {results[key]['seconds']:.1f} s")
    passed = all(r["pass"] for r in results.values())
    rows = summary_rows(results)
    width = max(len(r[0]) for r in rows) if rows else 10
    print(f"\nreliability on {name}, {time.perf_counter() - started:.0f} s"
          f"{' (--quick)' if args.quick else ''}")  # fmt: skip
    for section, verdict, text in rows:
        print(f"  {section:<{width}}  {verdict}  {text}")
    print(f"overall: {'PASS' if passed else 'FAIL'}")
    if args.json:
        payload = {"device": name, "compute_capability": list(capability), "quick": args.quick,
                   "seed": args.seed, "pass": passed, "sections": results}  # fmt: skip
        args.json.write_text(json.dumps(payload, indent=1, default=str))
        print(f"wrote {args.json}")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
