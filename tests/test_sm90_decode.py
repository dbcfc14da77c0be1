"""The sm_90a GEMMs' FP4 decode, on CPU: the inline PTX that every sm_90a family bakes
(``sm90_common._DECODE_WORD_PTX`` / ``_DECODE_SCALES_PTX``) run by the numpy PTX
interpreter, against the E2M1 and E4M3 tables. The decode must be exact: the GEMM's
products are exact only if every decoded FP16 value is fp4 x scale x 2^-7 to the bit
(each operand carries the 2^-7; the epilogue multiplies the accumulator by 2^14). The
kernel module imports the DSL, so this skips without the build extra; the H200 runs
check the GEMMs' products."""

from __future__ import annotations

import numpy as np
import pytest

from nvfp4_aot.layouts import E4M3_VALUES, FP4_VALUES
from ptx_interpreter import PtxBlock

pytest.importorskip("cutlass", reason="the build extra (nvidia-cutlass-dsl) is not installed")

from nvfp4_aot.kernels import sm90_common  # noqa: E402

# register s of decode_word holds nibbles (q_lo, q_hi) = WORD_NIBBLES[s] (its docstring)
WORD_NIBBLES = ((0, 2), (4, 6), (1, 3), (5, 7))


def _words(rng) -> np.ndarray:
    """Every byte value in every byte of a word, and random words."""
    j = np.arange(256, dtype=np.uint64)
    spread = (
        j | ((j * 37 + 11) % 256) << 8 | ((j * 101 + 7) % 256) << 16 | ((j * 211 + 3) % 256) << 24
    )
    rotations = [(spread << np.uint64(8 * r) | spread >> np.uint64(32 - 8 * r)) & 0xFFFFFFFF
                 for r in range(4)]  # fmt: skip
    random = rng.integers(0, 2**32, 4096, dtype=np.uint64)
    return np.concatenate(rotations + [random])


def _scale_pairs() -> np.ndarray:
    """Every E4M3 byte as the low and as the high scale of a pair."""
    s = np.arange(256, dtype=np.uint64)
    return np.concatenate([s | ((s * 7 + 1) % 256) << 8, ((s * 13 + 5) % 256) | s << 8])


def test_scales_are_e4m3_times_2_to_the_7_broadcast():
    pairs = _scale_pairs()
    out = PtxBlock(sm90_common._DECODE_SCALES_PTX).run({"$2": pairs})
    for reg, shift in (("$0", 0), ("$1", 8)):
        code = ((pairs >> np.uint64(shift)) & np.uint64(0xFF)).astype(np.intp)
        expected = (E4M3_VALUES[code] * 2.0**7).astype(np.float16).view(np.uint16)
        value = out[reg]
        for half in (0, 16):
            got = ((value >> np.uint64(half)) & np.uint64(0xFFFF)).astype(np.uint16)
            finite = np.isfinite(E4M3_VALUES[code])
            assert np.array_equal(got[finite], expected[finite]), reg
            assert np.isnan(got[~finite].view(np.float16)).all(), reg  # E4M3 NaN stays NaN


@pytest.mark.parametrize("high_scale", [False, True])
def test_every_nibble_decodes_to_fp4_times_scale_exactly(high_scale):
    rng = np.random.default_rng(17)
    words = _words(rng)
    pairs = _scale_pairs()
    scale_regs = PtxBlock(sm90_common._DECODE_SCALES_PTX).run({"$2": pairs})
    scale2 = scale_regs["$1" if high_scale else "$0"]
    code = ((pairs >> np.uint64(8 if high_scale else 0)) & np.uint64(0xFF)).astype(np.intp)
    finite = np.isfinite(E4M3_VALUES[code])
    # every word with every finite scale (the kernel's scales are finite E4M3)
    w = np.repeat(words, finite.sum())
    s2 = np.tile(scale2[finite], words.size)
    scale = np.tile(E4M3_VALUES[code][finite], words.size)
    out = PtxBlock(sm90_common._DECODE_WORD_PTX).run({"$4": w, "$5": s2})
    for reg, nibbles in zip(("$0", "$1", "$2", "$3"), WORD_NIBBLES):
        for half, q in zip((0, 16), nibbles):
            nibble = ((w >> np.uint64(4 * q)) & np.uint64(0xF)).astype(np.intp)
            expected = (FP4_VALUES[nibble] * scale * 2.0**-7).astype(np.float16)
            # exact in FP16: <= 5 significant bits, 2^-17 .. 21
            assert np.array_equal(expected.astype(np.float64), FP4_VALUES[nibble] * scale / 128)
            got = ((out[reg] >> np.uint64(half)) & np.uint64(0xFFFF)).astype(np.uint16)
            bad = got != expected.view(np.uint16)
            assert not bad.any(), (
                f"register {reg} half {half // 16}: word {int(w[bad][0]):#010x} scale "
                f"{scale[bad][0]} gave {got[bad][0]:#06x}, expected {expected.view(np.uint16)[bad][0]:#06x}"
            )
