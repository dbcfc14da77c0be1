#!/usr/bin/env python3
"""Host cost of an eager ``MoeGemmPlan.run`` before the launch, on CPU; prints a table.

Issue #17 item 2: ``run`` handed torch CUDA tensors must cost <= 15 µs of host time per
call whatever E. ``bench/bench_decode.py`` hands it the same five tensors and a routing
tensor taken from a pool (``EAGER_POOL``) each step, so the operand set differs from the
previous call's. This measures what ``run`` does on the host up to the launch (the
launcher's ``launch`` is a no-op here; it is the same for every kind of operand), per E,
for operands that are

  same     the same six tensors every call
  pool8    a routing tensor from a pool of 8 each call (bench_decode.py's EAGER_POOL;
           rows of one int32 tensor, as there)
  pool256  a routing from a pool of 256: more operand sets than the plan's checked
           tables keep, so each call also checks and packs a table

each as torch tensors and as int pointers (``data_ptr()``, what torch_ops passes).
Tensors are torch CPU tensors with ``torch.Tensor.is_cuda`` / ``get_device`` replaced by
Python stand-ins saying CUDA device 0 (bench/host_operands.py's ``looking_like_cuda``;
a little dearer than torch's C getters); the driver is tests/fake_driver.py's.

    PYTHONPATH=. python bench/host_moe_run.py [--experts 8 128 256] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "bench"))
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import torch  # noqa: E402
from host_operands import looking_like_cuda, per_call_us  # noqa: E402

from fake_driver import FakeDriver, installed  # noqa: E402
from nvfp4_aot import loader  # noqa: E402
from nvfp4_aot.moe import MoeGemmPlan  # noqa: E402
from support import kernel_params_of  # noqa: E402

N, K, TOKENS = 256, 512, 64  # small: the host cost does not depend on n, k or tokens
POOLS = {"same": 1, "pool8": 8, "pool256": 256}


def operands(plan: MoeGemmPlan, pool: int):
    """(a, b, c, sfa, sfb) and ``pool`` routings (rows of one int32 tensor)."""
    e, cap = plan.experts, plan.capacity
    need = plan.layout.operand_bytes()
    fixed = (
        torch.zeros(cap, K // 2, dtype=torch.uint8),
        torch.zeros(e, N, K // 2, dtype=torch.uint8),
        torch.zeros(cap, N, dtype=torch.float16),
        torch.zeros(need["sfa"], dtype=torch.uint8),
        torch.zeros(need["sfb"], dtype=torch.uint8),
    )
    sample = torch.zeros(pool, e + 1, dtype=torch.int32)
    return fixed, [sample[i] for i in range(pool)]


def measure(plan: MoeGemmPlan, fixed, routings, reps: int) -> float:
    count = len(routings)
    state = [0]
    run = plan.run

    def call():
        i = state[0]
        state[0] = i + 1
        run(*fixed, routings[i % count], stream=7)

    # CPU time of this thread: the dev box is shared and noisy
    return per_call_us(call, reps, clock=time.thread_time)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experts", type=int, nargs="+", default=[8, 128, 256])
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds (median)")
    parser.add_argument("--reps", type=int, default=400, help="calls per timed batch")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    fake = FakeDriver(capability=(9, 0), kernel_params=kernel_params_of(loader.load_manifest()))
    undo = looking_like_cuda()
    results: dict[str, dict[str, list[float]]] = {}
    try:
        with installed(fake):
            plans, cases = {}, []
            for e in args.experts:
                plan = plans[e] = MoeGemmPlan(e, N, K, capacity=TOKENS)
                plan._launcher.launch = lambda table, stream, producers=(): None
                for pool_name, pool in POOLS.items():
                    fixed, routings = operands(plan, pool)
                    pointers = [t.data_ptr() for t in fixed]
                    addresses = [t.data_ptr() for t in routings]
                    cases.append((e, f"{pool_name} torch", plan, fixed, routings))
                    cases.append((e, f"{pool_name} int", plan, pointers, addresses))
            for _ in range(args.rounds):  # alternate cases so that drift hits them alike
                for e, name, plan, fixed, routings in cases:
                    us = measure(plan, fixed, routings, args.reps)
                    results.setdefault(name, {}).setdefault(str(e), []).append(us)
            for plan in plans.values():
                plan.close()
    finally:
        undo()
    table = {
        name: {e: statistics.median(v) for e, v in per_e.items()} for name, per_e in results.items()
    }
    print(
        f"µs (thread CPU time) per MoeGemmPlan.run before the launch, median of {args.rounds} rounds"
    )
    print(f"{'operands':<16}" + "".join(f"{'E=' + str(e):>10}" for e in args.experts))
    for name, per_e in table.items():
        print(f"{name:<16}" + "".join(f"{per_e[str(e)]:>10.2f}" for e in args.experts))
    if args.json:
        args.json.write_text(json.dumps({"front_us": table, "raw": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
