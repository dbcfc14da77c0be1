"""JAX: JAX arrays in through DLPack, the output handed to JAX as a jax.Array.

What this example calls::

    a = [jax.device_put(p.a, gpu) ...]       # uint8 (m, k/2), packed FP4
    b = [jax.device_put(p.b, gpu) ...]       # uint8 (n, k/2)
    sfa = [jax.device_put(p.sfa_blocked, gpu) ...]   # uint8, blocked E4M3 scales
    sfb = [jax.device_put(p.sfb_blocked, gpu) ...]
    jax.block_until_ready((a, b, sfa, sfb))  # see "Inputs" below
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        c = [cupy.full((m, n), cupy.nan, cupy.float16) ...]  # output, poisoned
        nvfp4_aot.grouped_gemm(a, b, c, sfa, sfb, stream=stream)
    stream.synchronize()
    c_jax = [jax.dlpack.from_dlpack(x) for x in c]           # zero-copy jax.Array

Inputs. A jax.Array on a GPU offers both ``__cuda_array_interface__`` (version 2: the
address only, marked read-only, with no stream and no wait: JAX hands it out while the
computation producing the array may still be running on XLA's stream) and ``__dlpack__``
(``__dlpack__(stream=s)`` makes stream ``s`` wait until the data is ready). The runtime
reads the interface when present, so this example calls ``jax.block_until_ready`` on the
inputs before the launch; with that, either way of reading them is safe. The kernel only
reads them. ``grouped_gemm`` takes the problem sizes from the shapes of A and B and the
device from the arrays, and caches the plan.

The output. A jax.Array is immutable and JAX offers no writable device buffer: JAX's
documentation calls it undefined behaviour when a DLPack consumer writes into memory a
jax.Array owns (XLA may share, reuse or donate that buffer). So C is not allocated by
JAX. It is a buffer with another owner (CuPy here; a torch tensor or any DLPack producer
would do): the kernel writes it, the stream is synchronised, and only then is it handed to
JAX with ``jax.dlpack.from_dlpack``, which wraps the same memory without a copy (checked
below via ``unsafe_buffer_pointer``). From then on the buffer belongs to JAX's view of it
and nothing may write it again (JAX's ``from_dlpack`` documentation says the same).

JAX preallocates most of the GPU by default; this example sets
``XLA_PYTHON_CLIENT_PREALLOCATE=false`` (unless already set) so that CuPy can allocate too.
Exits 1 if any group's relative error exceeds 1e-3 or its output is not finite.
"""

from __future__ import annotations

import argparse
import os
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

    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    import cupy
    import jax
    import jax.numpy as jnp

    rng = np.random.default_rng(args.seed)
    problems = [random_problem(m, n, k, rng) for m, n, k in SIZES]
    gpus = [d for d in jax.devices("gpu") if d.local_hardware_id == args.device]
    if not gpus:
        print(f"JAX sees no GPU with hardware id {args.device}: {jax.devices()}")
        return 2
    gpu = gpus[0]

    a = [jax.device_put(p.a, gpu) for p in problems]
    b = [jax.device_put(p.b, gpu) for p in problems]
    sfa = [jax.device_put(p.sfa_blocked, gpu) for p in problems]
    sfb = [jax.device_put(p.sfb_blocked, gpu) for p in problems]
    jax.block_until_ready((a, b, sfa, sfb))  # the interface JAX exports carries no stream

    with cupy.cuda.Device(args.device):
        stream = cupy.cuda.Stream(non_blocking=True)
        with stream:
            c = [cupy.full((p.m, p.n), cupy.nan, dtype=cupy.float16) for p in problems]
            nvfp4_aot.grouped_gemm(a, b, c, sfa, sfb, stream=stream)
        stream.synchronize()
        c_jax = [jax.dlpack.from_dlpack(x) for x in c]
        zero_copy = all(y.unsafe_buffer_pointer() == x.data.ptr for x, y in zip(c, c_jax))
        del c  # JAX's arrays keep the memory alive; nothing writes it from here on

    # C is now an ordinary jax.Array: use it in JAX
    finite_in_jax = all(bool(jnp.isfinite(x).all()) for x in c_jax)
    print(f"jax {jax.__version__} on {gpu}: {len(problems)} groups in one launch, "
          f"output zero-copy: {zero_copy}, finite (checked in JAX): {finite_in_jax}")  # fmt: skip

    failures = 0
    for g, (p, out) in enumerate(zip(problems, c_jax)):
        host = np.asarray(out)
        error = relative_error(host, reference_gemm(p))
        ok = bool(np.isfinite(host).all()) and error <= TOLERANCE
        failures += not ok
        print(f"  group {g} (m={p.m}, n={p.n}, k={p.k}): rel err {error:.2e} "
              f"{'ok' if ok else 'MISMATCH'}")  # fmt: skip

    print(f"{len(problems) - failures}/{len(problems)} groups match the float64 reference")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
