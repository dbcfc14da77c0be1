"""Session 20: per-warp timeline of the quantizer (timing-only probe artifacts) next to the
committed kernel's replay time. Usage: python3 scratch/timeline.py BASE_ART PROBE_ART OUTDIR"""

import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from bench_common import copy_bandwidth  # noqa: E402
from bench_quantize import time_graph_relaxed  # noqa: E402

from nvfp4_aot.quantizer import QuantizePlan  # noqa: E402

base_art, probe_art, outdir = sys.argv[1], sys.argv[2], Path(sys.argv[3])
outdir.mkdir(parents=True, exist_ok=True)
SHAPES = [(1024, 4096), (1024, 2048), (1024, 7168), (4096, 4096), (16384, 7168), (1, 4096)]
dev = torch.device("cuda", 0)
bw = copy_bandwidth(dev)
print(f"copy bandwidth {bw / 1e12:.2f} TB/s")


def summarize(label, log, warps):
    log = log[:warps].astype(np.int64)
    sm, t_entry, t_wait, t_end = log[:, 0], log[:, 1], log[:, 2], log[:, 3]
    c_entry, c_wait, c_copy, c_pro, c_d0, c_f0, c_end, rounds, c_dl, c_fl = log[:, 4:14].T
    ghz = np.median((c_end - c_wait) / np.maximum(t_end - t_wait, 1))
    t0 = t_wait.min()

    def q(a):
        p = np.percentile(a, [0, 10, 50, 90, 100])
        return " ".join(f"{v:7.0f}" for v in p)

    ns = lambda c: c / ghz  # noqa: E731
    has = rounds > 0
    arrive = t_wait + ns(c_d0 - c_wait)
    done = t_wait + ns(c_f0 - c_wait)
    print(
        f"--- {label}: warps {warps}, SMs {len(set(sm.tolist()))}, clock {ghz:.2f} GHz, "
        f"globaltimer distinct {len(set(t_end.tolist()))}, rounds max {rounds.max()}"
    )
    print("   (ns, percentiles 0/10/50/90/100)")
    print(f"   entry - first wait release  {q(t_entry - t0)}")
    print(f"   wait release                {q(t_wait - t0)}")
    print(f"   copy issued (after wait)    {q(ns(c_copy - c_wait))}")
    print(f"   prologue done (after wait)  {q(ns(c_pro - c_wait))}")
    if has.any():
        print(f"   data 0 arrived (after wait) {q(ns(c_d0 - c_wait)[has])}")
        print(f"   unit 0 math                 {q(ns(c_f0 - c_d0)[has])}")
        print(f"   data 0 arrived (global)     {q((arrive - t0)[has])}")
        print(f"   unit 0 done (global)        {q((done - t0)[has])}")
        print(f"   last data (global)          {q((t_wait + ns(c_dl - c_wait) - t0)[has])}")
    print(f"   end (global)                {q(t_end - t0)}")
    print(f"   span first release -> last end {t_end.max() - t0} ns")
    # per SM: sorted arrivals
    if has.any():
        rows = []
        for s in sorted(set(sm.tolist()))[:3]:
            sel = (sm == s) & has
            a = np.sort((arrive - t0)[sel])
            d = np.sort((done - t0)[sel])
            rows.append(
                f"   SM {s}: arrivals {np.round(a).astype(int).tolist()}\n"
                f"          done     {np.round(d).astype(int).tolist()}"
            )
        print("\n".join(rows))


for rows, k in SHAPES:
    x0 = (torch.randn(rows, k, device=dev) * 4).to(torch.bfloat16)
    g = torch.tensor([448.0 * 6 / 16], dtype=torch.float32, device=dev)
    res = {}
    plans = {n: QuantizePlan(k, rows=rows, device=0, artifacts=a, capture_slots=64)
             for n, a in (("base", base_art), ("probe", probe_art))}  # fmt: skip
    warps = plans["probe"].layout.launch.num_ctas * 8
    room = max(rows * k, warps * 64)  # bf16 elements: the probe's log fits in every case
    xs, stores = {}, {}
    for n in plans:
        store = torch.empty(room, dtype=torch.bfloat16, device=dev)
        store[: rows * k].copy_(x0.flatten())
        xs[n], stores[n] = store[: rows * k].view(rows, k), store
    outs = {n: torch.empty(p.out_shape, dtype=torch.uint8, device=dev) for n, p in plans.items()}
    scs = {n: torch.empty(p.scale_bytes, dtype=torch.uint8, device=dev) for n, p in plans.items()}
    times = {n: [] for n in plans}
    for _ in range(3):
        for n, p in plans.items():

            def fn(_, p=p, n=n, xs=xs, outs=outs, scs=scs, g=g):  # called in this iteration
                p.run(
                    x=xs[n],
                    out=outs[n],
                    scales=scs[n],
                    global_scale=g,
                    stream=torch.cuda.current_stream().cuda_stream,
                )

            times[n].append(statistics.median(time_graph_relaxed(fn, 200)) * 1e3)
    torch.cuda.synchronize()
    print(
        f"=== {rows}x{k}: base {statistics.median(times['base']):.2f} us  probe "
        f"{statistics.median(times['probe']):.2f} us  passes {times}"
    )
    logs = stores["probe"].view(torch.int64)
    nwarps = warps
    replay_log = logs[: nwarps * 16].view(nwarps, 16).cpu().numpy()
    np.save(outdir / f"replay_{rows}x{k}.npy", replay_log)
    # the launch's real warp count: entries with a nonzero smid or entry time
    summarize(f"{rows}x{k} last kernel of a replay", replay_log, warps)
    # one launch on an idle GPU
    xs["probe"].copy_(x0)
    torch.cuda.synchronize()
    time.sleep(0.01)
    plans["probe"].run(
        x=xs["probe"],
        out=outs["probe"],
        scales=scs["probe"],
        global_scale=g,
        stream=torch.cuda.current_stream().cuda_stream,
    )
    torch.cuda.synchronize()
    single = logs[: nwarps * 16].view(nwarps, 16).cpu().numpy()
    np.save(outdir / f"single_{rows}x{k}.npy", single)
    summarize(f"{rows}x{k} single launch, idle GPU", single, warps)
    for p in plans.values():
        p.close()
