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

Then the mixture-of-experts call with the routing on the GPU (contiguous layout,
``nvfp4_aot/moe.py``): ONE pointer per operand, whatever the routing::

    plan = nvfp4_aot.MoeGemmPlan(E, n, k, layout="contiguous", capacity=T, device=dev)
    plan.run(a, b, c, sfa, sfb, offsets, stream=stream)
    # a: T x k/2 bytes, expert e's tokens at rows offsets[e] .. offsets[e+1]
    # b: E x n x k/2 bytes; sfb: E x blocked_scale_bytes(n, k)
    # c: T x n float16; sfa: contiguous_scale_rows(T, E) x round_up(k/16, 4) bytes,
    #    expert e's blocked scales from row scale_offsets(counts)[e]
    # offsets: int32[E + 1] in device memory, read only by the GPU

A new routing is new contents at ``offsets`` and ``sfa`` (from
``nvfp4_aot.moe_data.MoeProblem`` here); the same plan runs it.

The runtime uses the device's primary context, which is the one made current here.
Exits 1 if any group's or expert's relative error exceeds 1e-3 or its output is not
finite, or if the MoE run wrote a row no expert owns.
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
SIZES = [(128, 256, 512), (1, 32, 32), (200, 96, 288), (64, 128, 7168), (300, 512, 256)]
MOE = (130, 128, 256, 700)  # experts (more than one launch holds), n, k, capacity T


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

        # MoE, contiguous layout: one pointer per operand, the routing on the device
        e, n, k, capacity = MOE
        moe = MoeProblem(e, n, k, "contiguous", capacity, rng)
        routing = moe.routing(random_counts("skewed", e, capacity - 37, rng))
        moe_a, moe_b, moe_sfb = upload(moe.a), upload(moe.b), upload(moe.sfb)
        moe_sfa, offsets = upload(routing.sfa), upload(routing.routing)  # a router's output
        moe_c = check(cu.cuMemAlloc(capacity * n * 2))
        allocations.append(moe_c)
        check(cu.cuMemsetD16Async(moe_c, 0xFFFF, capacity * n, stream))
        with nvfp4_aot.MoeGemmPlan(e, n, k, layout="contiguous", capacity=capacity,
                                   device=args.device) as plan:  # fmt: skip
            plan.run(moe_a, moe_b, int(moe_c), moe_sfa, moe_sfb, offsets, stream=stream)
            check(cu.cuStreamSynchronize(stream))
            print(f"raw pointers: {plan!r}")
        out = np.empty((capacity, n), dtype=np.float16)
        check(cu.cuMemcpyDtoH(out.ctypes.data, moe_c, out.nbytes))
        bad = []
        for expert, (start, stop) in enumerate(routing.row_ranges):
            if stop > start:
                error = relative_error(out[start:stop], moe.reference(routing, expert))
                if not error <= TOLERANCE:
                    bad.append(f"expert {expert}: rel err {error:.2e}")
        routed = int(routing.routing[-1])
        if not np.isnan(out[routed:]).all():
            bad.append(f"rows {routed}.. (no expert's) were written")
        active = int((routing.counts > 0).sum())
        print(f"  MoE: {routed} tokens to {active}/{e} experts: "
              + ("ok" if not bad else "MISMATCH " + "; ".join(bad)))  # fmt: skip
        moe_failures = int(bool(bad))
    finally:
        for pointer in allocations:
            check(cu.cuMemFree(pointer))
        check(cu.cuStreamDestroy(stream))
        check(cu.cuDevicePrimaryCtxRelease(check(cu.cuDeviceGet(args.device))))

    print(f"{len(problems) - failures}/{len(problems)} groups match the float64 reference")
    print(f"MoE contiguous: {1 - moe_failures}/1 routings match the float64 reference")
    return 1 if failures or moe_failures else 0


if __name__ == "__main__":
    sys.exit(main())
