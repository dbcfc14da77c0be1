#!/usr/bin/env python3
"""nvfp4-aot on several GPUs of one host: one host thread and one plan per device.

1. Check: on every device at once, a thread with its own plan runs random grouped GEMMs
   (``nvfp4_aot.layouts.random_problem``, inputs in ``nvfp4_aot.driver`` allocations,
   C poisoned with NaN first) and compares every group with the float64 reference
   (``nvfp4_aot.reference``): finite and relative error <= 1e-3.
2. Throughput on the same timing shapes in the same run: the first device alone, then
   every device concurrently (threads released together by a barrier). Each device times
   its own launches with CUDA events on its own stream; the table gives TFLOP/s per
   device, the total and the scaling against N x the single GPU. Outputs of the timing
   runs are checked to be finite.

Runs with a single GPU too (then it says that scaling across GPUs was not measured).
Nothing here talks between GPUs: no NCCL, no peer access, no multicast objects.

    python bench/multi_gpu.py [--devices 0,1] [--groups 8] [--shape 2048,7168,4096]
                              [--iters 200] [--json FILE]

Exit status 0 when every check passes, 1 otherwise.
"""

from __future__ import annotations

import os

# NVLink SHARP / multicast stays off on the lent multi-GPU machines (KINDS.md): set
# before anything can load NCCL, NVSHMEM or torch. This script creates no multicast
# objects itself (no cuMulticast*), the settings guard whatever else gets imported.
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
os.environ.setdefault("NVSHMEM_DISABLE_NVLS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from nvfp4_aot import driver, validation  # noqa: E402
from nvfp4_aot.device_data import DeviceOperands  # noqa: E402
from nvfp4_aot.layouts import e4m3_to_float, random_problem  # noqa: E402
from nvfp4_aot.plan import GroupedGemmPlan  # noqa: E402
from nvfp4_aot.reference import reference_gemm, relative_error  # noqa: E402

TOLERANCE = 1e-3
POISON = 0x7E00  # FP16 NaN: an unwritten element never passes the check
# small enough for a float64 reference on the host in seconds, with ragged m
CHECK_SHAPES = [(96, 128, 256), (256, 512, 512), (384, 256, 1024), (128, 1024, 256)]


# ---------------------------------------------------------------------------------------
# device data (allocated with the device's context current: call from its thread)


def timing_arrays(sizes, rng: np.random.Generator):
    """Cheap timing inputs: random bytes are uniform FP4 codes; scales in [0.25, 4]."""
    values = e4m3_to_float(np.arange(128, dtype=np.uint8))
    codes = np.arange(128, dtype=np.uint8)[(values >= 0.25) & (values <= 4.0)]
    arrays = []
    for m, n, k in sizes:
        b = validation.operand_bytes(m, n, k)
        arrays.append(
            (
                rng.integers(0, 256, size=b["a"], dtype=np.uint8),
                rng.integers(0, 256, size=b["b"], dtype=np.uint8),
                rng.choice(codes, size=b["sfa"]),
                rng.choice(codes, size=b["sfb"]),
            )
        )
    return arrays


def flops(sizes) -> int:
    return sum(2 * m * n * k for m, n, k in sizes)


# ---------------------------------------------------------------------------------------
# per-device threads


def run_threads(target, devices, *args) -> dict[int, dict]:
    """``target(device, out, barrier, *args)`` in one thread per device, started
    together; returns each device's record (``error`` set where it raised)."""
    out: dict[int, dict] = {d: {"device": d, "error": None} for d in devices}
    barrier = threading.Barrier(len(devices))

    def body(device):
        try:
            driver.activate(device)
            target(device, out[device], barrier, *args)
        except BaseException as exc:  # reported in the record, the run goes on
            out[device]["error"] = f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"
            barrier.abort()

    threads = [threading.Thread(target=body, args=(d,), name=f"gpu{d}") for d in devices]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def check_worker(device, record, barrier, rounds: int, seed: int) -> None:
    rng = np.random.default_rng([seed, device])
    stream = driver.stream_create()
    record.update(checked=0, worst=0.0, failures=[])
    try:
        with GroupedGemmPlan(CHECK_SHAPES, device, ring_slots=4) as plan:
            record["variants"] = [v.name for v in plan.variants]
            barrier.wait()
            for r in range(rounds):
                problems = [random_problem(m, n, k, rng) for m, n, k in CHECK_SHAPES]
                data = DeviceOperands(
                    CHECK_SHAPES, [(p.a, p.b, p.sfa_blocked, p.sfb_blocked) for p in problems]
                )
                try:
                    data.poison_c(POISON, stream)
                    plan.run(*data.columns, stream=stream)
                    driver.stream_synchronize(stream)
                    for g, p in enumerate(problems):
                        error = relative_error(data.c(g), reference_gemm(p))
                        record["checked"] += 1
                        record["worst"] = max(record["worst"], error)
                        if not error <= TOLERANCE:
                            record["failures"].append({"round": r, "group": g, "error": error})
                finally:
                    data.free()
    finally:
        driver.stream_destroy(stream)


def time_worker(device, record, barrier, sizes, iters: int, warmup: int, seed: int) -> None:
    rng = np.random.default_rng([seed, 1000 + device])
    stream = driver.stream_create()
    start, end = driver.timing_event_create(), driver.timing_event_create()
    data = DeviceOperands(sizes, timing_arrays(sizes, rng))
    try:
        with GroupedGemmPlan(sizes, device) as plan:
            record["variants"] = [v.name for v in plan.variants]
            data.poison_c(POISON, stream)
            for _ in range(warmup):
                plan.run(*data.columns, stream=stream)
            driver.stream_synchronize(stream)
            barrier.wait()  # every device starts its timed launches together
            record["host_start"] = time.perf_counter()
            driver.event_record(start, stream)
            for _ in range(iters):
                plan.run(*data.columns, stream=stream)
            driver.event_record(end, stream)
            driver.event_synchronize(end)
            record["host_end"] = time.perf_counter()
            ms = driver.event_elapsed_ms(start, end)
            record["ms_per_launch"] = ms / iters
            record["tflops"] = flops(sizes) * iters / (ms * 1e-3) / 1e12
            record["finite"] = all(bool(np.isfinite(data.c(g)).all()) for g in range(len(sizes)))
    finally:
        data.free()
        driver.event_destroy(start)
        driver.event_destroy(end)
        driver.stream_destroy(stream)


# ---------------------------------------------------------------------------------------


def parse_shape(text: str) -> tuple[int, int, int]:
    try:
        m, n, k = (int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected m,n,k, got {text!r}") from None
    return m, n, k


def table(headers, rows) -> str:
    text = [[str(h) for h in headers]] + [[str(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in text) for i in range(len(headers))]
    lines = ["  ".join(cell.rjust(w) for cell, w in zip(row, widths)) for row in text]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--devices", help="comma-separated ordinals (default: every GPU)")
    parser.add_argument("--shape", type=parse_shape, action="append",
                        help="timing shape m,n,k (repeatable; default 2048,7168,4096)")  # fmt: skip
    parser.add_argument("--groups", type=int, default=8, help="groups per --shape (default 8)")
    parser.add_argument("--iters", type=int, default=200, help="timed launches per device")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--check-rounds", type=int, default=3,
                        help="random input sets checked per device")  # fmt: skip
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    args = parser.parse_args(argv)

    count = driver.device_count()
    devices = [int(d) for d in args.devices.split(",")] if args.devices else list(range(count))
    if not devices or any(not 0 <= d < count for d in devices):
        parser.error(f"--devices must name GPUs in 0..{count - 1}, got {devices}")
    sizes = [s for s in (args.shape or [(2048, 7168, 4096)]) for _ in range(args.groups)]
    for d in devices:
        print(f"[{d}] {driver.device_name(d)}, compute capability "
              f"{'.'.join(map(str, driver.compute_capability(d)))}")  # fmt: skip
    if len(devices) == 1:
        print("only one GPU: every phase runs on it, scaling across GPUs is NOT measured")
    print("environment: " + ", ".join(
        f"{k}={os.environ[k]}" for k in
        ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS")))  # fmt: skip

    ok = True
    # 1. correctness on every device concurrently
    checks = run_threads(check_worker, devices, args.check_rounds, args.seed)
    rows = []
    for d in devices:
        r = checks[d]
        passed = r["error"] is None and not r.get("failures") and r.get("checked", 0) > 0
        ok &= passed
        rows.append([d, r.get("checked", 0), f"{r.get('worst', float('nan')):.2e}",
                     "PASS" if passed else "FAIL"])  # fmt: skip
        if r["error"]:
            print(f"device {d} check: {r['error']}", file=sys.stderr)
    print(f"\ncheck: {args.check_rounds} random sets of {len(CHECK_SHAPES)} groups per device, "
          f"all devices at once (tol {TOLERANCE:g})")  # fmt: skip
    print(table(["device", "groups checked", "worst rel err", "result"], rows))

    # 2. throughput: the first device alone, then every device at once
    timing_args = (sizes, args.iters, args.warmup, args.seed)
    single = run_threads(time_worker, devices[:1], *timing_args)
    together = run_threads(time_worker, devices, *timing_args)
    results = {"single": single, "concurrent": together}
    rows = []
    for mode, records in results.items():
        for d, r in records.items():
            good = r["error"] is None and r.get("finite", False)
            ok &= good
            if r["error"]:
                print(f"device {d} {mode}: {r['error']}", file=sys.stderr)
            rows.append([mode, d, f"{r.get('tflops', float('nan')):.1f}",
                         f"{r.get('ms_per_launch', float('nan')) * 1e3:.1f}",
                         "ok" if good else "FAIL"])  # fmt: skip
    single_tflops = single[devices[0]].get("tflops", float("nan"))
    total = sum(r.get("tflops", float("nan")) for r in together.values())
    window = max(r.get("host_end", 0) for r in together.values()) - min(
        r.get("host_start", 0) for r in together.values()
    )
    wall_tflops = flops(sizes) * args.iters * len(devices) / window / 1e12 if window > 0 else 0
    scaling = total / (single_tflops * len(devices))
    rows.append(["concurrent", "total", f"{total:.1f}", "", f"{scaling:.0%} of {len(devices)}x1"])
    print(f"\nthroughput: {len(sizes)} groups {sorted(set(sizes))}, {flops(sizes) / 1e9:.1f} "
          f"GFLOP per launch, {args.iters} launches per device (CUDA events per device)")  # fmt: skip
    print(table(["mode", "device", "TFLOP/s", "us/launch", "result"], rows))
    print(f"concurrent, host wall clock over all devices: {wall_tflops:.1f} TFLOP/s")
    if len(devices) == 1:
        print("(single GPU: 'concurrent' is the same GPU again, not a scaling measurement)")
    print("\nPASS" if ok else "\nFAIL")

    if args.json:
        data = {
            "devices": devices,
            "device_names": [driver.device_name(d) for d in devices],
            "multi_gpu_measured": len(devices) > 1,
            "timing_sizes": sizes,
            "iters": args.iters,
            "check": checks,
            "single": single,
            "concurrent": together,
            "concurrent_total_tflops": total,
            "concurrent_wall_tflops": wall_tflops,
            "scaling_vs_single": scaling,
            "passed": ok,
            "environment": {
                k: os.environ[k]
                for k in (
                    "NCCL_NVLS_ENABLE",
                    "TORCH_SYMM_MEM_DISABLE_MULTICAST",
                    "NVSHMEM_DISABLE_NVLS",
                )
            },
        }
        Path(args.json).write_text(json.dumps(data, indent=2, default=str) + "\n")
        print(f"wrote {args.json}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
