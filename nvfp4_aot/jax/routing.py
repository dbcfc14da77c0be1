"""A router's top-k expert ids as the contiguous MoE layout, in jnp (inside ``jax.jit``).

The JAX twins of :func:`nvfp4_aot.torch_ops.route` and
:func:`nvfp4_aot.torch_ops.blocked_scales`: sort the (T, top_k) expert ids by expert,
give every expert its rows ``offsets[e] .. offsets[e+1]`` and its activation scales a
128-row aligned segment of one blocked buffer (:func:`nvfp4_aot.moe_layout.scale_offsets`),
with array ops only: nothing is read back to the host, so the routing stays on the GPU.
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp

from ..blocked import BLOCK_COLS
from ..errors import InvalidProblemError
from ..intmath import round_up
from ..moe_layout import SF_BLOCK_ROWS, contiguous_scale_rows


class Routing(NamedTuple):
    """The contiguous layout of one routing (arrays on the router's device).

    Row i of A / C (T * top_k "permuted" rows) is slot ``order[i]`` of the flattened
    (T, top_k) router output: token ``tokens[i]``, expert ``experts[i]``.
    """

    order: object  # int32 (T * top_k,): flat index token * top_k + j of row i
    tokens: object  # int32 (T * top_k,): order // top_k
    experts: object  # int32 (T * top_k,): expert of row i, non-decreasing
    offsets: object  # int32 (E + 1,): expert e owns rows offsets[e] .. offsets[e + 1]
    scale_rows: object  # int32 (T * top_k,): blocked SFA row of row i (128-row segments)
    scale_row_count: int  # rows of the blocked SFA buffer: contiguous_scale_rows(T*top_k, E)


def route(top_experts, experts: int) -> Routing:
    """Sort ``top_experts`` ((T, top_k) or (T,) int ids) by expert, stably."""
    top_k = top_experts.shape[-1] if top_experts.ndim > 1 else 1
    flat = top_experts.reshape(-1).astype(jnp.int32)
    rows = flat.shape[0]
    order = jnp.argsort(flat, stable=True).astype(jnp.int32)
    by_expert = flat[order]
    offsets = jnp.searchsorted(by_expert, jnp.arange(experts + 1, dtype=jnp.int32), side="left")
    offsets = offsets.astype(jnp.int32)
    counts = offsets[1:] - offsets[:-1]
    padded = (counts + (SF_BLOCK_ROWS - 1)) // SF_BLOCK_ROWS * SF_BLOCK_ROWS
    segment = jnp.cumsum(padded) - padded  # exclusive sum: scale_offsets(counts)
    index = jnp.arange(rows, dtype=jnp.int32)
    scale_rows = segment[by_expert] + index - offsets[by_expert]
    return Routing(
        order=order,
        tokens=order // top_k,
        experts=by_expert,
        offsets=offsets,
        scale_rows=scale_rows,
        scale_row_count=contiguous_scale_rows(rows, experts),
    )


def blocked_scales(scales, scale_rows, total_rows: int):
    """Row-major E4M3 scale bytes (rows, k/16) -> a 1-D uint8 blocked buffer of
    ``total_rows`` rows (a multiple of 128), row i at row ``scale_rows[i]``, every other
    row zero. With :func:`route`'s ``scale_rows`` and ``scale_row_count`` this is the
    contiguous layout's SFA; with ``arange(rows)`` and ``round_up(rows, 128)`` it is
    :func:`nvfp4_aot.layouts.scales_to_blocked`."""
    if total_rows % SF_BLOCK_ROWS:
        raise InvalidProblemError(f"total_rows must be a multiple of 128, got {total_rows}")
    if scales.dtype != jnp.uint8:
        scales = scales.view(jnp.uint8)
    cols = scales.shape[1]
    padded_cols = round_up(cols, BLOCK_COLS)
    if padded_cols != cols:
        scales = jnp.pad(scales, ((0, 0), (0, padded_cols - cols)))
    rows = jnp.zeros((total_rows, padded_cols), jnp.uint8).at[scale_rows].set(scales)
    # row = tile * 128 + quarter * 32 + lane; col = col_tile * 4 + slot
    # -> (tile, col_tile, lane, quarter, slot), as nvfp4_aot.layouts.scales_to_blocked
    tiles = rows.reshape(total_rows // SF_BLOCK_ROWS, 4, 32, padded_cols // 4, 4)
    return tiles.transpose(0, 3, 2, 1, 4).reshape(-1)
