"""CuPy: CuPy arrays in, a CuPy array out, on a CuPy stream.

What this example calls::

    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:                    # allocations, fills and the interface's stream
        a = [cupy.asarray(p.a) for p in problems]  # uint8 (m, k/2), packed FP4
        b = [cupy.asarray(p.b) ...]                # uint8 (n, k/2)
        sfa = [cupy.asarray(p.sfa_blocked) ...]    # uint8, blocked E4M3 scales
        sfb = [cupy.asarray(p.sfb_blocked) ...]
        c = [cupy.full((m, n), cupy.nan, cupy.float16) ...]   # poisoned output
        plan = nvfp4_aot.GroupedGemmPlan([(m, n, k), ...], device=0)
        plan.run(a, b, c, sfa, sfb, stream=stream)     # also accepts stream.ptr
    stream.synchronize()

CuPy arrays are read through ``__cuda_array_interface__`` (version 3): the runtime
checks dtype, shape, contiguity and device, and when an array reports a producer stream
other than the launch stream it makes the launch stream wait for it. CuPy reports the
stream that is current when the interface is read, so running inside ``with stream:``
(as here) enqueues nothing extra; outside it, the launch would first wait for CuPy's
current stream. A second run with the same arrays reuses the plan's uploaded pointer
table (no copy at all).
``nvfp4_aot.grouped_gemm(a, b, c, sfa, sfb, stream=stream)`` does the same through a
cached plan, with the problem sizes taken from the shapes of A and B.

Then a mixture-of-experts call, the routing on the GPU (``nvfp4_aot/moe.py``, contiguous
layout): one plan for E experts and up to ``capacity`` routed tokens, any routing::

    plan = nvfp4_aot.MoeGemmPlan(E, n, k, layout="contiguous", capacity=T, device=0)
    a = cupy.asarray(...)             # uint8 (T, k/2): expert e's tokens at rows
                                      #   offsets[e] .. offsets[e+1]
    b = cupy.asarray(...)             # uint8 (E, n, k/2), sfb E x blocked_scale_bytes(n, k)
    sfa = cupy.asarray(...)           # blocked scales, expert e's from row
                                      #   scale_offsets(counts)[e] (128-row segments)
    offsets = cupy.asarray(...)       # int32 (E + 1,), read on the GPU only
    c = cupy.full((T, n), cupy.nan, cupy.float16)
    plan.run(a, b, c, sfa, sfb, offsets, stream=stream)

A new routing is new contents of ``offsets`` and ``sfa`` (here from
``nvfp4_aot.moe_data.MoeProblem``); the same plan runs it, without reading it on the host.

Exits 1 if any group's or expert's relative error exceeds 1e-3 or its output is not
finite, or if a MoE run wrote a row no expert owns.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

import nvfp4_aot
from nvfp4_aot.layouts import random_problem
from nvfp4_aot.moe_data import MoeProblem, random_counts
from nvfp4_aot.reference import reference_gemm, relative_error

TOLERANCE = 1e-3
SIZES = [(128, 256, 512), (40, 128, 256), (257, 96, 288), (1, 32, 32), (300, 512, 1024)]
MOE = dict(experts=40, n=256, k=512, capacity=1000)  # contiguous layout


def moe_contiguous(device: int, rng) -> int:
    """Two routings through one MoE plan; returns the number of failures."""
    import cupy

    e, n, k, capacity = MOE["experts"], MOE["n"], MOE["k"], MOE["capacity"]
    problem = MoeProblem(e, n, k, "contiguous", capacity, rng)
    routings = [  # a few popular experts (most empty), then every token to one expert
        problem.routing(random_counts("sparse", e, capacity, rng)),
        problem.routing(random_counts("one_expert", e, capacity - 1, rng)),
    ]
    failures = 0
    with cupy.cuda.Device(device):
        stream = cupy.cuda.Stream(non_blocking=True)
        plan = nvfp4_aot.MoeGemmPlan(e, n, k, layout="contiguous", capacity=capacity,
                                     device=device)  # fmt: skip
        with stream, plan:
            a = cupy.asarray(problem.a)
            b = cupy.asarray(problem.b).reshape(e, n, k // 2)
            sfb = cupy.asarray(problem.sfb)
            sfa = cupy.zeros(routings[0].sfa.size, dtype=cupy.uint8)
            offsets = cupy.zeros(e + 1, dtype=cupy.int32)
            c = cupy.empty((capacity, n), dtype=cupy.float16)
            for i, routing in enumerate(routings):
                offsets.set(routing.routing, stream=stream)  # a router would write these
                sfa.set(routing.sfa, stream=stream)
                c.fill(cupy.nan)
                plan.run(a, b, c, sfa, sfb, offsets, stream=stream)
                host = c.get(stream=stream)  # waits for the stream
                bad = []
                for expert, (start, stop) in enumerate(routing.row_ranges):
                    if stop > start:
                        error = relative_error(host[start:stop], problem.reference(routing, expert))
                        if not error <= TOLERANCE:
                            bad.append(f"expert {expert}: rel err {error:.2e}")
                routed = int(routing.routing[-1])
                if not np.isnan(host[routed:]).all():
                    bad.append(f"rows {routed}.. (no expert's) were written")
                active = int((routing.counts > 0).sum())
                print(f"  MoE routing {i}: {routed} tokens to {active}/{e} experts: "
                      + ("ok" if not bad else "MISMATCH " + "; ".join(bad)))  # fmt: skip
                failures += bool(bad)
            print(f"cupy: {plan!r}")
    return failures


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", type=int, default=0, help="CUDA device ordinal")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random problems")
    args = parser.parse_args(argv)

    import cupy

    rng = np.random.default_rng(args.seed)
    problems = [random_problem(m, n, k, rng) for m, n, k in SIZES]

    with cupy.cuda.Device(args.device):
        stream = cupy.cuda.Stream(non_blocking=True)
        with stream, nvfp4_aot.GroupedGemmPlan(SIZES, device=args.device) as plan:
            a = [cupy.asarray(p.a) for p in problems]
            b = [cupy.asarray(p.b) for p in problems]
            sfa = [cupy.asarray(p.sfa_blocked) for p in problems]
            sfb = [cupy.asarray(p.sfb_blocked) for p in problems]
            c = [cupy.full((p.m, p.n), cupy.nan, dtype=cupy.float16) for p in problems]
            plan.run(a, b, c, sfa, sfb, stream=stream)
            # again after re-poisoning C: the plan reuses its uploaded pointer table
            for out in c:
                out.fill(cupy.nan)
            plan.run(a, b, c, sfa, sfb, stream=stream)
            stream.synchronize()
            print(f"cupy {cupy.__version__}: {plan!r}")

        failures = 0
        for g, (p, out) in enumerate(zip(problems, c)):
            host = out.get()
            error = relative_error(host, reference_gemm(p))
            ok = bool(np.isfinite(host).all()) and error <= TOLERANCE
            failures += not ok
            print(f"  group {g} (m={p.m}, n={p.n}, k={p.k}): rel err {error:.2e} "
                  f"{'ok' if ok else 'MISMATCH'}")  # fmt: skip

    print(f"{len(problems) - failures}/{len(problems)} groups match the float64 reference")
    moe_failures = moe_contiguous(args.device, rng)
    print(f"MoE contiguous: {2 - moe_failures}/2 routings match the float64 reference")
    return 1 if failures or moe_failures else 0


if __name__ == "__main__":
    sys.exit(main())
