"""Checkpoint adapters: ModelOpt and compressed-tensors NVFP4 weights to B, SFB and alpha.

Host side, numpy only. Each adapter turns one checkpoint projection (or a stack of E
experts) into the operands our kernels take: ``b`` (packed FP4, unchanged), ``sfb`` and
``sfb_blocked`` (the E4M3 block scales, row-major and in the kernel's blocked layout) and
``alpha``, the FP32 factor per expert GEMM, ``C = alpha_e * A_e @ B_e.T``.

What the checkpoints hold (one projection, n output rows, k inputs; a MoE checkpoint
has one such set per expert and per projection)::

    ModelOpt (hf_quant_config "NVFP4")   compressed-tensors ("nvfp4-pack-quantized")
    weight         uint8 (n, k/2)        weight_packed        uint8 (n, k/2)
    weight_scale   float8_e4m3fn (n, k/16)  weight_scale      float8_e4m3fn (n, k/16)
    weight_scale_2 float32 ()            weight_global_scale  float32 (1,)
    input_scale    float32 ()            input_global_scale   float32 (1,)

Both pack two E2M1 codes per byte with the even-k element in the low nibble (our
layout, :func:`nvfp4_aot.layouts.pack_fp4`), and both store ``weight_scale`` row-major,
one byte per 16 consecutive k elements (our ``sfb`` before
:func:`~nvfp4_aot.layouts.scales_to_blocked`). They differ only in the global scale:
ModelOpt stores the multiplier ``s = amax / (6 * 448)``, compressed-tensors stores the
divisor ``g = 1 / s``.

Formulas (q: the E2M1 value of a code, sf: the E4M3 value of a block scale)::

    ModelOpt            W[r, j] = q[r, j] * sf[r, j // 16] * weight_scale_2
    compressed-tensors  W[r, j] = q[r, j] * sf[r, j // 16] / weight_global_scale
    activations         A[i, j] = qa[i, j] * sfa[i, j // 16] * s_a
    so                  A @ W.T = alpha * (Aq @ Bq.T),   Aq = qa * sfa, Bq = q * sf

    alpha = input_scale * weight_scale_2                       (ModelOpt)
          = 1 / (input_global_scale * weight_global_scale)     (compressed-tensors)

``b`` and ``sfb`` are the checkpoint bytes as they are; only alpha carries the global
scales. alpha is the float32 nearest the exact value (the float64 product of two
float32s is exact and is rounded once; the compressed-tensors reciprocal adds one
float64 rounding), so relative error <= 2**-24 (1 + 2**-28).

The activation side: alpha is right only if A is quantized with ``s_a = input_scale``
(``1 / input_global_scale``), i.e. ``sfa = E4M3(amax_block / 6 / s_a)`` and
``qa = E2M1(x / (sfa * s_a))`` (DESIGN.md, "Two-level NVFP4 scales"). The adapters
return that ``input_scale`` with the weights. An engine that quantizes activations once
for all experts before dispatch (a single s_a) passes the max over experts as
``input_scale`` (SGLang's FlashInfer paths take ``w13_input_scale.max()``).

Fused gate/up (w13). A MoE expert's gate and up projections read the same input and
are usually run as one GEMM of 2I rows (vLLM's ``w13``, gate rows first). Each carries
its own ``weight_scale_2``; our kernels take one alpha per expert GEMM, so the two must
share one scale. :func:`fuse_gate_up` keeps the larger one, ``S = max(s_gate, s_up)``,
and rescales the block scales of the other shard by ``rho = s / S <= 1``::

    sf' = E4M3_rne(sf * rho),   alpha = max(input_scale_gate, input_scale_up) * S

Keeping the larger scale makes rho <= 1, so no block scale passes 448; keeping the
smaller would overflow, since a shard's largest block scales are 448 by construction
(s = amax / (6 * 448)). ``sf'`` is exact when ``sf * rho`` is an E4M3 value: always when
the scales are equal, and for a power-of-two ratio unless a rescaled scale lands below
2**-6 off the subnormal grid (multiples of 2**-9). Otherwise the rounding is a real change
of the weights, bounded per block: ``|sf' - sf * rho| <= 2**-4 * sf * rho`` when
``sf * rho >= 2**-6`` (three mantissa bits: half an ulp), and ``<= 2**-10`` below it
(subnormal spacing 2**-9, so small scales may round to 0); the dequantized element moves
by at most that times ``|q| * S``. Because the issue asks for output that is never
silently wrong, :func:`fuse_gate_up` is exact or raises: with unequal scales that E4M3
cannot absorb it refuses, and the caller either runs gate and up as two GEMMs with their
own alpha (the two adapters' outputs as they are: exact, one more GEMM on the same A),
or passes ``allow_rounding=True`` to accept the bound above.

What the engines do, read in their sources (search corpus, 2025-2026 snapshots):

- vLLM ``vllm/model_executor/layers/quantization/modelopt.py`` (``ModelOptNvFp4FusedMoE``):
  ``w13_weight`` uint8 (E, 2I, H/2), ``w13_weight_scale`` float8_e4m3fn (E, 2I, H/16),
  ``w13_weight_scale_2`` float32 (E, 2), ``w13_input_scale`` float32 (E, 2), ``w2_*``
  alike with (E,) global scales. ``process_weights_after_loading`` keeps
  ``w13_weight_scale_2[:, 0]`` (the gate's) for both halves and only logs "w1_weight_scale_2
  must match w3_weight_scale_2. Accuracy may be affected." Its W4A16 linear method takes
  ``weight_scale_2.max()`` across fused shards, also without touching the block scales.
- vLLM ``.../compressed_tensors/compressed_tensors_moe/compressed_tensors_moe_w4a4_nvfp4.py``:
  ``w13_weight_packed`` uint8, ``w13_weight_scale`` float8_e4m3fn, ``w13_weight_global_scale``
  and ``w13_input_global_scale`` float32 (E, 2); keeps ``w13_weight_global_scale[:, 0]``
  with the same warning, then passes ``1.0 / global_scale`` on as scale_2.
- vLLM ``.../compressed_tensors/schemes/compressed_tensors_w4a4_nvfp4.py``: ``alpha =
  (1 / input_global_scale.max()) * (1 / weight_global_scale.max())``, with a comment that
  the max "is not enough: the fp8 scales should be recomputed accordingly".
- SGLang ``python/sglang/srt/layers/quantization/modelopt_quant.py`` (a fork's copy): the same
  ``[:, 0]`` choice, ``g1_alphas = w13_input_scale * w13_weight_scale_2``.
- compressed-tensors (vllm-project/compressed-tensors)
  ``src/compressed_tensors/compressors/nvfp4/helpers.py``: ``pack_fp4_to_uint8`` packs
  ``indices[:, 0] | indices[:, 1] << 4`` (low nibble first, bit 3 the sign);
  ``src/compressed_tensors/quantization/lifecycle/forward_helpers.py`` ``_dequantize``:
  ``scale = scale / global_scale``, then ``x_q * scale``.

Taking one shard's scale is the silent error this module refuses: the other half comes
out scaled by the ratio of the two scales.

Float8 scales may be given as uint8 bytes or as an ml_dtypes ``float8_e4m3fn`` array
(viewed as bytes; ml_dtypes is not imported). From torch, pass
``tensor.view(torch.uint8).numpy()``.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from .errors import InvalidProblemError
from .layouts import (
    E4M3_MAX,
    E4M3_VALUES,
    SF_VEC_SIZE,
    blocked_scale_bytes,
    scales_to_blocked,
)

__all__ = [
    "ExpertStack",
    "ExpertWeights",
    "from_compressed_tensors",
    "from_compressed_tensors_experts",
    "from_modelopt",
    "from_modelopt_experts",
    "fuse_gate_up",
    "round_to_e4m3",
]

_MODELOPT = ("weight", "weight_scale", "weight_scale_2", "input_scale")
_COMPRESSED = ("weight_packed", "weight_scale", "weight_global_scale", "input_global_scale")

# positive finite E4M3 values, increasing with the code 0x00..0x7E
_E4M3_POSITIVE = E4M3_VALUES[:0x7F]


@dataclass(frozen=True, eq=False)
class ExpertWeights:
    """One projection of one expert, ready for the kernel: C = alpha * A @ B.T.

    Attributes
    ----------
    b : uint8 (n, k // 2)
        Packed FP4, low nibble = even k (the checkpoint's bytes).
    sfb : uint8 (n, k // 16)
        E4M3 block scales, row-major.
    sfb_blocked : uint8 (blocked_scale_bytes(n, k),)
        ``sfb`` in the kernel's blocked layout.
    alpha : numpy.float32
        ``input_scale * weight_scale_2``, the factor the kernel applies to the FP32
        accumulator.
    input_scale : float
        The activation global scale A must be quantized with (A = qa * sfa * input_scale).
    weight_scale_2 : float
        The weight global multiplier (ModelOpt's field; ``1 / weight_global_scale``).
    """

    b: np.ndarray
    sfb: np.ndarray
    sfb_blocked: np.ndarray
    alpha: np.float32
    input_scale: float
    weight_scale_2: float

    @property
    def n(self) -> int:
        return self.b.shape[0]

    @property
    def k(self) -> int:
        return self.b.shape[1] * 2


@dataclass(frozen=True, eq=False)
class ExpertStack:
    """E experts of one projection, stacked as the MoE plans take them.

    ``b`` (E, n, k // 2), ``sfb`` (E, n, k // 16), ``sfb_blocked``
    (E, blocked_scale_bytes(n, k)), ``alpha`` float32 (E,), ``input_scale`` and
    ``weight_scale_2`` float64 (E,); each as in :class:`ExpertWeights`.
    """

    b: np.ndarray
    sfb: np.ndarray
    sfb_blocked: np.ndarray
    alpha: np.ndarray
    input_scale: np.ndarray
    weight_scale_2: np.ndarray

    @property
    def experts(self) -> int:
        return self.b.shape[0]

    @property
    def n(self) -> int:
        return self.b.shape[1]

    @property
    def k(self) -> int:
        return self.b.shape[2] * 2

    def expert(self, e: int) -> ExpertWeights:
        """Expert ``e`` as an :class:`ExpertWeights` (views, no copy)."""
        if not 0 <= e < self.experts:
            raise IndexError(f"expert {e} out of range for {self.experts} experts")
        return ExpertWeights(
            b=self.b[e],
            sfb=self.sfb[e],
            sfb_blocked=self.sfb_blocked[e],
            alpha=self.alpha[e],
            input_scale=float(self.input_scale[e]),
            weight_scale_2=float(self.weight_scale_2[e]),
        )


# inputs -----------------------------------------------------------------------------


def _packed_weight(weight, field: str, ndim: int) -> np.ndarray:
    weight = np.asarray(weight)
    if weight.dtype != np.uint8:
        raise TypeError(f"{field} must be packed FP4 bytes (uint8), got dtype {weight.dtype}")
    if weight.ndim != ndim or 0 in weight.shape:
        want = "(n, k/2)" if ndim == 2 else "(E, n, k/2)"
        raise InvalidProblemError(
            f"{field} must be a non-empty {want} array, got shape {weight.shape}"
        )
    return weight


def _e4m3_bytes(scales, field: str) -> np.ndarray:
    scales = np.asarray(scales)
    if scales.dtype == np.uint8:
        return scales
    if scales.dtype.name == "float8_e4m3fn" and scales.dtype.itemsize == 1:
        return scales.view(np.uint8)  # ml_dtypes float8, same bits
    raise TypeError(
        f"{field} must be E4M3 bytes (uint8) or a float8_e4m3fn array, got dtype {scales.dtype}"
    )


def _global_scales(value, field: str, experts: int, reciprocal: bool) -> np.ndarray:
    """One float64 multiplier per expert from a scalar, (1,), (E,) or (E, 1) input."""
    array = np.asarray(value)
    if not (array.dtype.kind in "fi" or array.dtype.name == "bfloat16"):
        raise TypeError(f"{field} must be a float scale, got dtype {array.dtype}")
    if array.shape not in ((), (1,), (experts,), (experts, 1)):
        allowed = "(), (1,)" if experts == 1 else f"(), (1,), ({experts},) or ({experts}, 1)"
        raise InvalidProblemError(f"{field} must have shape {allowed}, got {array.shape}")
    stored = np.broadcast_to(array.astype(np.float64).reshape(-1), (experts,))
    for e in np.flatnonzero(~(np.isfinite(stored) & (stored > 0))):
        where = f"{field}[{e}]" if array.size > 1 else field
        raise InvalidProblemError(f"{where} must be finite and > 0, got {float(stored[e])!r}")
    return 1.0 / stored if reciprocal else stored.copy()


def _alpha(input_scale: np.ndarray, weight_scale_2: np.ndarray, fields) -> np.ndarray:
    with np.errstate(over="ignore", under="ignore"):
        alpha = (input_scale * weight_scale_2).astype(np.float32)
    for e in np.flatnonzero(~np.isfinite(alpha) | (alpha == 0)):
        raise InvalidProblemError(
            f"expert {e}: alpha = {fields[3]} x weight scale = "
            f"{float(input_scale[e])!r} x {float(weight_scale_2[e])!r} is not a finite "
            "nonzero float32"
        )
    return alpha


def _check_scale_codes(sfb: np.ndarray, field: str) -> None:
    nan = (sfb & 0x7F) == 0x7F
    if nan.any():
        e, r, c = (int(i) for i in np.argwhere(nan)[0])
        raise InvalidProblemError(
            f"expert {e}: {field}[{r}, {c}] is the E4M3 NaN code 0x{int(sfb[e, r, c]):02X}"
        )


def _stack(fields, weight, weight_scale, scale_2, input_scale, *, stacked, reciprocal):
    name_w, name_sf, name_s2, name_in = fields
    b = _packed_weight(weight, name_w, 3 if stacked else 2)
    sfb = _e4m3_bytes(weight_scale, name_sf)
    if not stacked:
        b, sfb = b[None], sfb[None]
    experts, n, half_k = b.shape
    k = half_k * 2
    if k % SF_VEC_SIZE:
        raise InvalidProblemError(
            f"{name_w} has k = 2 x {half_k} = {k}, not a multiple of {SF_VEC_SIZE}"
        )
    if sfb.shape != (experts, n, k // SF_VEC_SIZE):
        want = (experts, n, k // SF_VEC_SIZE) if stacked else (n, k // SF_VEC_SIZE)
        got = sfb.shape if stacked else sfb.shape[1:]
        raise InvalidProblemError(
            f"{name_sf} for {name_w} of shape {np.asarray(weight).shape} must have shape "
            f"{want} (row-major, one byte per {SF_VEC_SIZE} k elements), got {got}"
        )
    _check_scale_codes(sfb, name_sf)
    w_scale = _global_scales(scale_2, name_s2, experts, reciprocal)
    a_scale = _global_scales(input_scale, name_in, experts, reciprocal)
    return _build(b, sfb, a_scale, w_scale, fields)


def _build(b, sfb, a_scale, w_scale, fields) -> ExpertStack:
    experts, n, half_k = b.shape
    blocked = np.empty((experts, blocked_scale_bytes(n, half_k * 2)), dtype=np.uint8)
    for e in range(experts):
        blocked[e] = scales_to_blocked(sfb[e])
    return ExpertStack(
        b=np.ascontiguousarray(b),
        sfb=np.ascontiguousarray(sfb),
        sfb_blocked=blocked,
        alpha=_alpha(a_scale, w_scale, fields),
        input_scale=a_scale,
        weight_scale_2=w_scale,
    )


# adapters ---------------------------------------------------------------------------


def from_modelopt(weight, weight_scale, weight_scale_2, input_scale) -> ExpertWeights:
    """One ModelOpt NVFP4 projection to kernel operands.

    Parameters
    ----------
    weight : uint8 (n, k // 2)
        Packed E2M1, low nibble first.
    weight_scale : uint8 or float8_e4m3fn (n, k // 16)
        Row-major block scales.
    weight_scale_2, input_scale : float, shape () or (1,)
        The global multipliers (``amax / (6 * 448)``).

    Returns
    -------
    ExpertWeights
        ``alpha = float32(input_scale * weight_scale_2)``.
    """
    stack = _stack(
        _MODELOPT, weight, weight_scale, weight_scale_2, input_scale,
        stacked=False, reciprocal=False,
    )  # fmt: skip
    return stack.expert(0)


def from_modelopt_experts(weight, weight_scale, weight_scale_2, input_scale) -> ExpertStack:
    """E stacked ModelOpt experts: ``weight`` (E, n, k // 2), ``weight_scale``
    (E, n, k // 16), global scales of shape (E,), (E, 1) or one for all. See
    :func:`from_modelopt`."""
    return _stack(
        _MODELOPT, weight, weight_scale, weight_scale_2, input_scale,
        stacked=True, reciprocal=False,
    )  # fmt: skip


def from_compressed_tensors(
    weight_packed, weight_scale, weight_global_scale, input_global_scale
) -> ExpertWeights:
    """One compressed-tensors NVFP4 projection to kernel operands.

    The layout is ModelOpt's; the global scales are stored as divisors, so
    ``weight_scale_2 = 1 / weight_global_scale``, ``input_scale = 1 / input_global_scale``
    and ``alpha = float32(1 / (input_global_scale * weight_global_scale))``.
    """
    stack = _stack(
        _COMPRESSED, weight_packed, weight_scale, weight_global_scale, input_global_scale,
        stacked=False, reciprocal=True,
    )  # fmt: skip
    return stack.expert(0)


def from_compressed_tensors_experts(
    weight_packed, weight_scale, weight_global_scale, input_global_scale
) -> ExpertStack:
    """E stacked compressed-tensors experts; see :func:`from_compressed_tensors` and
    :func:`from_modelopt_experts`."""
    return _stack(
        _COMPRESSED, weight_packed, weight_scale, weight_global_scale, input_global_scale,
        stacked=True, reciprocal=True,
    )  # fmt: skip


# gate/up fusion ---------------------------------------------------------------------


def round_to_e4m3(values) -> np.ndarray:
    """Round float values to the nearest E4M3 (FN) byte, ties to even, saturating at 448.

    Subnormals are kept (spacing 2**-9); magnitudes below 2**-10 round to zero, exactly
    2**-10 to zero (the even code). The sign is kept (-0.0 gives 0x80). NaN raises.
    """
    values = np.asarray(values, dtype=np.float64)
    if np.isnan(values).any():
        raise ValueError("cannot round NaN to E4M3")
    magnitude = np.minimum(np.abs(values), E4M3_MAX)
    hi = np.minimum(np.searchsorted(_E4M3_POSITIVE, magnitude), len(_E4M3_POSITIVE) - 1)
    lo = np.maximum(hi - 1, 0)
    below = magnitude - _E4M3_POSITIVE[lo]
    above = _E4M3_POSITIVE[hi] - magnitude
    take_lo = (below < above) | ((below == above) & (lo % 2 == 0))
    codes = np.where(take_lo, lo, hi)
    return (codes | (np.signbit(values) << 7)).astype(np.uint8)


def _rescale_codes(sfb: np.ndarray, ratio: Fraction) -> tuple[np.ndarray, bool]:
    """Map every code of ``sfb`` to E4M3_rne(value * ratio); True if all are exact."""
    table = np.arange(256, dtype=np.uint8)
    exact = True
    for code in np.unique(sfb):
        value = Fraction(float(E4M3_VALUES[code]))
        target = value * ratio
        new = round_to_e4m3(float(target))
        table[code] = new
        exact &= Fraction(float(E4M3_VALUES[new])) == target
    return table[sfb], exact


def fuse_gate_up(gate, up, *, allow_rounding: bool = False):
    """Fuse gate and up projections into one GEMM (rows: gate, then up) with one alpha.

    Parameters
    ----------
    gate, up : ExpertWeights or ExpertStack (both the same kind, same k and experts)
        From the adapters above, each with its own ``weight_scale_2``.
    allow_rounding : bool
        False (default): the result equals the two checkpoint projections exactly, or
        :class:`~nvfp4_aot.errors.InvalidProblemError` is raised naming the expert; run
        the two as separate GEMMs then. True: block scales that E4M3 cannot rescale
        exactly are rounded to nearest (the bound in the module docstring).

    Returns
    -------
    ExpertWeights or ExpertStack
        ``n = n_gate + n_up``; ``weight_scale_2 = S = max(s_gate, s_up)``,
        ``input_scale = max`` of the two, ``alpha = float32(input_scale * S)``; the
        shard with the smaller scale has its block scales multiplied by ``s / S``.
    """
    single = isinstance(gate, ExpertWeights)
    if single != isinstance(up, ExpertWeights) or not (
        single or (isinstance(gate, ExpertStack) and isinstance(up, ExpertStack))
    ):
        raise TypeError(
            "gate and up must both be ExpertWeights or both be ExpertStack, got "
            f"{type(gate).__name__} and {type(up).__name__}"
        )
    if single:
        gate, up = _as_stack(gate), _as_stack(up)
    if gate.k != up.k or gate.experts != up.experts:
        raise InvalidProblemError(
            f"gate (experts={gate.experts}, k={gate.k}) and up (experts={up.experts}, "
            f"k={up.k}) must have the same experts and k"
        )
    experts = gate.experts
    scale = np.maximum(gate.weight_scale_2, up.weight_scale_2)
    sf_gate, sf_up = gate.sfb.copy(), up.sfb.copy()
    for e in range(experts):
        s_gate, s_up, big = (
            float(x) for x in (gate.weight_scale_2[e], up.weight_scale_2[e], scale[e])
        )
        for name, s, sf in (("gate", s_gate, sf_gate), ("up", s_up, sf_up)):
            if s == big:
                continue
            sf[e], exact = _rescale_codes(sf[e], Fraction(s) / Fraction(big))
            if not exact and not allow_rounding:
                raise InvalidProblemError(
                    f"expert {e}: gate and up weight_scale_2 differ ({s_gate!r} vs "
                    f"{s_up!r}, ratio {big / s:.6g}) and the {name} block scales cannot be "
                    "rescaled to one scale exactly in E4M3. Run gate and up as two GEMMs, "
                    "each with its own alpha, or pass allow_rounding=True (each rescaled "
                    "block scale then rounds to nearest: relative error <= 2**-4, absolute "
                    "<= 2**-10 below 2**-6)"
                )
    fused = _build(
        np.concatenate([gate.b, up.b], axis=1),
        np.concatenate([sf_gate, sf_up], axis=1),
        np.maximum(gate.input_scale, up.input_scale),
        scale,
        _MODELOPT,
    )
    return fused.expert(0) if single else fused


def _as_stack(w: ExpertWeights) -> ExpertStack:
    return ExpertStack(
        b=w.b[None],
        sfb=w.sfb[None],
        sfb_blocked=w.sfb_blocked[None],
        alpha=np.array([w.alpha], dtype=np.float32),
        input_scale=np.array([w.input_scale]),
        weight_scale_2=np.array([w.weight_scale_2]),
    )
