"""Session 33: an empty kernel on the plain quantizer's grid, beside the quantizer, at the
1,024-row sizes — an attempt to measure the kernel boundary of a PDL chain.

In a graph of back-to-back runs (how bench_quantize.py times ours) each run's
griddepcontrol.wait returns only once the whole run before it has finished, so a run
costs a boundary (the last CTA's exit -> the release of the next grid's waits) plus its
body. The empty kernel's cost turned out to depend on the machine (1.10 µs a run in call
C, 1.70 in call E, where ours took 3.86 on both): it measures the machine's rate of graph
kernels, which a kernel with work overlaps, not a boundary ours pays
(docs/h200/session33/README.md). This times, in the same graphs:

* ``empty``: bench_common's PDL copy kernel with nothing to copy, launched on the
  quantizer's grid (its CTAs, 256 threads) with the quantizer's shared memory a CTA
  (dynamic), so that as many CTAs fit an SM as the quantizer's;
* ``empty`` again with no shared memory (CTAs of the next run may then become resident
  while the run before it still runs) and without PDL: what residency and PDL change;
* ``copy``: the same kernel copying the quantizer's bytes (input read, codes + scales
  written) on that grid: what moving them costs a kernel launched and placed like ours;
* ``ours``: the quantizer (main's cubin), bytes checked against a second plan's run.

    python3 docs/h200/session33/boundary.py
"""

import ctypes
import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_common import PDL_COPY_PTX, PDL_COPY_SYMBOL, PDL_COPY_THREADS, time_graph  # noqa: E402

from nvfp4_aot import driver  # noqa: E402
from nvfp4_aot.quantizer import QuantizePlan  # noqa: E402

SHAPES = [(1024, 2048), (1024, 4096), (1024, 7168), (4096, 4096)]
PASSES = 3
PER_GRAPH = 10
REPEATS = 200
MAX_DYNAMIC_SHARED_SIZE_BYTES = 8  # CUfunction_attribute


def replay_us(fn, relaxed: bool = False) -> float:
    mode = "relaxed" if relaxed else "global"
    return statistics.median(time_graph(fn, [None], REPEATS, PER_GRAPH, mode)) * 1e3


class PdlCopy:
    """bench_common's PDL copy kernel on a given grid with a given dynamic shared memory
    a CTA (unused: it only bounds the CTAs an SM holds)."""

    def __init__(self, ctas: int, shared_bytes: int, moved: int, device, pdl: bool = True):
        self.vectors = -(-moved // 32) if moved else 0  # half the bytes read, 16 B each
        self.src = torch.empty(4 * max(1, self.vectors), dtype=torch.int32, device=device)
        self.src.random_()
        self.dst = torch.zeros_like(self.src)
        self.library = driver.library_load_data(PDL_COPY_PTX.encode() + b"\0")
        kernel = driver.library_get_kernel(self.library, PDL_COPY_SYMBOL)
        function = driver.kernel_get_function(kernel)
        driver.function_set_attribute(function, MAX_DYNAMIC_SHARED_SIZE_BYTES, shared_bytes)
        attributes = [(driver.LAUNCH_ATTR_PROGRAMMATIC_STREAM_SERIALIZATION, (1,))] if pdl else []
        config = driver.launch_config(
            (ctas, 1, 1), (PDL_COPY_THREADS, 1, 1), shared_bytes, attributes
        )
        self.spec = driver.LaunchSpec(function, config)
        self.values = (ctypes.c_uint64 * 3)(self.src.data_ptr(), self.dst.data_ptr(), self.vectors)
        self.params = (ctypes.c_void_p * 3)(
            *(ctypes.addressof(self.values) + 8 * i for i in range(3))
        )

    def __call__(self, *_):
        self.spec.use_stream(torch.cuda.current_stream().cuda_stream)
        driver.launch(self.spec.function, self.spec.config, ctypes.addressof(self.params))

    def check(self):
        n = 4 * self.vectors
        if not torch.equal(self.dst[:n], torch.bitwise_not(self.src[:n])):
            raise RuntimeError("the PDL copy wrote wrong bytes")


def main() -> int:
    device = torch.device("cuda", 0)
    driver.activate(0)
    g = torch.tensor([448.0 * 6 / 16], dtype=torch.float32, device=device)
    rows_out = []
    for rows, k in SHAPES:
        x = (torch.randn(rows, k, device=device) * 4).to(torch.bfloat16)
        plan = QuantizePlan(k, rows=rows, device=0, capture_slots=PASSES * PER_GRAPH)
        check = QuantizePlan(k, rows=rows, device=0)
        ctas = plan.layout.launch.num_ctas
        shared_bytes = plan._launcher._kernels[0].variant.dynamic_smem_bytes
        out = torch.empty(rows, k // 2, dtype=torch.uint8, device=device)
        scales = torch.empty(plan.scale_bytes, dtype=torch.uint8, device=device)

        def ours(_, plan=plan, x=x, out=out, scales=scales):
            plan.run(x.data_ptr(), out.data_ptr(), scales.data_ptr(), g.data_ptr(),
                     stream=torch.cuda.current_stream().cuda_stream)  # fmt: skip

        moved = x.numel() * 2 + out.numel() + scales.numel()
        empty = PdlCopy(ctas, shared_bytes, 0, device)
        copy = PdlCopy(ctas, shared_bytes, moved, device)
        # the same empty grid with no shared memory (the next run's CTAs may become
        # resident before the run before it leaves) and without PDL (a plain launch)
        empty_free = PdlCopy(ctas, 0, 0, device)
        empty_plain = PdlCopy(ctas, shared_bytes, 0, device, pdl=False)
        times = {"empty": [], "empty_free": [], "empty_plain": [], "copy": [], "ours": []}
        for _ in range(PASSES):
            times["empty"].append(replay_us(empty))
            times["empty_free"].append(replay_us(empty_free))
            times["empty_plain"].append(replay_us(empty_plain))
            times["copy"].append(replay_us(copy))
            times["ours"].append(replay_us(ours, relaxed=True))
        torch.cuda.synchronize()
        copy.check()
        out2, scales2 = torch.full_like(out, 0xEE), torch.full_like(scales, 0xEE)
        check.run(x.data_ptr(), out2.data_ptr(), scales2.data_ptr(), g.data_ptr(),
                  stream=torch.cuda.current_stream().cuda_stream)  # fmt: skip
        torch.cuda.synchronize()
        same = torch.equal(out, out2) and torch.equal(scales, scales2)
        med = {name: statistics.median(v) for name, v in times.items()}
        rows_out.append(
            f"{rows}x{k:<5d} {ctas} CTAs, {shared_bytes} B shared: "
            f"empty {med['empty']:5.2f} (no shared {med['empty_free']:5.2f}, "
            f"no PDL {med['empty_plain']:5.2f})  copy {med['copy']:5.2f}  ours {med['ours']:5.2f}"
            f"  ours - empty {med['ours'] - med['empty']:5.2f}"
            f"  copy - empty {med['copy'] - med['empty']:5.2f}{'' if same else '  DIFF'}"
        )
        plan.close()
        check.close()
    print(torch.cuda.get_device_name(0), f"µs a run, graphs of {PER_GRAPH}, {PASSES} passes")
    print("\n".join(rows_out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
