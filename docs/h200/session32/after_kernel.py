"""Session 32 (prepared): the plain quantizer timed after another kernel, as a layer
meets it (the activations just written by a kernel that is not ours), for main ("base")
and the defer variants (docs/experiments/bake_defer_variants.sh).

The replay comparison (qcompare.py) chains runs of the quantizer itself: each run's
first CTAs to leave are its first wave's, so the next run's first wave (cta < %nsmid)
takes the first CTA slot of each SM, which the defer variants assume. After another
kernel the quantizer's CTAs are placed as that kernel's leave; this times graphs of
PER_GRAPH pairs (x *= 1, a torch elementwise kernel that rewrites x with its own bytes;
then one quantizer run) against graphs of PER_GRAPH x *= 1 alone, the difference per
pair being the quantizer's time there (bench_common.time_graph). Alternating passes,
each figure the median of the passes' medians; every variant's bytes are checked
against the first variant's.

    python3 docs/h200/session32/after_kernel.py base=scratch/base o200=scratch/o200 ...
"""

import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_common import time_graph  # noqa: E402

from nvfp4_aot.quantizer import QuantizePlan  # noqa: E402

SHAPES = [(1024, 2048), (1024, 4096), (1024, 7168), (4096, 4096)]
PASSES = 3
PER_GRAPH = 10
REPEATS = 200


def replay_us(fn, capture_error_mode: str = "relaxed") -> float:
    """µs a call of ``fn`` in a graph of PER_GRAPH calls, captured in relaxed mode as our
    benchmarks capture plans (a graph of its own each pass, as bench_quantize's)."""
    per_call = time_graph(fn, [None], REPEATS, PER_GRAPH, capture_error_mode=capture_error_mode)
    return statistics.median(per_call) * 1e3


def main() -> int:
    variants = [arg.split("=", 1) for arg in sys.argv[1:]]
    device = torch.device("cuda", 0)
    g = torch.tensor([448.0 * 6 / 16], dtype=torch.float32, device=device)
    cases = []  # (label, x *= 1, {variant: (pair, plan)}, {variant: (out, scales)})
    for rows, k in SHAPES:
        x = (torch.randn(rows, k, device=device) * 4).to(torch.bfloat16)
        pairs, results = {}, {}
        for name, artifacts in variants:
            plan = QuantizePlan(k, rows=rows, device=0, artifacts=artifacts,
                                capture_slots=PASSES * PER_GRAPH)  # fmt: skip
            out = torch.empty(rows, k // 2, dtype=torch.uint8, device=device)
            scales = torch.empty(plan.scale_bytes, dtype=torch.uint8, device=device)

            def pair(_, plan=plan, x=x, out=out, scales=scales):
                x.mul_(1.0)
                # the stream current now: in a capture, the capture's (torch.cuda.graph
                # captures on a side stream; a stream taken at set-up would run the
                # quantizer outside the graph, as session 33's first call did)
                plan.run(x.data_ptr(), out.data_ptr(), scales.data_ptr(), g.data_ptr(),
                         stream=torch.cuda.current_stream().cuda_stream)  # fmt: skip

            pairs[name] = (pair, plan)
            results[name] = (out, scales)
        cases.append((f"{rows}x{k}", lambda _, x=x: x.mul_(1.0), pairs, results))
    times = {}  # (label, name) -> [us per pass]
    for _ in range(PASSES):
        for label, mul, pairs, _results in cases:
            alone = replay_us(mul)
            times.setdefault((label, "x*=1"), []).append(alone)
            for name, (pair, _plan) in pairs.items():
                times.setdefault((label, name), []).append(replay_us(pair) - alone)
    torch.cuda.synchronize()
    print(torch.cuda.get_device_name(0), f"{PASSES} passes, graphs of {PER_GRAPH} pairs")
    for label, _mul, pairs, results in cases:
        first_out, first_scales = results[variants[0][0]]
        cells = [f"x*=1 {statistics.median(times[(label, 'x*=1')]):5.2f}"]
        for name, _artifacts in variants:
            out, scales = results[name]
            same = torch.equal(out, first_out) and torch.equal(scales, first_scales)
            passes = times[(label, name)]
            cells.append(f"{name} {statistics.median(passes):5.2f}{'' if same else ' DIFF'}")
        print(f"{label:10s} " + "  ".join(cells))
        for _pair, plan in pairs.values():
            plan.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
