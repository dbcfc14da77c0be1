#!/usr/bin/env python3
"""A whole NVFP4 MoE layer step on the GPU, end to end: ours against torch._grouped_mm.

One step (both sides route the same way, with torch ops, no host sync):

  BF16 hidden (T, hidden) -> router logits -> top-k -> torch_ops.route (sort by expert,
  offsets, permutation)

  ours        g_x = 2688 / amax(x) on the device -> torch_ops.quantize (the baked
              quantizer, contiguous form, rows read through the routing's index) ->
              torch_ops.moe_gemm gate/up (alpha = 1 / (g_x g_w1[e]), BF16 out) ->
              silu(gate) * up (BF16) -> g_h -> torch_ops.quantize (contiguous) ->
              torch_ops.moe_gemm down (alpha, BF16 out) -> combine (index_add_ of the
              router-weighted rows, float32) -> BF16
  grouped_mm  the same layer with x[tokens] (BF16) and torch._grouped_mm on the BF16
              weights (offs = offsets[1:]) for both projections, no quantization

The weights are random BF16 (N(0, 1/k)); ours are those quantized on the GPU once by
torch_ops.quantize (plain form, per expert, g = 2688 / amax; scale_2 = 1 / g).

Columns (per configuration and T; medians):

  hit           experts with tokens in this step's routing
  ours graph    GPU µs of one step replayed from a CUDA graph captured once (an event
                pair around each replay, queued behind a GPU hold: bench_common.time_steps)
  ours eager    wall µs per step of the step launched from Python, steps queued back to
                back until the GPU finished them (all host work included:
                bench_moe.eager_wall)
  torch graph / torch eager   the same for the grouped_mm layer
  graph x       torch graph / ours graph (> 1: ours is faster)
  floor         bytes one step must move (the weights and scales of the experts hit,
                FP4 for ours; x read and y written, BF16) / the device-to-device copy
                bandwidth measured in this run; "bf16 floor" the same with BF16 weights
  % floor       floor / ours graph
  syncs         "0" when 16 eager steps of ours (fewer where 16 would fill the driver's
                launch queue: bench_moe.sync_check) were queued under
                torch.cuda.set_sync_debug_mode("error") behind a 250 ms GPU hold before the
                hold ended (no call waited for the GPU)
  vs bf16       ||y_ours - y_grouped_mm|| / ||y_grouped_mm||: W4A4 quantization error
                (about 0.1 - 0.2 for random data); above 0.5 or non-finite is a FAILURE

    PYTHONPATH=. python bench/bench_moe_layer.py [--quick] [--json out.json]

Exit status 1 when a case failed (error, or vs bf16 out of range).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import GpuHold, blocked_bytes, copy_bandwidth, time_steps  # noqa: E402
from bench_moe import eager_wall, sync_check  # noqa: E402

from nvfp4_aot import torch_ops  # noqa: E402

CONFIGS = {  # name: (experts, hidden, ffn, top_k)
    "E128-h2048-f768-top8": (128, 2048, 768, 8),  # Qwen3-30B-A3B-like
    "E8-h4096-f14336-top2": (8, 4096, 14336, 2),  # Mixtral-8x7B-like
    "E256-h7168-f2048-top8": (256, 7168, 2048, 8),  # DeepSeek-V3-like
}
TOKENS = {
    "E128-h2048-f768-top8": (1, 8, 64, 512, 2048),
    "E8-h4096-f14336-top2": (1, 16, 256, 2048),
    "E256-h7168-f2048-top8": (1, 16, 256, 2048),
}
QUICK = {"E128-h2048-f768-top8": (1, 64, 1024)}
MAX_REL_DIFF = 0.5
STEPS = 200


class Weights:
    """Router (float32), BF16 experts (E, n, k) and ours: packed (E, n, k/2), blocked
    scales (one buffer), scale_2 (E,) float32, quantized on the GPU by torch_ops.quantize."""

    def __init__(self, experts, hidden, ffn, device, generator):
        self.experts = experts
        self.router = torch.randn(hidden, experts, device=device, generator=generator)
        self.router /= hidden**0.5
        self.w1_16 = self._random(experts, 2 * ffn, hidden, device, generator)
        self.w2_16 = self._random(experts, hidden, ffn, device, generator)
        self.w1, self.w1_scales, self.w1_scale2 = self._quantize(self.w1_16)
        self.w2, self.w2_scales, self.w2_scale2 = self._quantize(self.w2_16)
        self.w1_16t = self.w1_16.transpose(-2, -1)  # (E, k, n), as torch._grouped_mm takes it
        self.w2_16t = self.w2_16.transpose(-2, -1)

    @staticmethod
    def _random(experts, n, k, device, generator):
        w = torch.empty(experts, n, k, dtype=torch.bfloat16, device=device)
        for e in range(experts):  # one expert at a time: no float32 copy of them all
            w[e] = torch.randn(n, k, device=device, generator=generator) / k**0.5
        return w

    @staticmethod
    def _quantize(w16):
        experts, n, k = w16.shape
        per = blocked_bytes(n, k)
        packed = torch.empty(experts, n, k // 2, dtype=torch.uint8, device=w16.device)
        scales = torch.empty(experts * per, dtype=torch.uint8, device=w16.device)
        scale_2 = torch.empty(experts, dtype=torch.float32, device=w16.device)
        for e in range(experts):
            g = torch_ops.global_scale(w16[e])
            p, s = torch_ops.quantize(w16[e], g)
            assert s.numel() == per, (s.numel(), per)
            packed[e].copy_(p)
            scales[e * per : (e + 1) * per].copy_(s)
            scale_2[e : e + 1].copy_(1.0 / g)
        return packed, scales, scale_2


def routed(x, w: Weights, top_k: int):
    logits = x.float() @ w.router
    top_logits, top_experts = logits.topk(top_k, dim=-1)
    r = torch_ops.route(top_experts, w.experts)
    return r, top_logits.softmax(dim=-1).reshape(-1)[r.order]


def combine(x, r, rows, route_weight):
    y = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    y.index_add_(0, r.tokens, rows.float() * route_weight.unsqueeze(1))
    return y.to(torch.bfloat16)


def ours_step(x, w: Weights, top_k: int):
    """The NVFP4 layer (as examples/torch_moe.py): quantize -> GEMM -> SiLU -> quantize
    -> GEMM, all on the GPU."""
    r, route_weight = routed(x, w, top_k)
    g_x = torch_ops.global_scale(x)
    a1, sfa1 = torch_ops.quantize(x, g_x, r.offsets, r.tokens.to(torch.int32), "contiguous")
    c1 = torch_ops.moe_gemm(a1, w.w1, sfa1, w.w1_scales, r.offsets, alpha=w.w1_scale2 / g_x,
                            out_dtype=torch.bfloat16)  # fmt: skip
    gate, up = c1.chunk(2, dim=1)
    h = (torch.nn.functional.silu(gate) * up).contiguous()
    g_h = torch_ops.global_scale(h)
    a2, sfa2 = torch_ops.quantize(h, g_h, r.offsets, None, "contiguous")
    c2 = torch_ops.moe_gemm(a2, w.w2, sfa2, w.w2_scales, r.offsets, alpha=w.w2_scale2 / g_h,
                            out_dtype=torch.bfloat16)  # fmt: skip
    return combine(x, r, c2, route_weight)


def torch_step(x, w: Weights, top_k: int):
    """The same layer in BF16 with torch._grouped_mm."""
    r, route_weight = routed(x, w, top_k)
    ends = r.offsets[1:]
    c1 = torch._grouped_mm(x[r.tokens], w.w1_16t, offs=ends)
    gate, up = c1.chunk(2, dim=1)
    h = (torch.nn.functional.silu(gate) * up).contiguous()
    c2 = torch._grouped_mm(h, w.w2_16t, offs=ends)
    return combine(x, r, c2, route_weight)


def capture(step):
    """A CUDA graph of one step (warm-up on a side stream, as torch.cuda.graph asks);
    (graph, output, capture mode used)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    for mode in ("global", "relaxed"):
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph, capture_error_mode=mode):
                out = step()
            return graph, out, mode
        except Exception as exc:  # noqa: BLE001 (reported; relaxed mode tried next)
            print(f"    capture ({mode}) failed: {str(exc).splitlines()[0][:200]}", flush=True)
            torch.cuda.synchronize()
            if mode == "relaxed":
                raise
    raise AssertionError("unreachable")


