"""Session 21: a timeline probe's per-warp stamps of one replay (replay_1024x4096.npy[.gz],
written by timeline.py) by CTA: clock cycles after the SM's first wait release, percentiles
10/50/90 for the SM's first CTAs (blockIdx < 132: one an SM) and the rest.

    python warps_by_cta.py docs/h200/session21/call1/tlbase/replay_1024x4096.npy.gz ...
"""

import gzip
import sys

import numpy as np

WORDS = ("smid", "gt_entry", "gt_wait", "gt_end", "entry", "wait", "copy", "prologue",
         "arrive", "done", "end")  # fmt: skip
SMS = 132

for name in sys.argv[1:]:
    with gzip.open(name) if name.endswith(".gz") else open(name, "rb") as f:
        log = np.load(f).astype(np.int64)
    sm, cta = log[:, 0], log[:, 15]
    wait = log[:, WORDS.index("wait")]
    first_wait = {s: wait[sm == s].min() for s in set(sm.tolist())}
    since = np.array([first_wait[s] for s in sm])
    print(f"== {name}: {len(log)} warps")
    for label, rows in (("first CTA", cta < SMS), ("later CTA", cta >= SMS)):
        if not rows.any():
            continue
        cols = []
        for word in ("copy", "prologue", "arrive", "done", "end"):
            p = np.percentile((log[:, WORDS.index(word)] - since)[rows], [10, 50, 90])
            cols.append(f"{word} {'/'.join(str(int(v)) for v in p)}")
        print(f"  {label:9s} ({rows.sum():4d} warps): " + "  ".join(cols))
    print(f"  last warp's end {(log[:, WORDS.index('end')] - since).max()}")
