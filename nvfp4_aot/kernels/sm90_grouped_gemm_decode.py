"""Hopper (sm_90a) NVFP4 grouped GEMM for decode: activation tiles of 16 rows.

The kernel of :mod:`.sm90_grouped_gemm` (read its docstring) compiled with an
activation tile of ``TILE_M`` = 16 rows instead of 128: the wgmma N operand and the
activation decode shrink 8x, so a group with a few tokens (a MoE expert in decode)
no longer pays the MMA and decode work of 128 rows while the FP4 weights stream by.
The freed shared memory holds more raw stages. Activation scales are still loaded as
the 128-row blocked-scale block holding the tile (a tile's rows lie in one block); a
group with more rows than the tile runs ``ceil(m / 16)`` tiles per N tile, each
decoding the weights again, so plans choose this family only when the expected rows
per group are few (:mod:`nvfp4_aot.selection`); :mod:`.sm90_grouped_gemm_decode32` is
the same with 32-row tiles.
"""

from . import family_named
from .sm90_common import ARCHS, THREADS, TILE_K, TILE_N
from .sm90_grouped_gemm import compile as _compile
from .sm90_grouped_gemm import compile_routed as compile_routed_kernel

FAMILY = "sm90_nvfp4_grouped_gemm_decode"
__all__ = ["ARCHS", "FAMILY", "THREADS", "TILE_K", "TILE_M", "TILE_N", "compile", "compile_routed"]

TILE_M = 16
NUM_STAGES = 8  # 11 KB per stage (16 x 64 B activations, 128 x 64 B weights, scales)


def compile_tiles(family: str, tile_m: int, num_stages: int, num_groups: int, out_dtype, alpha,
                  routed: bool = False):  # fmt: skip
    """The per-CTA kernel with ``tile_m``-row tiles and ``num_stages`` raw stages, as many
    CTAs per SM as ``family`` is registered with (``routed``: its routed variant, which
    builds the MoE group tables itself); returns the DSL object."""
    blocks_per_sm = family_named(family).blocks_per_sm
    build = compile_routed_kernel if routed else _compile
    return build(num_groups, out_dtype, alpha, tile_m, num_stages, blocks_per_sm)


def compile(num_groups: int, out_dtype: str = "float16", alpha: bool = False):
    """Compile the decode tiles for a fixed group count and epilogue; returns the DSL
    object."""
    return compile_tiles(FAMILY, TILE_M, NUM_STAGES, num_groups, out_dtype, alpha)


def compile_routed(num_groups: int, out_dtype: str = "float16", alpha: bool = False):
    """Compile the routed decode tiles (MoE plans of up to ``num_groups`` experts)."""
    return compile_tiles(FAMILY, TILE_M, NUM_STAGES, num_groups, out_dtype, alpha, True)