def floor_bytes(counts, hidden, ffn, tokens, fp4: bool) -> int:
    """Weights (and scales) of the experts hit, x read and y written (BF16)."""
    hit = int((counts > 0).sum())
    if fp4:
        per_expert = (2 * ffn * hidden + hidden * ffn) // 2
        per_expert += blocked_bytes(2 * ffn, hidden) + blocked_bytes(hidden, ffn)
    else:
        per_expert = 2 * (2 * ffn * hidden + hidden * ffn)
    return hit * per_expert + 2 * 2 * tokens * hidden


def bench_case(name, w: Weights, hidden, ffn, top_k, tokens, copy_bps, hold, device) -> dict:
    generator = torch.Generator(device=device).manual_seed(tokens)
    x = torch.randn(tokens, hidden, device=device, generator=generator).to(torch.bfloat16)
    row = {"config": name, "experts": w.experts, "hidden": hidden, "ffn": ffn,
           "top_k": top_k, "tokens": tokens}  # fmt: skip
    y_ours = ours_step(x, w, top_k)  # warm-up: the plans
    y_torch = torch_step(x, w, top_k)
    torch.cuda.synchronize()
    counts = torch.diff(routed(x, w, top_k)[0].offsets).cpu()
    row["experts_hit"] = int((counts > 0).sum())
    row["vs_bf16"] = ((y_ours.double() - y_torch.double()).norm() / y_torch.double().norm()).item()
    row["ok"] = bool(row["vs_bf16"] == row["vs_bf16"] and row["vs_bf16"] <= MAX_REL_DIFF)
    row["floor_us"] = floor_bytes(counts, hidden, ffn, tokens, True) / copy_bps * 1e6
    row["bf16_floor_us"] = floor_bytes(counts, hidden, ffn, tokens, False) / copy_bps * 1e6

    graph, _, mode = capture(lambda: ours_step(x, w, top_k))
    row["ours_capture_mode"] = mode
    times, starved = time_steps(lambda _i: None, lambda _i: graph.replay(), STEPS, hold)
    row["ours_graph_us"] = statistics.median(times)
    row["ours_eager_us"] = statistics.median(eager_wall(lambda _i: ours_step(x, w, top_k),
                                                        STEPS)[0])  # fmt: skip
    row["syncs"] = sync_check(lambda _i: ours_step(x, w, top_k), hold)
    try:
        torch_graph, _, _ = capture(lambda: torch_step(x, w, top_k))
        times, more = time_steps(lambda _i: None, lambda _i: torch_graph.replay(), STEPS, hold)
        starved += more
        row["torch_graph_us"] = statistics.median(times)
        row["torch_eager_us"] = statistics.median(
            eager_wall(lambda _i: torch_step(x, w, top_k), STEPS)[0]
        )
        torch_graph.reset()
    except RuntimeError as exc:
        row["torch_error"] = str(exc).splitlines()[0][:200]
    row["starved_chunks"] = starved
    torch.cuda.synchronize()
    graph.reset()
    torch_ops.release_plans()  # the graphs that captured them are gone
    return row


