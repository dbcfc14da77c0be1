#!/usr/bin/env python3
"""The eager host cost of ``MoeGemmPlan.run`` on each CPU core (issue #17's host target).

Session 13's decode table measured the same int-pointer ``run()`` at 5.6-6.4 µs in some
rows and 7.7-10.9 µs in others, in phases of consecutive rows, and the torch-tensor call
at 10.6-13 vs 16-19 µs. This sweep pins the process to one core at a time and times, per
core and round:

  python µs     a fixed pure-Python loop: how fast that core runs the interpreter
  reads µs      the attribute reads TorchOperands makes of one CUDA tensor (is_cuda,
                dtype, get_device, is_contiguous, shape, data_ptr)
  run ptr µs    run() handed int pointers (median of CALLS; the GPU drained every DRAIN
                calls, so the launch queue never fills and no call waits for room)
  run torch µs  run() handed torch tensors (six operands)

ROUNDS sweeps in a row show whether a core keeps its speed over time.

    PYTHONPATH=. python bench/host_cores.py [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import PROBE_LOOPS, python_probe_us, random_scales  # noqa: E402

from nvfp4_aot.moe import MoeGemmPlan  # noqa: E402

EXPERTS, N, K, TOKENS, TOP_K = 128, 2048, 768, 8, 8  # a decode row of issue #17's table
CALLS, DRAIN, ROUNDS, POOL = 200, 8, 3, 8
SLOW = 1.25  # a core's Python loop this much slower than the fastest seen: that core slowed


def reads_us(tensor) -> float:
    """Median µs of one tensor's attribute reads (TorchOperands.pointers' per-operand work)."""
    times, clock = [], time.perf_counter
    for _ in range(CALLS):
        before = clock()
        _ = (tensor.is_cuda, tensor.dtype, tensor.get_device(), tensor.is_contiguous(),
             tensor.shape, tensor.data_ptr())  # fmt: skip
        times.append((clock() - before) * 1e6)
    return statistics.median(times)


def run_us(plan, operands, routings, stream: int) -> float:
    """Median µs of plan.run() on the host, the GPU drained every DRAIN calls."""
    for i in range(3):
        plan.run(*operands, routings[i % POOL], stream=stream)
    torch.cuda.synchronize()
    times, clock = [], time.perf_counter
    for first in range(0, CALLS, DRAIN):
        for i in range(first, first + DRAIN):
            before = clock()
            plan.run(*operands, routings[i % POOL], stream=stream)
            times.append((clock() - before) * 1e6)
        torch.cuda.synchronize()
    return statistics.median(times)


def make_case(device):
    rows = TOKENS * TOP_K
    plan = MoeGemmPlan(EXPERTS, N, K, layout="contiguous", capacity=rows, device=device.index)
    needs = plan.layout.operand_bytes()
    u8 = torch.uint8
    tensors = (
        torch.randint(0, 256, (rows, K // 2), dtype=u8, device=device),
        torch.randint(0, 256, (EXPERTS, N, K // 2), dtype=u8, device=device),
        torch.empty(rows, N, dtype=torch.float16, device=device),
        random_scales(needs["sfa"], device),
        random_scales(needs["sfb"], device),
    )
    routings = []
    for i in range(POOL):  # TOP_K rows to each of TOKENS experts, a different set each
        counts = torch.zeros(EXPERTS, dtype=torch.int32)
        counts[torch.randperm(EXPERTS, generator=torch.Generator().manual_seed(i))[:TOKENS]] = TOP_K
        offsets = torch.zeros(EXPERTS + 1, dtype=torch.int32)
        offsets[1:] = torch.cumsum(counts, 0)
        routings.append(offsets.to(device))
    return plan, tensors, routings


def sweep(device) -> dict:
    allowed = sorted(os.sched_getaffinity(0))
    plan, tensors, routings = make_case(device)
    pointers = [t.data_ptr() for t in tensors]
    routing_pointers = [r.data_ptr() for r in routings]
    stream = torch.cuda.current_stream(device).cuda_stream
    rows = []
    print(f"# {torch.cuda.get_device_name(device)}: CPUs {allowed}; "
          f"E = {EXPERTS}, (n, k) = ({N}, {K}), {TOKENS} tokens, top-{TOP_K}", flush=True)  # fmt: skip
    print("| round | cpu | python µs | reads µs | run ptr µs | run torch µs |")
    print("| --- | --- | --- | --- | --- | --- |")
    try:
        for round_ in range(ROUNDS):
            for cpu in allowed:
                os.sched_setaffinity(0, {cpu})
                time.sleep(0.005)
                row = {"round": round_, "cpu": cpu, "python_us": python_probe_us(4 * PROBE_LOOPS),
                       "reads_us": reads_us(tensors[0]),
                       "run_ptr_us": run_us(plan, pointers, routing_pointers, stream),
                       "run_torch_us": run_us(plan, tensors, routings, stream)}  # fmt: skip
                rows.append(row)
                print(f"| {round_} | {cpu} | {row['python_us']:.0f} | {row['reads_us']:.2f} | "
                      f"{row['run_ptr_us']:.1f} | {row['run_torch_us']:.1f} |", flush=True)  # fmt: skip
    finally:
        os.sched_setaffinity(0, allowed)
        plan.close()
    return {"cpus": allowed, "rows": rows}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    result = sweep(torch.device("cuda", 0))
    fastest = min(row["python_us"] for row in result["rows"])
    for name, keep in (("full speed (python <=", lambda us: us <= SLOW * fastest),
                       ("slowed (python >", lambda us: us > SLOW * fastest)):  # fmt: skip
        rows = [row for row in result["rows"] if keep(row["python_us"])]
        if rows:
            med = {key: statistics.median(r[key] for r in rows)
                   for key in ("python_us", "run_ptr_us", "run_torch_us")}  # fmt: skip
            print(f"{name} {SLOW:g} x the fastest, {fastest:.0f} µs), "
                  f"{len(rows)} samples: python {med['python_us']:.0f} µs, run ptr "
                  f"{med['run_ptr_us']:.1f} µs, run torch {med['run_torch_us']:.1f} µs")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
