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

Exits 1 if any group's relative error exceeds 1e-3 or its output is not finite.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

import nvfp4_aot
from nvfp4_aot.layouts import random_problem
from nvfp4_aot.reference import reference_gemm, relative_error

TOLERANCE = 1e-3
SIZES = [(128, 256, 512), (40, 128, 256), (257, 96, 288), (1, 32, 32), (300, 512, 1024)]


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
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
