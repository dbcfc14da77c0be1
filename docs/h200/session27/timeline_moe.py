"""Session 27: per-warp timeline of the quantizer in every form (the timing-only probe of
make_timeline_probe.py) beside the kernel's replay time. Each case's probe run is the last
of back-to-back eager runs (PDL overlaps them, as in the benchmark's replays); its stamps
are read from the global-scale buffer.

    python3 docs/h200/session27/timeline_moe.py BASE_ART PROBE_ART [OUT.json]
"""

import json
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

PHASES = [  # (label, start word, end word): SM clock words of make_timeline_probe.py
    ("entry -> wait", 3, 4),
    ("wait -> routing tables", 4, 5),
    ("wait -> described", 4, 6),
    ("wait -> first copies started", 4, 7),
    ("wait -> table barrier", 4, 8),
    ("wait -> padding zeroed", 4, 9),
    ("wait -> first data landed", 4, 10),
    ("first unit's math", 10, 11),
    ("wait -> end", 4, 12),
]


def summarize(words: np.ndarray) -> dict:
    """Percentiles (0/10/50/90/100, ns) of each phase over the warps; words (warps, 16)
    uint32 as the probe wrote them (differences taken mod 2^32)."""
    w = words.astype(np.uint32)

    def delta(a, b):
        return (w[:, b] - w[:, a]).astype(np.uint32).astype(np.int64)

    ns = np.maximum(delta(1, 2), 1)  # globaltimer wait -> end
    ghz = float(np.median(delta(4, 12) / ns))
    has_unit = (w[:, 13] > 0) & (w[:, 14] != 0)
    out = {"warps": int(len(w)), "sms": int(len(set(w[:, 0].tolist()))), "clock_ghz": ghz,
           "warps_with_units": int(has_unit.sum())}  # fmt: skip
    # globaltimer's low words against the first warp's wait, signed (they may wrap)
    waits = (w[:, 1] - w[0, 1]).astype(np.int32).astype(np.int64)
    ends = (w[:, 2] - w[0, 1]).astype(np.int32).astype(np.int64)
    first = waits.min()
    out["wait release spread"] = np.percentile(waits - first, [0, 10, 50, 90, 100]).tolist()
    out["end (global)"] = np.percentile(ends - first, [0, 10, 50, 90, 100]).tolist()
    for label, a, b in PHASES:
        values = delta(a, b) / ghz
        if b >= 10:  # data and math: warps that had a unit
            values = values[has_unit]
        if len(values):
            out[label] = np.percentile(values, [0, 10, 50, 90, 100]).tolist()
    return out


def cases(torch, device):
    """(label, plan kwargs, operands without the global scale)."""
    bf16 = torch.bfloat16
    from bench_quantize import masked_counts

    for rows, k in ((1024, 2048), (1024, 4096)):
        x = (torch.randn(rows, k, device=device) * 4).to(bf16)
        yield f"plain {rows}x{k}", dict(k=k, rows=rows), dict(x=x)
    for experts, max_m, k, routed in ((128, 8, 2048, None), (128, 8, 2048, 8)):
        counts = masked_counts(experts, max_m, routed).to(torch.int32)
        x = (torch.randn(experts * max_m, k, device=device) * 4).to(bf16)
        yield (f"masked E={experts} max_m={max_m} k={k} ({int(counts.sum())} rows)",
               dict(k=k, form="masked", capacity=max_m, experts=experts),
               dict(x=x, routing=counts.to(device)))  # fmt: skip
    for experts, tokens, k in ((128, 1, 2048), (128, 16, 2048), (128, 1024, 2048)):
        capacity = tokens * 8
        counts = torch.full((experts,), capacity // experts, dtype=torch.int64)
        counts[: capacity % experts] += 1
        routing = torch.cat([torch.zeros(1, dtype=torch.int64), counts.cumsum(0)]).to(torch.int32)
        index = torch.randint(0, tokens, (capacity,), dtype=torch.int32, device=device)
        x = (torch.randn(tokens, k, device=device) * 4).to(bf16)
        yield (f"contiguous E={experts} T={tokens} k={k}",
               dict(k=k, form="contiguous", rows=tokens, capacity=capacity, experts=experts),
               dict(x=x, routing=routing.to(device), index=index))  # fmt: skip


def main() -> int:
    import torch
    from bench_quantize import time_graph_relaxed

    from nvfp4_aot.quantizer import QuantizePlan

    base_art, probe_art = sys.argv[1], sys.argv[2]
    device = torch.device("cuda", 0)
    results = {}
    for label, kwargs, ops in cases(torch, device):
        row = {}
        for name, art in (("base", base_art), ("probe", probe_art)):
            g = torch.zeros(1 << 18, dtype=torch.float32, device=device)  # 1 MB: g, stamps
            g[0] = 1.0
            with QuantizePlan(device=0, artifacts=art, capture_slots=64, **kwargs) as plan:
                out = torch.empty(plan.out_shape, dtype=torch.uint8, device=device)
                scales = torch.empty(plan.scale_bytes, dtype=torch.uint8, device=device)
                stream = torch.cuda.current_stream().cuda_stream

                def ours(_, plan=plan, out=out, scales=scales, g=g, stream=stream, ops=ops):
                    plan.run(out=out, scales=scales, global_scale=g, stream=stream, **ops)

                row[f"{name}_us"] = statistics.median(time_graph_relaxed(ours, 200)) * 1e3
                if name == "probe":
                    for _ in range(5):
                        ours(None)
                    torch.cuda.synchronize()
                    warps = plan.layout.launch.num_ctas * 8
                    words = g.view(torch.int32)[64 : 64 + 16 * warps].cpu().numpy()
                    row["timeline"] = summarize(words.view(np.uint32).reshape(warps, 16))
        results[label] = row
        print(f"--- {label}: base {row['base_us']:.2f} µs, probe {row['probe_us']:.2f} µs")
        for key, value in row["timeline"].items():
            if isinstance(value, list):
                print(f"   {key:32s} " + " ".join(f"{v:8.0f}" for v in value))
            else:
                print(f"   {key:32s} {value}")
    if len(sys.argv) > 3:
        Path(sys.argv[3]).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
