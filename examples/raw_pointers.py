"""Raw CUDA: device memory from ``cuda.bindings`` and int pointers, no array library.

What this example calls, in order::

    from cuda.bindings import driver as cu
    cu.cuInit(0); ctx = cu.cuDevicePrimaryCtxRetain(dev); cu.cuCtxSetCurrent(ctx)
    ptr = cu.cuMemAlloc(nbytes)                  # one buffer per operand per group
    cu.cuMemcpyHtoD(ptr, host.ctypes.data, nbytes)
    stream = cu.cuStreamCreate(1)                # CU_STREAM_NON_BLOCKING
    cu.cuMemsetD16Async(c_ptr, 0xFFFF, m * n, stream)   # poison C with FP16 NaN
    plan = nvfp4_aot.GroupedGemmPlan([(m, n, k), ...], device=dev)
    plan.run(a_ptrs, b_ptrs, c_ptrs, sfa_ptrs, sfb_ptrs, stream=stream)
    cu.cuStreamSynchronize(stream); cu.cuMemcpyDtoH(host_c.ctypes.data, c_ptr, nbytes)

Each of ``a_ptrs`` ... ``sfb_ptrs`` is a list of ``int`` device addresses, one per group
(32-byte aligned; ``cuMemAlloc`` gives 256). With raw pointers the runtime cannot see
shapes, so it trusts the sizes the plan was built with: A is (m, k/2) bytes of packed
FP4, B is (n, k/2), C is (m, n) float16, SFA/SFB are ``blocked_scale_bytes(rows, k)``
bytes of E4M3 scales in the blocked layout (``nvfp4_aot.layouts.scales_to_blocked``).
The stream may be a ``CUstream`` (as here), an int handle or None (legacy default).

The runtime uses the device's primary context, which is the one made current here.
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
SIZES = [(128, 256, 512), (1, 32, 32), (200, 96, 288), (64, 128, 7168), (300, 512, 256)]


def check(result):
    """Unpack a cuda.bindings result tuple; raise with the CUresult name on failure."""
    from cuda.bindings import driver as cu

    status, *values = result
    if status != cu.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"CUDA driver call failed: {status.name}")
    return values[0] if len(values) == 1 else tuple(values) or None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", type=int, default=0, help="CUDA device ordinal")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random problems")
    args = parser.parse_args(argv)

    from cuda.bindings import driver as cu

    rng = np.random.default_rng(args.seed)
    problems = [random_problem(m, n, k, rng) for m, n, k in SIZES]

    check(cu.cuInit(0))
    context = check(cu.cuDevicePrimaryCtxRetain(check(cu.cuDeviceGet(args.device))))
    check(cu.cuCtxSetCurrent(context))
    stream = check(cu.cuStreamCreate(1))  # CU_STREAM_NON_BLOCKING
    allocations = []

    def upload(host: np.ndarray) -> int:
        pointer = check(cu.cuMemAlloc(host.nbytes))
        allocations.append(pointer)
        check(cu.cuMemcpyHtoD(pointer, host.ctypes.data, host.nbytes))
        return int(pointer)

    try:
        a = [upload(p.a) for p in problems]
        b = [upload(p.b) for p in problems]
        sfa = [upload(p.sfa_blocked) for p in problems]
        sfb = [upload(p.sfb_blocked) for p in problems]
        c = []
        for p in problems:
            pointer = check(cu.cuMemAlloc(p.m * p.n * 2))
            allocations.append(pointer)
            check(cu.cuMemsetD16Async(pointer, 0xFFFF, p.m * p.n, stream))  # FP16 NaN
            c.append(int(pointer))

        with nvfp4_aot.GroupedGemmPlan(SIZES, device=args.device) as plan:
            plan.run(a, b, c, sfa, sfb, stream=stream)
            check(cu.cuStreamSynchronize(stream))
            print(f"raw pointers: {plan!r}")

        failures = 0
        for g, (p, pointer) in enumerate(zip(problems, c)):
            out = np.empty((p.m, p.n), dtype=np.float16)
            check(cu.cuMemcpyDtoH(out.ctypes.data, pointer, out.nbytes))
            error = relative_error(out, reference_gemm(p))
            ok = np.isfinite(out).all() and error <= TOLERANCE
            failures += not ok
            print(f"  group {g} (m={p.m}, n={p.n}, k={p.k}): rel err {error:.2e} "
                  f"{'ok' if ok else 'MISMATCH'}")  # fmt: skip
    finally:
        for pointer in allocations:
            check(cu.cuMemFree(pointer))
        check(cu.cuStreamDestroy(stream))
        check(cu.cuDevicePrimaryCtxRelease(check(cu.cuDeviceGet(args.device))))

    print(f"{len(problems) - failures}/{len(problems)} groups match the float64 reference")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
