"""The NVFP4 activation quantizer written in jnp: a reference and a comparison for
:func:`nvfp4_aot.jax.quantize`, the baked quantizer kernel (issue #16) that pipelines
should use (one launch, the MoE layouts' scale segments written directly).

It follows the exact rules of :mod:`nvfp4_aot.quantize` (the numpy reference): the same
float32 operations in the same order (``s = (g * amax) / 6``; ``sf = E4M3_rn_sat(s)``;
``m = g / sf``; ``q = E2M1_rne_sat(x * m)``, the sign from ``x``), so its bytes equal
``quantize(x, g)``'s wherever XLA computes float32 division and the float32 -> E4M3
conversion correctly rounded (tests/test_jax.py checks this on the CPU backend,
tests/test_jax_gpu.py on the GPU). Unlike the reference it cannot raise inside
``jax.jit``: with the default global scale a tensor holding inf or NaN gets a NaN ``g``
(pass ``global_scale`` for such tensors, as the reference asks too).
"""

from __future__ import annotations

import jax.numpy as jnp

from ..blocked import SF_VEC_SIZE
from ..layouts import E4M3_MAX
from ..quantize import _FP4_TIE_UP, DEFAULT_GLOBAL_NUMERATOR, FP4_MAX

_E4M3_NAN = 0x7F


def quantize_standin(x, global_scale=None):
    """(packed uint8 (rows, k/2), scales uint8 (rows, k/16) row-major, g float32 0-d)
    of a (rows, k) float array; ``g`` defaults to ``2688 / amax(|x|)`` (1 if all zero)."""
    x32 = x.astype(jnp.float32)
    rows, k = x32.shape
    if k % SF_VEC_SIZE:
        raise ValueError(f"k (the last axis) must be a positive multiple of 16, got {k}")
    if global_scale is None:
        amax = jnp.max(jnp.abs(x32))
        g = jnp.where(amax == 0, jnp.float32(1), jnp.float32(DEFAULT_GLOBAL_NUMERATOR) / amax)
    else:
        g = jnp.asarray(global_scale, jnp.float32)
    blocks = x32.reshape(rows, k // SF_VEC_SIZE, SF_VEC_SIZE)
    block_amax = jnp.max(jnp.abs(blocks), axis=-1)  # NaN-propagating
    s = (g * block_amax) / jnp.float32(FP4_MAX)
    # E4M3_rn_sat: saturate to 448 before the (round-to-nearest-even) conversion; NaN 0x7F
    e4m3 = jnp.minimum(s, jnp.float32(E4M3_MAX)).astype(jnp.float8_e4m3fn)
    scales = jnp.where(jnp.isnan(s), jnp.uint8(_E4M3_NAN), e4m3.view(jnp.uint8))
    sf = scales.view(jnp.float8_e4m3fn).astype(jnp.float32)
    positive = sf > 0  # False for 0 and NaN
    multiplier = jnp.where(positive, g / jnp.where(positive, sf, jnp.float32(1)), jnp.float32(0))
    v = jnp.abs(blocks * multiplier[..., None])
    magnitude = jnp.zeros(v.shape, jnp.uint8)
    for threshold, inclusive in _FP4_TIE_UP:
        passed = v >= jnp.float32(threshold) if inclusive else v > jnp.float32(threshold)
        magnitude = magnitude + passed.astype(jnp.uint8)
    codes = (magnitude | (jnp.signbit(blocks).astype(jnp.uint8) << 3)).reshape(rows, k)
    packed = codes[:, 0::2] | (codes[:, 1::2] << 4)
    return packed, scales, g
