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

import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "docs" / "h200" / "session32"))

# the same rows, passes and replay timer as session 32's after_kernel.py
from after_kernel import PASSES, PER_GRAPH, SHAPES, replay_us  # noqa: E402
from bench_common import same_bytes_copy_pdl  # noqa: E402

from nvfp4_aot import driver  # noqa: E402
from nvfp4_aot.quantizer import QuantizePlan  # noqa: E402


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
        # bench_common's PDL copy on the quantizer's grid and shared memory (its bytes
        # checked on its first run), empty and with ours' bytes; the empty one also with
        # no shared memory (the next run's CTAs may become resident before the run before
        # it leaves) and without PDL (a plain launch)
        empty = same_bytes_copy_pdl(0, device, ctas=ctas, shared_bytes=shared_bytes)
        copy = same_bytes_copy_pdl(moved, device, ctas=ctas, shared_bytes=shared_bytes)
        empty_free = same_bytes_copy_pdl(0, device, ctas=ctas)
        empty_plain = same_bytes_copy_pdl(0, device, ctas=ctas, shared_bytes=shared_bytes,
                                          pdl=False)  # fmt: skip
        times = {"empty": [], "empty_free": [], "empty_plain": [], "copy": [], "ours": []}
        for _ in range(PASSES):
            times["empty"].append(replay_us(empty, "global"))
            times["empty_free"].append(replay_us(empty_free, "global"))
            times["empty_plain"].append(replay_us(empty_plain, "global"))
            times["copy"].append(replay_us(copy, "global"))
            times["ours"].append(replay_us(ours))
        torch.cuda.synchronize()
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
