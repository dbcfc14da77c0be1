"""Session 27 (CPU, jax 0.10.2's CPU client): an XLA FFI call's cost per extra call in a
jitted function, for an empty handler in C (empty_handler.c, compiled here with cc), an
empty Python handler through ctypes (bench/bench_jax.py's, keeping its thread state as
ours do) and a fused jnp op. Run from the repository root:

    python docs/experiments/jax_c_handler/measure.py
"""

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


def main() -> None:
    with tempfile.TemporaryDirectory() as work:
        library = Path(work) / "libempty.so"
        source = Path(__file__).with_name("empty_handler.c")
        subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", library, source], check=True)
        handler = ctypes.CDLL(str(library)).empty_handler
        address = ctypes.cast(handler, ctypes.c_void_p).value
        jax.ffi.register_ffi_target("c_empty", jax.ffi.pycapsule(address), platform="cpu",
                                    api_version=1)  # fmt: skip
        results = {}
        with jax.default_device(jax.devices("cpu")[0]):
            for n in (1, 17):
                xs = [jax.device_put(np.full(8, i, np.float32)) for i in range(n)]
                for label, fn, args in bench_jax._empty_calls(jax, xs, platform="cpu")[1:]:
                    results.setdefault(label, []).append(per_call_us(fn, args))
                call = jax.ffi.ffi_call("c_empty", jax.ShapeDtypeStruct((8,), np.float32))
                empty_c = jax.jit(lambda xs, call=call: [call(x) for x in xs])
                results.setdefault("empty C FFI handler", []).append(per_call_us(empty_c, (xs,)))
                fused = jax.jit(lambda xs: [x * 2.0 + 1.0 for x in xs])
                results.setdefault("jnp x * 2 + 1", []).append(per_call_us(fused, (xs,)))
        for label, (one, many) in results.items():
            print(f"{label:50s} per extra call {(many - one) / 16:6.2f} µs")


if __name__ == "__main__":
    main()
