"""Session 27: an XLA FFI call's cost per extra call in a jitted function, for an empty
handler in C (empty_handler.c), an empty Python handler through ctypes (bench/bench_jax.py's,
keeping its thread state as ours do) and a fused jnp op. On JAX's CPU client by default;
``--platform CUDA`` on the GPU. The C handler is compiled here with ``cc`` unless
``--library`` names a built one (it calls no library function, so one built on another
x86-64 Linux loads). Run from the repository root:

    python docs/experiments/jax_c_handler/measure.py [--platform CUDA] [--library libempty.so]
"""

import argparse
import ctypes
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import jax
import numpy as np

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
import bench_jax  # noqa: E402


def per_call_us(fn, args, reps=500) -> float:
    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def empty_c_handler(library: Path | None, work: str) -> int:
    """The address of empty_handler, compiled into ``work`` unless ``library`` is given."""
    if library is None:
        library = Path(work) / "libempty.so"
        source = Path(__file__).with_name("empty_handler.c")
        subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", library, source], check=True)
    handler = ctypes.CDLL(str(library)).empty_handler
    return ctypes.cast(handler, ctypes.c_void_p).value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--platform", default="cpu", choices=["cpu", "CUDA"])
    parser.add_argument("--library", type=Path, help="a built empty_handler.c")
    args = parser.parse_args()
    device = jax.devices("cpu" if args.platform == "cpu" else "gpu")[0]
    with tempfile.TemporaryDirectory() as work:
        address = empty_c_handler(args.library, work)
        jax.ffi.register_ffi_target("c_empty", jax.ffi.pycapsule(address),
                                    platform=args.platform, api_version=1)  # fmt: skip
        results = {}
        with jax.default_device(device):
            for n in (1, 17):
                xs = [jax.device_put(np.full(8, i, np.float32), device) for i in range(n)]
                for label, fn, fn_args in bench_jax._empty_calls(jax, xs, args.platform)[1:]:
                    results.setdefault(label, []).append(per_call_us(fn, fn_args))
                call = jax.ffi.ffi_call("c_empty", jax.ShapeDtypeStruct((8,), np.float32))
                empty_c = jax.jit(lambda xs, call=call: [call(x) for x in xs])
                results.setdefault("empty C FFI handler", []).append(per_call_us(empty_c, (xs,)))
                fused = jax.jit(lambda xs: [x * 2.0 + 1.0 for x in xs])
                results.setdefault("jnp x * 2 + 1", []).append(per_call_us(fused, (xs,)))
        print(f"{args.platform}, jax {jax.__version__}")
        for label, (one, many) in results.items():
            print(f"{label:50s} one call {one:7.1f} µs, per extra call {(many - one) / 16:6.2f} µs")


if __name__ == "__main__":
    main()
