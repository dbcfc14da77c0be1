"""MoE operands for checks and benchmarks: random routings, host data, float64 reference.

Not on any launch path (numpy): the CLI, the benchmarks and the GPU tests build MoE
problems here. :class:`MoeProblem` holds random FP4 tokens and expert weights; per
routing it gives the routing array and the activation scales in the plan's layout (the
contiguous layout's scale segments move with the counts) and the float64 reference.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .blocked import blocked_scale_bytes
from .layouts import random_problem, scales_to_blocked
from .moe_layout import contiguous_scale_rows, scale_offsets
from .reference import dequantize

ROUTING_KINDS = ("uniform", "skewed", "one_expert", "one_active", "empty", "sparse")


def random_counts(kind: str, experts: int, total: int, rng: np.random.Generator) -> np.ndarray:
    """Tokens per expert, summing to at most ``total``, shaped like a router's output.

    uniform: every token to a random expert; skewed: Zipf-like popularity; one_expert:
    all tokens to one expert; one_active: every expert empty but one, which gets a random
    share; empty: no tokens anywhere; sparse: most experts empty, the rest uniform.
    """
    counts = np.zeros(experts, dtype=np.int64)
    if kind == "empty" or total == 0:
        return counts
    if kind == "uniform":
        np.add.at(counts, rng.integers(0, experts, size=total), 1)
    elif kind == "skewed":
        weights = 1.0 / np.arange(1, experts + 1) ** 1.2
        np.add.at(counts, rng.choice(experts, size=total, p=weights / weights.sum()), 1)
        counts = counts[rng.permutation(experts)]
    elif kind == "one_expert":
        counts[rng.integers(experts)] = total
    elif kind == "one_active":
        counts[rng.integers(experts)] = rng.integers(1, total + 1)
    elif kind == "sparse":
        active = rng.choice(experts, size=max(1, experts // 8), replace=False)
        np.add.at(counts, rng.choice(active, size=rng.integers(1, total + 1)), 1)
    else:
        raise ValueError(f"routing kind must be one of {ROUTING_KINDS}, got {kind!r}")
    return counts


def routing_array(layout: str, counts) -> np.ndarray:
    """The device routing array for per-expert ``counts``: int32 offsets[E + 1]
    (contiguous) or masked_m[E] (masked)."""
    counts = np.asarray(counts, dtype=np.int64)
    if layout == "masked":
        return counts.astype(np.int32)
    return np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)


@dataclass
class Routing:
    """One routing of a MoE problem: the device-side routing array, the activation
    scales laid out for it (blocked), and which rows of C it writes."""

    counts: np.ndarray  # tokens per expert (clamped to the layout's limits)
    routing: np.ndarray  # int32: offsets[E + 1] (contiguous) or masked_m[E] (masked)
    sfa: np.ndarray  # uint8 blocked activation scales for this routing
    row_ranges: list[tuple[int, int]]  # rows of A / C expert e owns


class MoeProblem:
    """Random FP4 activations (``rows`` tokens) and E stacked expert weights (n x k)."""

    def __init__(self, experts, n, k, layout, capacity, rng: np.random.Generator):
        self.experts, self.n, self.k, self.layout, self.capacity = experts, n, k, layout, capacity
        self.rows = capacity if layout == "contiguous" else experts * capacity
        p = random_problem(self.rows, experts * n, k, rng)
        self.a, self.b = p.a, p.b  # (rows, k/2), (E * n, k/2)
        self._sfa_rows = p.sfa  # row-major (rows, k/16)
        self.sfb = np.concatenate(
            [scales_to_blocked(p.sfb[e * n : (e + 1) * n]) for e in range(experts)]
        )
        assert self.sfb.size == experts * blocked_scale_bytes(n, k)
        self._a64 = dequantize(p.a, p.sfa)
        self._b64 = dequantize(p.b, p.sfb).reshape(experts, n, k)
        self._sf_row_bytes = blocked_scale_bytes(128, k) // 128
        if layout == "masked":  # routing-independent: every expert's max_m rows
            self._masked_sfa = np.concatenate(
                [
                    scales_to_blocked(p.sfa[e * capacity : (e + 1) * capacity])
                    for e in range(experts)
                ]
            )

    def routing(self, counts) -> Routing:
        counts = np.asarray(counts, dtype=np.int64)
        e, cap = self.experts, self.capacity
        if self.layout == "masked":
            counts = np.minimum(counts, cap)
            ranges = [(i * cap, i * cap + int(c)) for i, c in enumerate(counts)]
            return Routing(counts, routing_array("masked", counts), self._masked_sfa, ranges)
        if counts.sum() > cap:
            raise ValueError(f"{counts.sum()} tokens routed, capacity is {cap}")
        offsets = routing_array("contiguous", counts)
        sfa = np.zeros(contiguous_scale_rows(cap, e) * self._sf_row_bytes, dtype=np.uint8)
        for i, row in enumerate(scale_offsets(counts)):
            start, stop = int(offsets[i]), int(offsets[i + 1])
            if stop > start:
                block = scales_to_blocked(self._sfa_rows[start:stop])
                at = row * self._sf_row_bytes
                sfa[at : at + block.size] = block
        ranges = [(int(offsets[i]), int(offsets[i + 1])) for i in range(e)]
        return Routing(counts, offsets, sfa, ranges)

    def reference(self, routing: Routing, expert: int) -> np.ndarray:
        """float64 C rows of ``expert`` under ``routing``."""
        start, stop = routing.row_ranges[expert]
        return self._a64[start:stop] @ self._b64[expert].T
