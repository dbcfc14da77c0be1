"""Hopper (sm_90a) NVFP4 grouped GEMM for decode: activation tiles of 16 rows.

The kernel of :mod:`.sm90_grouped_gemm` (read its docstring) compiled with an
activation tile of ``TILE_M`` = 16 rows instead of 128: the wgmma N operand and the
activation decode shrink 8x, so a group with a few tokens (a MoE expert in decode)
no longer pays the MMA and decode work of 128 rows while the FP4 weights stream by.
The freed shared memory holds more raw stages. Activation scales are still loaded as
the 128-row blocked-scale block holding the tile (a tile's rows lie in one block); a
group with more rows than the tile runs ``ceil(m / 16)`` tiles per N tile, each
decoding the weights again, so plans choose this family only when the expected rows
per group are few (:mod:`nvfp4_aot.selection`). When a launch has at most half as many
tiles as CTAs (a few experts hit, one token), each tile's K range is split over up to
four CTAs (:mod:`.split_k`).
"""

from . import family_named, split_k
from .sm90_common import (
    ARCHS,
    BYTES_PER_TENSORMAP,
    NUM_CONSUMER_THREADS,
    NUM_TENSORMAPS,
    THREADS,
    TILE_K,
    TILE_N,
)
from .sm90_grouped_gemm import NARROW_SPLIT_K
from .sm90_grouped_gemm import compile as _compile

FAMILY = "sm90_nvfp4_grouped_gemm_decode"
__all__ = ["ARCHS", "FAMILY", "THREADS", "TILE_K", "TILE_M", "TILE_N", "compile"]

TILE_M = 16
NUM_STAGES = 8  # 11 KB per stage (16 x 64 B activations, 128 x 64 B weights, scales)


def compile(num_groups: int, out_dtype: str = "float16", alpha: bool = False):
    """Compile the decode tiles for a fixed group count and epilogue; returns the DSL
    object. The registry's split-K facts (what the runtime sizes grids and workspaces
    by) must be what the kernel does."""
    family = family_named(FAMILY)
    needs = (NARROW_SPLIT_K, NUM_TENSORMAPS * BYTES_PER_TENSORMAP + split_k.slot_bytes(
        TILE_N * TILE_M // NUM_CONSUMER_THREADS, NUM_CONSUMER_THREADS) + 4)  # fmt: skip
    if (family.split_k, family.workspace.bytes_per_block) != needs:
        raise ValueError(
            f"{FAMILY}: the registry says split_k {family.split_k}, workspace "
            f"{family.workspace.bytes_per_block} bytes per CTA; the kernel needs {needs}"
        )
    return _compile(num_groups, out_dtype, alpha, TILE_M, NUM_STAGES, family.blocks_per_sm)
