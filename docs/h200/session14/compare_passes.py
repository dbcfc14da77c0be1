"""Per-row median µs of graph replay of two bench_decode runs, each over passes 1 and 2:
python3 compare_passes.py DIR BASE OTHER   (reads DIR/bd_{BASE,OTHER}_{1,2}.json)"""

import json
import statistics
import sys

out, base, other = sys.argv[1:4]


def rows(name):
    got = {}
    for p in (1, 2):
        for r in json.load(open(f"{out}/bd_{name}_{p}.json"))["rows"]:
            got.setdefault((r["experts"], r["n"], r["k"], r["tokens"]), []).append(r)
    return got


a, b = rows(base), rows(other)
print(
    f"| E | n, k | tokens | family | {base} µs | {other} µs | difference µs | ratio | gmm / {other} |"
)
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
diffs = {}
for key in sorted(a):
    ca = statistics.median(r["ours_graph_us"] for r in a[key])
    cb = statistics.median(r["ours_graph_us"] for r in b[key])
    gmm = statistics.median(r["grouped_mm_graph_us"] for r in a[key] + b[key])
    diffs.setdefault(key[3], []).append(cb - ca)
    print(
        f"| {key[0]} | {key[1]}, {key[2]} | {key[3]} | {a[key][0]['family']} | {ca:.1f} | "
        f"{cb:.1f} | {cb - ca:+.1f} | {cb / ca:.3f} | {gmm / cb:.2f} |"
    )
for t, d in sorted(diffs.items()):
    print(
        f"\n{t} tokens: difference {min(d):+.1f} to {max(d):+.1f} µs, median "
        f"{statistics.median(d):+.2f} over {len(d)} rows"
    )
