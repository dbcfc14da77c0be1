"""What one quantizer run writes, in numpy: the kernel's row map and its expected bytes.

:func:`row_map` follows the routing exactly as the kernel reads it (counts clamped to
the capacity, index entries to the input's rows; :mod:`nvfp4_aot.quantizer`), and
:func:`expected_outputs` fills the code and scale buffers from the bit-exact reference
:func:`nvfp4_aot.quantize.quantize`, with masks of the bytes a run may write. The GPU
tests compare the kernel's bytes with these; everything outside the masks must keep its
poison.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .blocked import BLOCK_ROWS
from .intmath import round_up
from .layouts import blocked_offset
from .quantize import quantize
from .quantize_layout import QuantizeProblem


@dataclass(frozen=True)
class RowMap:
    """Per blocked-scale row that a run touches: its row, and for token rows the input
    row read and the output row written (-1 for a padding row: zero scales only)."""

    scale_rows: np.ndarray  # int64
    in_rows: np.ndarray
    out_rows: np.ndarray


def _clamp(values, low, high) -> np.ndarray:
    return np.minimum(np.maximum(np.asarray(values, dtype=np.int64), low), high)


def row_map(problem: QuantizeProblem, routing=None, index=None) -> RowMap:
    """The rows a run of ``problem`` touches for ``routing`` (offsets or masked_m, int
    array; ignored by the plain form) and ``index`` (contiguous; None: row i reads i)."""
    p = problem
    scale_rows, in_rows, out_rows = [], [], []

    def expert(first_scale_row: int, first_out_row: int, rows: int, padded: int) -> None:
        r = np.arange(padded, dtype=np.int64)
        scale_rows.append(first_scale_row + r)
        out = np.where(r < rows, first_out_row + r, -1)
        out_rows.append(out)
        in_rows.append(out.copy())

    if p.form == "plain":
        expert(0, 0, p.rows, p.scale_rows)
    elif p.form == "masked":
        counts = _clamp(np.asarray(routing)[: p.experts], 0, p.capacity)
        for e, m in enumerate(counts):  # no padding rows: no C row past masked_m is written
            expert(e * p.expert_scale_rows, e * p.capacity, int(m), int(m))
    else:
        offsets = np.asarray(routing, dtype=np.int64)[: p.experts + 1]
        segment = 0
        for e in range(p.experts):
            start = int(_clamp(offsets[e], 0, p.capacity))
            end = int(_clamp(offsets[e + 1], start, p.capacity))
            padded = round_up(end - start, BLOCK_ROWS)
            # the kernel's work list stops at the plan's scale rows (hostile routings)
            padded = max(0, min(padded, p.scale_rows - segment))
            expert(segment, start, min(end - start, padded), padded)
            segment += round_up(end - start, BLOCK_ROWS)
    scale = np.concatenate(scale_rows) if scale_rows else np.zeros(0, np.int64)
    out = np.concatenate(out_rows) if out_rows else np.zeros(0, np.int64)
    inp = np.concatenate(in_rows) if in_rows else np.zeros(0, np.int64)
    if p.form == "contiguous" and index is not None:
        picked = np.asarray(index, dtype=np.int64)[np.maximum(out, 0)]
        inp = np.where(out >= 0, _clamp(picked, 0, p.rows - 1), -1)
    return RowMap(scale, inp, out)


@dataclass(frozen=True)
class Expected:
    """The bytes a run writes into ``out`` and ``scales`` and where (the masks)."""

    out: np.ndarray  # uint8, the plan's out bytes (output_rows * k / 2)
    out_written: np.ndarray  # bool, same shape
    scales: np.ndarray  # uint8, the plan's scale bytes
    scales_written: np.ndarray


def expected_outputs(problem: QuantizeProblem, x_rows, global_scale, routing=None, index=None):
    """The kernel's outputs for input rows ``x_rows`` ((rows, k) float16, or bfloat16 as
    uint16 bits, row stride k) and float32 ``global_scale``."""
    p = problem
    rows = row_map(p, routing, index)
    kb = p.k // 16
    out = np.zeros((p.output_rows, p.k // 2), np.uint8)
    out_written = np.zeros(out.shape, bool)
    scales = np.zeros(p.operand_bytes()["scales"], np.uint8)
    scales_written = np.zeros(scales.shape, bool)
    tokens = rows.out_rows >= 0
    columns = np.arange(p.blocks_padded)
    touched = blocked_offset(rows.scale_rows[:, None], columns[None, :], kb)
    scales_written[touched.ravel()] = True
    if tokens.any():
        q = quantize(np.asarray(x_rows)[rows.in_rows[tokens]], global_scale)
        out[rows.out_rows[tokens]] = q.packed
        out_written[rows.out_rows[tokens]] = True
        token_offsets = blocked_offset(rows.scale_rows[tokens][:, None], columns[None, :kb], kb)
        scales[token_offsets.ravel()] = q.scales.ravel()
    return Expected(out.ravel(), out_written.ravel(), scales, scales_written)
