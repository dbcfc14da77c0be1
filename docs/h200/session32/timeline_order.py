"""Session 32: session 21's per-warp timelines of 1024 x 4096 (replay_1024x4096.npy.gz,
main's kernel as 2 CTAs of 8 warps an SM and as one CTA of 16 warps) read for the order
in which warps finish: by the CTA's arrival on the SM, by the warp's id, or by when its
data landed. CPU only (the stored stamps).

    python3 docs/h200/session32/timeline_order.py
"""

import collections
import gzip
from pathlib import Path

import numpy as np

RUNS = Path(__file__).resolve().parents[1] / "session21" / "call1"
WORDS = ("smid", "gt_entry", "gt_wait", "gt_end", "entry", "wait", "copy", "prologue",
         "arrive", "done", "end")  # fmt: skip
W = {word: i for i, word in enumerate(WORDS)}
CTA, WARP_ID = 15, 14  # the probe's words: the CTA index, %warpid
SCHEDULERS = 4


def load(name: str) -> np.ndarray:
    with gzip.open(RUNS / name / "replay_1024x4096.npy.gz") as f:
        return np.load(f).astype(np.int64)


def by_cta(log: np.ndarray) -> None:
    """An SM's two CTAs: how far apart they arrived, their data landed, they finished."""
    rows = []
    for sm in np.unique(log[:, 0]):
        warps = log[log[:, 0] == sm]
        ctas = np.unique(warps[:, CTA])
        if len(ctas) != 2:
            continue
        first, second = (warps[warps[:, CTA] == c] for c in ctas)
        rows.append([np.median(second[:, W[w]]) - np.median(first[:, W[w]])
                     for w in ("entry", "arrive", "done")])  # fmt: skip
    rows = np.array(rows)
    print(
        f"  SMs with two CTAs: {len(rows)}; the higher CTA index minus the lower, median "
        f"entry {np.median(rows[:, 0]):.0f}, data landed {np.median(rows[:, 1]):.0f}, "
        f"done {np.median(rows[:, 2]):.0f} cycles; SMs where the higher's data landed "
        f"first: {(rows[:, 1] < 0).sum()}"
    )


def same_scheduler_pairs(log: np.ndarray) -> None:
    """Pairs of warps of one CTA on one scheduler (warp ids equal mod 4): which finished
    first, the lower warp id or the one whose data landed first?"""
    groups = collections.defaultdict(list)
    for i, row in enumerate(log):
        groups[(row[0], row[CTA], row[WARP_ID] % SCHEDULERS)].append(i)
    pairs = lower_first = data_first = 0
    ahead = {"higher": [0, 0], "lower": [0, 0]}  # whose data came > 100 cycles first: n, won
    for members in groups.values():
        for a, i in enumerate(members):
            for j in members[a + 1 :]:
                lo, hi = (i, j) if log[i, WARP_ID] < log[j, WARP_ID] else (j, i)
                early, late = (i, j) if log[i, W["arrive"]] < log[j, W["arrive"]] else (j, i)
                pairs += 1
                lower_first += log[lo, W["done"]] < log[hi, W["done"]]
                data_first += log[early, W["done"]] < log[late, W["done"]]
                if abs(log[lo, W["arrive"]] - log[hi, W["arrive"]]) > 100:
                    tally = ahead["higher" if early == hi else "lower"]
                    tally[0] += 1
                    tally[1] += log[early, W["done"]] < log[late, W["done"]]
    print(
        f"  same-CTA same-scheduler pairs: {pairs}; the lower warp id finished first in "
        f"{lower_first} ({100 * lower_first / pairs:.0f} %), the earlier data in {data_first} "
        f"({100 * data_first / pairs:.0f} %)"
    )
    for who, (n, won) in ahead.items():
        print(
            f"    the {who} warp id's data > 100 cycles first: {n} pairs; it finished first "
            f"in {won} ({100 * won / n:.0f} %)"
        )


def spans(log: np.ndarray) -> None:
    """Cycles after the SM's first wait release: data landed, done, and the span."""
    first_wait = {sm: log[log[:, 0] == sm, W["wait"]].min() for sm in np.unique(log[:, 0])}
    since = np.array([first_wait[sm] for sm in log[:, 0]])
    landed, done = log[:, W["arrive"]] - since, log[:, W["done"]] - since
    pct = lambda v: "/".join(str(int(x)) for x in np.percentile(v, [10, 50, 90]))  # noqa: E731
    print(
        f"  p10/50/90: data landed {pct(landed)}, unit done {pct(done)}, landed -> done "
        f"{pct(done - landed)}; last warp's end {int((log[:, W['end']] - since).max())}"
    )


for name, what in (("tlbase", "main, 2 CTAs x 8 warps an SM"), ("tlb512", "1 CTA x 16 warps")):
    log = load(name)
    print(f"{name} ({what}, {len(log)} warps)")
    if name == "tlbase":
        by_cta(log)
    same_scheduler_pairs(log)
    spans(log)
