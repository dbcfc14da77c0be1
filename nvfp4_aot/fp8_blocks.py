"""FP8 block-scaled weights (DeepSeek-V3 / R1 checkpoints) as BF16 bits, the weight
quantizer's input.

Such a checkpoint stores a linear weight W (n, k) as E4M3 codes (safetensors ``F8_E4M3``)
beside ``<name>_scale_inv``, one float32 per 128 x 128 block, (ceil(n / 128),
ceil(k / 128))::

    W[r, c] = e4m3(codes[r, c]) * scale_inv[r // 128, c // 128]

DeepSeek's own conversion to BF16 (``inference/fp8_cast_bf16.py``, ``weight_dequant``)
multiplies in float32 and stores BF16 rounded to nearest even. :func:`dequantize` does
the same, so a weight quantized to NVFP4 from the FP8 checkpoint has the bytes of one
quantized from DeepSeek's BF16 conversion of it.
"""

from __future__ import annotations

import numpy as np

from .layouts import E4M3_FLOAT32, float_to_bf16_bits

BLOCK = 128  # rows and columns a scale covers (DeepSeek's weight_block_size)
SCALE_SUFFIX = "_scale_inv"  # the block scales' tensor: the weight's name + this


def blocks(rows: int, cols: int) -> tuple[int, int]:
    """The shape of the block scales of a (rows, cols) weight."""
    return -(-rows // BLOCK), -(-cols // BLOCK)


def dequantize(codes, scale_inv) -> np.ndarray:
    """BF16 bits (uint16) of ``e4m3(codes) * scale_inv`` per 128 x 128 block, the
    product in float32 and rounded to BF16 to nearest even (NaN codes give NaN).

    ``codes`` is uint8 (n, k); ``scale_inv`` float32 :func:`blocks` (n, k). Raises
    ValueError naming what does not match."""
    codes, scale = np.asarray(codes), np.asarray(scale_inv)
    if codes.dtype != np.uint8 or codes.ndim != 2:
        raise ValueError(f"FP8 codes must be uint8 (n, k), got {codes.dtype} {codes.shape}")
    rows, cols = codes.shape
    if scale.dtype != np.float32 or scale.shape != blocks(rows, cols):
        raise ValueError(
            f"the block scales of a {codes.shape} FP8 weight must be float32 "
            f"{blocks(rows, cols)} (one a {BLOCK} x {BLOCK} block), got {scale.dtype} "
            f"{scale.shape}"
        )
    per_element = np.repeat(np.repeat(scale, BLOCK, axis=0)[:rows], BLOCK, axis=1)[:, :cols]
    return float_to_bf16_bits(E4M3_FLOAT32[codes] * per_element)


class Experts:
    """Per-expert FP8 weights and their block scales, each expert dequantized when it is
    asked for (the weight quantizer takes experts one at a time)."""

    def __init__(self, codes, scales):
        if len(codes) != len(scales):
            raise ValueError(f"{len(codes)} experts' FP8 weights but {len(scales)} block scales")
        self.codes, self.scales = codes, scales
        self.shape = (len(codes), *codes[0].shape)

    def __len__(self) -> int:
        return len(self.codes)

    def __getitem__(self, e: int) -> np.ndarray:
        try:
            return dequantize(self.codes[e], self.scales[e])
        except ValueError as exc:
            raise ValueError(f"expert {e}: {exc}") from None
