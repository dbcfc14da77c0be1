import json
import statistics
import sys

new = {(r["experts"], r["n"], r["k"], r["tokens"]): r for r in json.load(open(sys.argv[1]))["rows"]}
old = {(r["experts"], r["n"], r["k"], r["tokens"]): r for r in json.load(open(sys.argv[2]))["rows"]}
ratios = []
for key in sorted(old):
    if key in new:
        a, b = new[key], old[key]
        q = b["ours_graph_us"] / a["ours_graph_us"]
        ratios.append(q)
        print(
            key,
            a["family"][-6:],
            f"new {a['ours_graph_us']:.1f} old {b['ours_graph_us']:.1f} old/new {q:.3f} gmm {a['grouped_mm_graph_us']:.1f} gmm/new {a['grouped_mm_graph_us'] / a['ours_graph_us']:.2f} floor {a['mem_floor_us']:.1f} new/floor {a['ours_over_floor']:.2f} host {a['host_us_per_run']:.1f}",
        )
print("old/new median", statistics.median(ratios), "min", min(ratios), "max", max(ratios))
