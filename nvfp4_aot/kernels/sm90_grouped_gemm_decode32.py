"""Hopper (sm_90a) NVFP4 grouped GEMM for decode with 32-row activation tiles.

:mod:`.sm90_grouped_gemm_decode` with tiles of 32 rows, two CTAs per SM: a group of
13-32 rows runs one tile per N tile where 16-row tiles decode its weights twice (on
the H200, 10-40 % faster than the 16-row or 128-row tiles there; :mod:`nvfp4_aot.selection`).
The decoded-activation buffers double, so six raw stages fit beside them.
"""

from .sm90_common import ARCHS, THREADS, TILE_K, TILE_N
from .sm90_grouped_gemm_decode import compile_tiles

FAMILY = "sm90_nvfp4_grouped_gemm_decode32"
__all__ = ["ARCHS", "FAMILY", "THREADS", "TILE_K", "TILE_M", "TILE_N", "compile", "compile_routed"]

TILE_M = 32
NUM_STAGES = 6  # 12 KB per stage (32 x 64 B activations, 128 x 64 B weights, scales)


def compile(num_groups: int, out_dtype: str = "float16", alpha: bool = False):
    """Compile the 32-row decode tiles for a fixed group count and epilogue; returns the
    DSL object."""
    return compile_tiles(FAMILY, TILE_M, NUM_STAGES, num_groups, out_dtype, alpha)


def compile_routed(num_groups: int, out_dtype: str = "float16", alpha: bool = False):
    """Compile the routed 32-row decode tiles (MoE plans of up to ``num_groups`` experts)."""
    return compile_tiles(FAMILY, TILE_M, NUM_STAGES, num_groups, out_dtype, alpha, True)