def _cell(row, key, fmt="{:.1f}"):
    return fmt.format(row[key]) if key in row else "-"


def table(rows) -> str:
    headers = ["config", "T", "hit", "ours graph µs", "ours eager µs", "torch graph µs",
               "torch eager µs", "graph x", "floor µs", "% floor", "bf16 floor µs", "syncs",
               "vs bf16"]  # fmt: skip
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['config']} | {r['tokens']} | FAILED: {r['error']} |")
            continue
        speedup = (f"{r['torch_graph_us'] / r['ours_graph_us']:.2f}"
                   if "torch_graph_us" in r else r.get("torch_error", "-"))  # fmt: skip
        syncs = "0" if r["syncs"]["ok"] else (r["syncs"]["torch_error"] or "host waited")
        cells = [r["config"], str(r["tokens"]), str(r["experts_hit"]), _cell(r, "ours_graph_us"),
                 _cell(r, "ours_eager_us"), _cell(r, "torch_graph_us"),
                 _cell(r, "torch_eager_us"), speedup, _cell(r, "floor_us"),
                 f"{100 * r['floor_us'] / r['ours_graph_us']:.0f} %",
                 _cell(r, "bf16_floor_us"), syncs,
                 f"{r['vs_bf16']:.3f}" + ("" if r["ok"] else " FAILURE")]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one configuration, three T")
    parser.add_argument("--config", action="append", choices=sorted(CONFIGS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    began = time.perf_counter()
    copy_bps = copy_bandwidth(device)
    hold = GpuHold()
    plan = QUICK if args.quick else {name: TOKENS[name] for name in args.config or CONFIGS}
    print(f"# {torch.cuda.get_device_name(device)}, torch {torch.__version__}, copy "
          f"{copy_bps / 1e12:.2f} TB/s (read + write)", flush=True)  # fmt: skip
    rows = []
    for name, token_counts in plan.items():
        experts, hidden, ffn, top_k = CONFIGS[name]
        generator = torch.Generator(device=device).manual_seed(args.seed)
        w = Weights(experts, hidden, ffn, device, generator)
        for tokens in token_counts:
            try:  # one failing case must not hide the others
                row = bench_case(name, w, hidden, ffn, top_k, tokens, copy_bps, hold, device)
            except Exception as exc:  # noqa: BLE001 (reported, and the exit status says so)
                row = {"config": name, "tokens": tokens, "ok": False,
                       "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}  # fmt: skip
                torch.cuda.synchronize()
                torch_ops.release_plans()
            rows.append(row)
            if args.json:  # after every case: a timeout still leaves the rows so far
                args.json.write_text(
                    json.dumps({"copy_bandwidth": copy_bps, "rows": rows}, indent=1)
                )
            if "error" in row:
                print(f"{name} T={tokens}: FAILED {row['error']}", flush=True)
            else:
                print(f"{name} T={tokens}: ours graph {row['ours_graph_us']:.1f} µs, eager "
                      f"{row['ours_eager_us']:.1f} µs; grouped_mm graph "
                      f"{_cell(row, 'torch_graph_us')} µs; floor {row['floor_us']:.1f} µs; "
                      f"vs bf16 {row['vs_bf16']:.3f}", flush=True)  # fmt: skip
        del w
        torch.cuda.empty_cache()
    print(table(rows))
    failed = [r for r in rows if not r["ok"]]
    print(f"\n{len(rows)} cases in {time.perf_counter() - began:.0f} s; "
          f"{len(failed)} failed" + (": " + ", ".join(f"{r['config']} T={r['tokens']}"
                                                      for r in failed) if failed else ""))  # fmt: skip
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
