#!/usr/bin/env python3
"""Host cost of our JAX FFI handler's call, on CPU; prints a table.

On the H200 a jitted call of the MoE GEMM costs 64-92 µs of host time, of which XLA's
custom-call mechanism takes 13-32 and our handler the rest (bench/bench_jax.py's split,
session 26); session 27's profile of that call (docs/h200/session27/) had the call
frame's decoding as the largest piece of our prologue. This times the handler's pieces
on a hand-built call frame (tests/fake_xla.py; XLA's API entries there are Python
callbacks, dearer than XLA's C functions) against the fake driver
(tests/fake_driver.py), with the plan's launch stubbed (the launcher's cost is
bench/host_path.py's on a GPU):

  read_frame         decode the frame: 6 arguments and 1 result
  stream query       XLA_FFI_Stream_Get through the cached entry point
  device query       XLA_FFI_DeviceOrdinal_Get likewise
  plan key           the call's layout, operands and plan key from the decoded frame
  handler call       the whole handler up to the launch (the above, the plan lookup,
                     MoeGemmPlan.run's checks and table lookup)
  string_at read     one ctypes.string_at + unpack of a buffer struct: how each of the
                     frame's 11-13 reads was made before session 27 (for comparison)

    PYTHONPATH=. python bench/host_jax_call.py [--rounds 5] [--json FILE]
"""

from __future__ import annotations

import argparse
import ctypes
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

from host_operands import per_call_us  # noqa: E402

from fake_xla import moe_frame  # noqa: E402
from nvfp4_aot.jax import handler, xla_ffi  # noqa: E402
from support import installed_h200  # noqa: E402


def cases(frame, address: int) -> dict:
    read = xla_ffi.read_frame(address)
    buffer = ctypes.cast(frame.frame.args.args[0], ctypes.c_void_p).value
    unpack, string_at = xla_ffi._BUFFER.unpack, ctypes.string_at

    def plan_key():
        layout, ops, alpha, c, _ = handler._decode(read)
        handler._plan_key(0, layout, ops, c, alpha is not None)

    return {
        "read_frame": lambda: xla_ffi.read_frame(address),
        "stream query": lambda: xla_ffi.stream(read),
        "device query": lambda: xla_ffi.device_ordinal(read),
        "plan key": plan_key,
        "handler call": lambda: handler._execute_cuda(address),
        "string_at read": lambda: unpack(string_at(buffer, xla_ffi._BUFFER.size)),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds (median)")
    parser.add_argument("--reps", type=int, default=2000, help="calls per timed batch")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    frame, _pointers = moe_frame()
    address = ctypes.addressof(frame.frame)
    saved = dict(handler._plans)
    handler._plans.clear()
    results: dict[str, list[float]] = {}
    try:
        with installed_h200():
            if handler._execute_cuda(address) is not None:  # makes the plan
                raise SystemExit(f"the handler failed: {frame.errors}")
            (plan,) = handler.plans()
            plan._launcher.launch = lambda table, stream, producers=(): None
            timed = cases(frame, address)
            for _ in range(args.rounds):  # alternate pieces so that drift hits them alike
                for name, fn in timed.items():
                    us = per_call_us(fn, args.reps, clock=time.thread_time)  # a shared box
                    results.setdefault(name, []).append(us)
            handler.release_plans()
    finally:
        handler._plans.update(saved)
    table = {name: statistics.median(v) for name, v in results.items()}
    print(f"µs (thread CPU time) per call, median of {args.rounds} rounds")
    for name, us in table.items():
        print(f"{name:<16}{us:>8.2f}")
    if args.json:
        args.json.write_text(json.dumps({"us": table, "raw": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
