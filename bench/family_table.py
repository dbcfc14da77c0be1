#!/usr/bin/env python3
"""Per case: the time of each kernel family from `nvfp4-aot bench --kernel A --kernel B
--json` output, their ratio, and the family the runtime picks (nvfp4_aot.selection).

usage: python3 bench/family_table.py bench.json [more.json ...]
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict

from nvfp4_aot import loader
from nvfp4_aot.selection import choose_family


def describe(sizes) -> str:
    ms = sorted({s[0] for s in sizes})
    m = str(ms[0]) if len(ms) == 1 else f"{ms[0]}..{ms[-1]}"
    ns = sorted({s[1] for s in sizes})
    ks = sorted({s[2] for s in sizes})
    return f"{len(sizes)} x ({m}, {'/'.join(map(str, ns))}, {'/'.join(map(str, ks))})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+")
    args = parser.parse_args()
    times: dict[tuple, dict[str, float]] = defaultdict(dict)
    for path in args.files:
        for case in json.load(open(path))["cases"]:
            family = case["variants"][0].split(".")[0]
            times[tuple(map(tuple, case["sizes"]))][family] = case["median_us"]
    families = sorted({f for per in times.values() for f in per})
    if len(families) != 2:
        raise SystemExit(f"expected two families, found {families}")
    plain, once = families  # "..._a16" sorts after its prefix
    baked = [v for v in loader.load_manifest().variants if v.family in families]
    print(f"| case | {plain} us | {once} us | {once} / {plain} | faster | picked |")
    print("| --- | --- | --- | --- | --- | --- |")
    right = 0
    for sizes, per in times.items():
        if len(per) != 2:
            continue
        ratio = per[once] / per[plain]
        faster = once if ratio < 1 else plain
        picked = choose_family(baked, sizes)
        right += picked == faster
        mark = "" if picked == faster else " (wrong)"
        print(
            f"| {describe(sizes)} | {per[plain]:.1f} | {per[once]:.1f} | {ratio:.3f} | "
            f"{'a16' if faster == once else 'per-CTA'} | {'a16' if picked == once else 'per-CTA'}{mark} |"
        )
    print(f"\nthe rule picks the faster family in {right} of {len(times)} cases")


if __name__ == "__main__":
    main()
