"""Hopper (sm_90a) NVFP4 grouped GEMM with 64-row activation tiles.

:mod:`.sm90_grouped_gemm_decode` with tiles of 64 rows, one CTA per SM: a group of
33-64 rows runs one tile per N tile where the 128-row tiles spend half their MMA and
activation decode on rows past the group's end; the smaller decoded-activation buffers
leave room for more raw stages (:mod:`nvfp4_aot.selection`).
"""

from .sm90_common import ARCHS, THREADS, TILE_K, TILE_N
from .sm90_grouped_gemm_decode import compile_tiles

FAMILY = "sm90_nvfp4_grouped_gemm_decode64"
__all__ = ["ARCHS", "FAMILY", "THREADS", "TILE_K", "TILE_M", "TILE_N", "compile"]

TILE_M = 64
NUM_STAGES = 10  # 14 KB per stage (64 x 64 B activations, 128 x 64 B weights, scales)


def compile(num_groups: int, out_dtype: str = "float16", alpha: bool = False):
    """Compile the 64-row tiles for a fixed group count and epilogue; returns the DSL
    object."""
    return compile_tiles(FAMILY, TILE_M, NUM_STAGES, num_groups, out_dtype, alpha)
