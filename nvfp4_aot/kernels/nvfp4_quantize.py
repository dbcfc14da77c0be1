"""NVFP4 activation quantizer: BF16/FP16 rows -> packed E2M1 codes + blocked E4M3 scales.

Per 16-element block it does, in IEEE float32 and in this order, exactly the operations of
the numpy reference :func:`nvfp4_aot.quantize.quantize` (whose docstring states the
formulas and the zero/inf/NaN rules), so the bytes are the reference's bytes:

    amax = max|x_i| (NaN-propagating)   s = (g * amax) / 6         mul.rn, then y h + RN(y l)
    sf   = e4m3_rn_satfinite(s), 0x7F if amax is NaN              cvt.rn.satfinite.e4m3x2
    m    = g / e4m3(sf) if e4m3(sf) > 0 else 0                     div.rn's value (a CTA table)
    q_i  = E2M1_rne_sat(|x_i| * m), sign bit = the sign bit of x_i
           mul.rn, then three saturated pieces of q rounded onto 2^23 (_code_lines)

The block math is inline PTX (no fast-math division, no flush to zero, no hardware E2M1
conversion, which sm_90 lacks), the same instructions on every arch. m depends only on
the scale byte, so each CTA puts g / v for all 256 E4M3 values v into shared memory once
and a block looks its multiplier up: v and y = RN(1 / v) are taken before the PDL wait
(they need no g), and after it q = RN(g y), its exact residual r = g - v q and RN(q + r y)
give the correctly rounded quotient (Markstein's correction) for 2^-90 <= |g| < 2^91;
any other g takes div.rn (the same branch for the whole grid). Dividing after the wait
had kept the table, and so the first unit, waiting: 0.1-0.3 µs a run on most of the
1024-row and decode-size rows (H200, session 21). E2M1 rounding is 8 FMA-pipe
instructions an element (was 16: seven threshold steps and their sum), all exact: see
_code_lines.

Three forms (plan word ``Q_FORM``; :mod:`nvfp4_aot.quantize_layout` has the words):

* plain: row t of X -> row t of the codes; scale rows past T up to a multiple of 128 zero.
* contiguous (MoE, tokens sorted by expert): output row i reads X row ``index[i]`` (or i
  without an index), expert e owns output rows offsets[e] .. offsets[e + 1] and scale rows
  sf_offset[e] + (0 .. round_up(m_e, 128)), sf_offset[e] = sum_{j<e} round_up(m_j, 128),
  the padding rows' scales zero: exactly what the contiguous MoE GEMM reads.
* masked: expert e owns rows e * max_m + (0 .. masked_m[e]) of X (E, max_m, k) and of
  the codes, and scale rows e * round_up(max_m, 128) + (0 .. masked_m[e]): no padding,
  since the masked GEMM writes no C row at or past masked_m[e] and those rows' codes are
  left as they were (on a decode routing, E = 128 and max_m = 8, zeroing them wrote 2 MB
  of the run's 7.3 MB).

Device counts are clamped as the routing kernel clamps them (0 <= offsets[e] <=
offsets[e + 1] <= capacity, 0 <= masked_m[e] <= max_m), index entries to the input's
rows, and no scale row past the plan's buffer is written, so no routing can make the
kernel read or write outside the buffers the plan checked.

Work: a warp takes one unit (a token row x a segment of 128 blocks, 4 KB of input) at a
time; lane l owns blocks l, l + 32, l + 64, l + 96 of the segment. Plans whose units
would leave most warps idle (decode sizes) take segments of 64 or 32 blocks (plan word
Q_SEGMENT_BLOCKS, quantize_layout.unit_blocks): 2 or 1 blocks a lane, a row over more
warps, by the same short-segment code paths. The units are the run's token rows only
(MoE: this routing's, not the plan's worst case: a decode routing, E = 128 at 16 tokens,
has 1.0 K scale rows with tokens or padding of the plan's 16.3 K). The padding scale rows
(contiguous: an expert's rows past its tokens to the end of its 128-row atom; plain: past
T) are zeroed before the units, a warp a 512-byte atom with 16-byte stores
(zero_padding): as units of their own, their loop beside the token math made every unit
4-10 % slower (session 16, docs/h200/session16/quantizer.md). A plain run with T a
multiple of 128 has none and skips the loop by a uniform branch (1024 x 4096: 3.79 ->
3.69 us, H100, session 30: the loop's presence cost time although it zeroed nothing).
Each warp has its own ring of STAGES shared-memory stages: its lane 0 starts one bulk
copy (cp.async.bulk, an mbarrier per stage) of each token row segment, STAGES - 1 units
ahead of the one the warp quantizes, so the input waits in shared memory, not in
registers. A warp describes its next 32 units at once (lane l the l-th: the segment
search and the index entry, the routing's dependent loads), and takes each unit's
description by shuffles. Round i of the grid's warps takes the next step units, warp w
the one at (w + i) mod step, so that no warp (and no scheduler) always gets a row's short
last segment (k = 7168: 3.5 segments). For the MoE forms each CTA first turns the device
counts into the experts' scale segments and unit rows in shared memory (scans) and finds
a unit row's expert by binary search there. A masked plan whose slots (E x max_m x
segments) fit one round of the grid skips that before its first copies: its units are the
slots, described from the plan before the PDL wait like a plain run's, each slot's copy
starts right after the wait, each warp loads its slot's count while the copy flies (no
scans: a slot needs only its own expert's count) and a slot past that count is skipped (E
= 128, max_m = 8: 4.4 -> 3.6 us a run with the padding gone too, H200, session 28; the
per-warp count instead of the CTA's scans 3.69 -> 3.48, H100, session 30). The kernel is
compiled once per form and dtype (constexpr), so no form's bookkeeping is in another's
code.

The math is issue-bound: per block of 16 elements about 181 SASS instructions (sm_90a; a
lane's four blocks and their addressing 740), 128 of them the 8 FMA-pipe steps an
element (convert, multiply, three pieces, three roundings). The scale byte takes y / 6 as
y h + RN(y l) with h + l = 1/6 (two FMA-pipe steps where div.rn's fast path took three
and a clamp) and lets the E4M3 conversion turn a NaN into 0x7F (no compare and select),
and the amax's sign is dropped by operand modifiers (no mask): 20 instructions fewer a
lane's four blocks, 3-4 % a run at T = 1024 (H200, session 22); cuts of a few more that
ptxas scheduled worse were slower (docs/h200/session22/README.md). A lane's four blocks
are one basic block (the stores are predicated, the division has no slow-path branch),
so that one block's scale chain (amax, division, E4M3 rounding, table lookup) overlaps
another's element math (two blocks at a time: both scale chains, then both blocks'
element math on the words read again); no instruction clears a sign bit of an element
(amax by max.xorsign.abs, |x| an operand modifier of the multiply), and the codes are
gathered into bytes with byte permutes. A row's short last segment (k = 7168: 3.5
segments a row) runs a straight-line copy of the math for the lane's first 2 or 1
blocks only. 8 warps a CTA, 2 CTAs an SM (128 registers, 79 KB of shared memory a CTA):
docs/h200/session12/quantizer.md, docs/h200/session15/quantizer.md and
docs/h200/session16/quantizer.md have the configurations measured.

Launched with programmatic stream serialization (``use_pdl``): the grid may start while
the kernel before it still runs, reads only the plan and run words (the host's, copied
before the launch) until ``griddepcontrol.wait``, and lets the kernel after it launch at
once, so a run's launch and prologue overlap the tail of the kernel before it (session
19: 0.3-0.4 µs a run at T = 1024 on the H200, docs/h200/session19/README.md). All that
needs only those words comes before the wait: the plan words' loads, the routing's run
words (the counts' and the index's pointers: read after the wait, the counts' load had to
wait for its pointer's load, 0.2-0.3 µs of every MoE decode run on the H100, session 30),
the mbarriers, the multiplier table's reciprocals and a plain or masked slot run's first
unit descriptions (their integer divisions); after it the global scale's load is issued
and the first copies start at once, without the proxy fence (their stages have not been
read; the fence's MEMBAR would wait for that load). A warp's first copy then starts ~0.24
µs after the wait instead of ~0.86 (session 20's per-warp timeline: 0.1-0.4 µs a run,
docs/h200/session20/README.md).
"""

import cutlass
import cutlass.cute as cute
from cutlass.cute.runtime import make_ptr
from cutlass.cutlass_dsl import dsl_user_op
from cutlass.memory import SmemAllocator

from ..moe_layout import LAYOUTS
from ..quantize_layout import (
    FORM_CONTIGUOUS,
    FORM_MASKED,
    FORM_PLAIN,
    MAX_EXPERTS,
    Q_BLOCKS,
    Q_BLOCKS_PADDED,
    Q_CAPACITY,
    Q_COL_TILES,
    Q_EXPERT_SCALE_ROWS,
    Q_EXPERTS,
    Q_FORM,
    Q_FP16,
    Q_INPUT_ROWS,
    Q_OUT_ROW_BYTES,
    Q_ROW_STRIDE_BYTES,
    Q_SEGMENT_BLOCKS,
    Q_SEGMENTS,
    Q_UNITS,
    Q_WORDS,
    R_GLOBAL_SCALE,
    R_INDEX,
    R_OUT,
    R_ROUTING,
    R_SCALES,
    R_WORDS,
    R_X,
    SEGMENT_BLOCKS,
)
from . import family_named
from .cta_scan import block_scan
from .inline_ptx import asm, asm_i32s, ir_i32, ir_i64, lds_v4, mbar_wait
from .moe_routing import expert_rows

FAMILY = "nvfp4_quantize"
ARCHS = ("sm_90a", "sm_100a", "sm_103a")
THREADS = 256
WARPS = THREADS // 32
BLOCKS_PER_LANE = SEGMENT_BLOCKS // 32
STAGE_BYTES = SEGMENT_BLOCKS * 32  # the widest unit: a row segment of SEGMENT_BLOCKS blocks
INTERLEAVE = 2  # blocks of a lane quantized side by side
STAGES = 2  # a warp's ring: one unit quantized while the next one is copied in
AHEAD = STAGES - 1
CTAS_PER_SM = family_named(FAMILY).blocks_per_sm  # the registry's: shared memory bounds it
# a unit's description: its kind, input row, output row, scale row and segment
DESCRIPTOR = 5
F_KIND, F_IN_ROW, F_OUT_ROW, F_SCALE_ROW, F_SEGMENT = range(DESCRIPTOR)
SF_ROWS = 128  # rows of a blocked-scale atom (512 bytes: 32 x 16)
SEARCH_STEPS = (MAX_EXPERTS).bit_length()  # binary search over <= MAX_EXPERTS segments

# No tiles of its own; the bake records a tile shape for every family.
TILE_M, TILE_N, TILE_K = 1, 1, 1

# kinds of a unit: nothing to do (past the plan's scale rows), a token row segment
ROW_NONE, ROW_TOKENS = 0, 1


# ---------------------------------------------------------------------------------------
# inline PTX
# ---------------------------------------------------------------------------------------

# 1/6 as the float32 pair RD(1/6) + RN(1/6 - RD(1/6)): y / 6 (6: E2M1's max) in two steps
_SIXTH_HI, _SIXTH_LO = "0f3E2AAAAA", "0f322AAAAB"
_HALF, _FOUR, _TWO = "0f3F000000", "0f40800000", "0f40000000"
_MINUS_ONE, _MINUS_TWO = "0fBF800000", "0fC0000000"
_MAGIC = "0f4B000000"  # 2^23: float32 bits of 2^23 + c are 0x4B000000 + c for 0 <= c < 2^23


def _code_lines(q: str, t: str) -> list[str]:
    """Set ``t`` to the float32 bits of 2^23 + the E2M1 magnitude code of float32 q >= 0
    (or NaN): the code sits in t's low byte. The code is RNE(2 min(q, 2)) for q <= 2,
    4 + RNE(q - 2) on [2, 4] and 6 + RNE((q - 4) / 2) on [4, 6], saturating at 7: three
    saturated pieces (exact: q / 2, q / 2 - 1 and q / 2 - 2 are representable where they
    are not clamped; NaN gives 0), each rounded onto the integers by adding it to 2^23 +
    the integer the pieces before it reached, whose parity is the E2M1 code's, so ties go
    to the even code. All of it runs on the FMA pipe (compares, selects and integer adds
    would load the half-rate ALU pipe). tests/test_quantizer.py checks this against the
    reference for every float32 near the ties (NVFP4_AOT_EXHAUSTIVE=1: all 2^31 of q >= 0
    and NaN)."""
    return [
        f"mul.rn.sat.f32 ca, {q}, {_HALF};",  # min(q, 2) / 2
        f"fma.rn.sat.f32 cb, {q}, {_HALF}, {_MINUS_ONE};",  # clamp(q - 2, 0, 2) / 2
        f"fma.rn.sat.f32 cc, {q}, {_HALF}, {_MINUS_TWO};",  # clamp(q - 4, 0, 2) / 2
        f"fma.rn.f32 {t}, ca, {_FOUR}, {_MAGIC};",  # 2^23 + RNE(2 min(q, 2))
        f"fma.rn.f32 {t}, cb, {_TWO}, {t};",  # + RNE(clamp(q - 2, 0, 2)), ties to even
        f"add.rn.f32 {t}, {t}, cc;",  # + RNE(clamp(q - 4, 0, 2) / 2) (0 or 1)
    ]


def _code_ptx() -> str:
    """PTX of one code (tests): $1 q (float32 bits) -> $0 its E2M1 magnitude code."""
    lines = ["{", ".reg .b32 ca, cb, cc, t;"]
    lines += _code_lines("$1", "t")
    lines += ["and.b32 $0, t, 255;", "}"]
    return "\n".join(lines)


def _scale_byte_lines(y: str, out: str) -> list[str]:
    """Set ``out`` to the E4M3 byte (RNE, saturating; NaN -> 0x7F) of RN(y / 6) for
    float32 y = g * amax >= 0, +inf or NaN, without a division: s = RN(y h + RN(y l))
    with h + l = 1/6 to 2^-50 (h = RD(1/6), l > 0) is y / 6 correctly rounded wherever
    y / 6 is normal (y / 6 is never a float32 midpoint, and it is within y 2^-49 of this
    sum), and where it is not the byte is E4M3 0 either way. +inf stays +inf (l > 0: no
    inf - inf), which saturates to 448; a NaN y (a NaN in the block) reaches the
    conversion, whose NaN is the E4M3 NaN 0x7F: no clamp, compare or select. The
    conversion's other byte is E4M3(0), so the 16 bits are the byte. No branch (the
    division's slow-path call split every block's code in two); tests/test_quantizer.py
    checks the byte against the reference for every float32 y >= 0 and NaN."""
    return [
        f"mul.rn.f32 p6, {y}, {_SIXTH_LO};",
        f"fma.rn.f32 s6, {y}, {_SIXTH_HI}, p6;",
        "mov.b32 z6, 0;",
        "cvt.rn.satfinite.e4m3x2.f32 h6, z6, s6;",
        f"cvt.u32.u16 {out}, h6;",
    ]


_SCALE_BYTE_REGS = [".reg .b32 p6, s6, z6;", ".reg .b16 h6;"]


def _scale_byte_ptx() -> str:
    """PTX of the scale byte (tests): $1 y = g * amax (float32 bits) -> $0."""
    return "\n".join(["{", *_SCALE_BYTE_REGS, *_scale_byte_lines("$1", "$0"), "}"])


def _scale_ptx(fp16: bool) -> str:
    """PTX of a block's scale byte: $1..$8 its 16 inputs as 8 x (2 x 16-bit) words,
    element 2i in the low half of word i; $9 g (float32 bits). Out: $0 the E4M3 byte."""
    lines = ["{", ".reg .b32 r<4>, t, amax, y;", ".reg .b16 hl, hh;"]
    lines += _SCALE_BYTE_REGS
    # amax: packed NaN-propagating max of the magnitudes (exact: a max is a selection;
    # .xorsign.abs compares |a| and |b| and gives the result a sign, which the float32
    # max's |.| operand modifiers drop), then the larger half as float32
    vmax = "max.NaN.xorsign.abs." + ("f16x2" if fp16 else "bf16x2")
    lines += [f"{vmax} r{i}, ${1 + 2 * i}, ${2 + 2 * i};" for i in range(4)]
    lines += [f"{vmax} r0, r0, r1;", f"{vmax} r2, r2, r3;", f"{vmax} r0, r0, r2;"]
    if fp16:
        lines += ["mov.b32 {hl, hh}, r0;", "cvt.f32.f16 t, hl;", "cvt.f32.f16 amax, hh;"]
    else:
        lines += ["shl.b32 t, r0, 16;", "and.b32 amax, r0, 0xFFFF0000;"]
    lines += ["abs.f32 t, t;", "abs.f32 amax, amax;", "max.NaN.f32 amax, amax, t;"]
    # a NaN in the block makes y NaN (whatever g is), which the byte turns into 0x7F
    lines += ["mul.rn.f32 y, $9, amax;", *_scale_byte_lines("y", "$0"), "}"]
    return "\n".join(lines)


# $0 v = e4m3(sf) and $1 RN(1 / v) for a scale byte $2 (needs no g: before the PDL wait)
_RECIPROCAL_PTX = """{
.reg .b32 t, u;
.reg .b16 h, hl, hh;
shl.b32 t, $2, 8;
or.b32 t, t, $2;
cvt.u16.u32 h, t;
cvt.rn.f16x2.e4m3x2 u, h;
mov.b32 {hl, hh}, u;
cvt.f32.f16 $0, hl;
rcp.rn.f32 $1, $0;
}"""

# m = g / v if v > 0 else 0 for g $1 and v $2 (float32 bits): the division, for any g
_MULTIPLIER_PTX = """{
.reg .b32 m;
.reg .pred pp;
div.rn.f32 m, $1, $2;
setp.gt.f32 pp, $2, 0f00000000;
selp.b32 $0, m, 0, pp;
}"""

# m = g / v if v > 0 else 0 from g $1, v $2 and y = RN(1 / v) $3: q = RN(g y), its exact
# residual r = g - v q, then RN(q + r y), the correctly rounded quotient wherever q, r
# and m are normal (Markstein's correction; tests/test_quantizer.py checks it against
# the division for every float32 mantissa of g and every E4M3 mantissa of v)
_FAST_MULTIPLIER_PTX = """{
.reg .b32 q, r, nv, m;
.reg .pred pp;
mul.rn.f32 q, $1, $3;
neg.f32 nv, $2;
fma.rn.f32 r, nv, q, $1;
fma.rn.f32 m, r, $3, q;
setp.gt.f32 pp, $2, 0f00000000;
selp.b32 $0, m, 0, pp;
}"""
# g's biased exponents (|g| in [2^-90, 2^91)) for which the fast path's q, r and m are
# normal for every E4M3 v in [2^-9, 448]; any other g (0, subnormal, huge, inf, NaN)
# takes the division
FAST_G_EXPONENTS = (37, 217)


def _codes_ptx(fp16: bool) -> str:
    """PTX of a block's codes: $2..$9 its words as for the scale, $10 its multiplier m
    (float32 bits). Out: $0 codes of elements 0..7, $1 of 8..15 (element 2j in the low
    nibble of byte j)."""
    words = [f"${2 + i}" for i in range(8)]
    lines = ["{", ".reg .b32 x, q, ca, cb, cc, t<16>, pa, pb, ev, od, p01, p23, shi, slo;",
             ".reg .b16 hl, hh;"]  # fmt: skip
    for j in range(16):  # x as float32 (exact), q = |x| * m (|.|: an operand modifier)
        i, high = divmod(j, 2)
        if fp16:
            lines += [
                f"mov.b32 {{hl, hh}}, {words[i]};",
                f"cvt.f32.f16 x, {'hh' if high else 'hl'};",
            ]
        elif high:
            lines.append(f"and.b32 x, {words[i]}, 0xFFFF0000;")
        else:
            lines.append(f"shl.b32 x, {words[i]}, 16;")
        lines += ["abs.f32 x, x;", "mul.rn.f32 q, x, $10;"]
        lines += _code_lines("q", f"t{j}")
    for out, first, group in (("$0", 0, words[:4]), ("$1", 8, words[4:])):
        # the low bytes of t: even elements' codes -> ev, odd ones' -> od (byte j holds
        # element first + 2j or + 2j + 1), then out = ev | od << 4
        for half, name in ((0, "ev"), (1, "od")):
            t = [f"t{first + half + 2 * n}" for n in range(4)]
            lines += [
                f"prmt.b32 pa, {t[0]}, {t[1]}, 0x0040;",
                f"prmt.b32 pb, {t[2]}, {t[3]}, 0x4000;",
                f"prmt.b32 {name}, pa, pb, 0x7610;",
            ]
        # sign bits: the inputs' bits 15 (even element) and 31 (odd element) go to bits
        # 3 and 7 of the byte that holds the pair
        lines += [
            f"prmt.b32 p01, {group[0]}, {group[1]}, 0x5173;",
            f"prmt.b32 p23, {group[2]}, {group[3]}, 0x5173;",
            "prmt.b32 shi, p01, p23, 0x5410;",
            "prmt.b32 slo, p01, p23, 0x7632;",
            "and.b32 shi, shi, 0x80808080;",
            "shr.b32 slo, slo, 4;",
            "and.b32 slo, slo, 0x08080808;",
            "mad.lo.u32 ev, od, 16, ev;",
            "or.b32 ev, ev, shi;",
            f"or.b32 {out}, ev, slo;",
        ]
    lines.append("}")
    return "\n".join(lines)


_SCALE_PTX = {False: _scale_ptx(False), True: _scale_ptx(True)}
_CODES_PTX = {False: _codes_ptx(False), True: _codes_ptx(True)}
_CODE_PTX = _code_ptx()
_SCALE_BYTE_PTX = _scale_byte_ptx()


@dsl_user_op
def copy_row_segment(stage: cutlass.Int32, source: cutlass.Int64, size: cutlass.Int32,
                     full: cutlass.Int32, fenced: bool = True, *, loc=None, ip=None):  # fmt: skip
    """Expect ``size`` bytes on the stage's mbarrier ``full`` and start one bulk copy of
    them from global ``source`` into shared ``stage`` (one thread). The fence orders the
    warp's earlier generic reads of the stage before the async proxy's writes; a stage
    not read yet needs none (``fenced=False``), and without it the copy does not wait
    for the thread's loads in flight (the fence's MEMBAR does)."""
    operands = [ir_i32(stage, loc, ip), ir_i64(source, loc, ip), ir_i32(size, loc, ip),
                ir_i32(full, loc, ip)]  # fmt: skip
    ptx = (
        ("fence.proxy.async.shared::cta;\n" if fenced else "")
        + "mbarrier.arrive.expect_tx.shared::cta.b64 _, [$3], $2;\n"
        + "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [$0], [$1], $2, [$3];"
    )
    asm(ptx, "r,l,r,r", operands, loc, ip)


@dsl_user_op
def init_barrier(full: cutlass.Int32, *, loc=None, ip=None):
    """Initialise mbarrier ``full`` for one arrival a phase."""
    asm("mbarrier.init.shared::cta.b64 [$0], 1;", "r", [ir_i32(full, loc, ip)], loc, ip)


@dsl_user_op
def arrive(full: cutlass.Int32, *, loc=None, ip=None):
    """Complete the phase of mbarrier ``full`` without a copy (a unit with no input row)."""
    asm("mbarrier.arrive.shared::cta.b64 _, [$0];", "r", [ir_i32(full, loc, ip)], loc, ip)


_STORE_CODES_PTX = """{
.reg .pred p;
setp.lt.s32 p, $3, $4;
@p st.global.v2.b32 [$0], {$1, $2};
}"""

# the scale byte of block $2 if it is < blocks ($3), a zero if it is a padding column
# (< blocks_padded, $4), nothing past those
_STORE_SCALE_PTX = """{
.reg .pred pw, pl;
.reg .b32 v;
setp.lt.s32 pw, $2, $4;
setp.lt.s32 pl, $2, $3;
selp.b32 v, $1, 0, pl;
@pw st.global.u8 [$0], v;
}"""


@dsl_user_op
def store_codes(address: cutlass.Int64, lo: cutlass.Int32, hi: cutlass.Int32,
                block: cutlass.Int32, blocks: cutlass.Int32, *, loc=None, ip=None):  # fmt: skip
    """8 bytes (``lo`` first) to ``address`` if ``block`` < ``blocks`` (predicated: no
    branch splits the unit's math)."""
    operands = [ir_i64(address, loc, ip)] + [ir_i32(v, loc, ip) for v in (lo, hi, block, blocks)]
    asm(_STORE_CODES_PTX, "l,r,r,r,r", operands, loc, ip)


@dsl_user_op
def store_scale(address: cutlass.Int64, sf: cutlass.Int32, block: cutlass.Int32,
                blocks: cutlass.Int32, blocks_padded: cutlass.Int32, *, loc=None,
                ip=None):  # fmt: skip
    """Block ``block``'s scale byte to ``address``: ``sf`` below ``blocks``, 0 for the
    blocked layout's padding columns below ``blocks_padded``, nothing past them."""
    operands = [ir_i64(address, loc, ip)]
    operands += [ir_i32(v, loc, ip) for v in (sf, block, blocks, blocks_padded)]
    asm(_STORE_SCALE_PTX, "l,r,r,r,r", operands, loc, ip)


# zero bytes $1 .. 15 of the 16-byte chunk at $0 ($1 in 0, 4, 8, 12, 16): one or two wide
# stores where the chunk is 16-byte aligned, else byte stores (the plan takes scales at
# any byte address)
_ZERO_CHUNK_TAIL_PTX = (
    """{
.reg .pred al, p, q;
.reg .b64 a;
.reg .b32 z;
mov.b32 z, 0;
and.b64 a, $0, 15;
setp.eq.u64 al, a, 0;
@!al bra.uni BYTES;
setp.eq.s32 p, $1, 0;
@p st.global.v4.b32 [$0], {z, z, z, z};
setp.eq.s32 p, $1, 4;
@p st.global.b32 [$0+4], z;
setp.eq.or.s32 q, $1, 8, p;
@q st.global.v2.b32 [$0+8], {z, z};
setp.eq.s32 p, $1, 12;
@p st.global.b32 [$0+12], z;
bra.uni DONE;
BYTES:
"""
    + "".join(f"setp.le.s32 p, $1, {i};\n@p st.global.u8 [$0+{i}], z;\n" for i in range(16))
    + """DONE:
}"""
)


@dsl_user_op
def zero_chunk_tail(address: cutlass.Int64, first: cutlass.Int32, *, loc=None, ip=None):
    """Zero bytes ``first`` .. 15 (``first`` a multiple of 4) of the 16-byte chunk at
    ``address``."""
    asm(_ZERO_CHUNK_TAIL_PTX, "l,r", [ir_i64(address, loc, ip), ir_i32(first, loc, ip)], loc, ip)


@dsl_user_op
def block_scale(words, g_bits: cutlass.Int32, fp16: bool, *, loc=None, ip=None):
    """The E4M3 scale byte of one block (8 words) for global scale ``g_bits``."""
    operands = [ir_i32(w, loc, ip) for w in words] + [ir_i32(g_bits, loc, ip)]
    return asm_i32s(1, _SCALE_PTX[fp16], "=r," + ",".join(["r"] * 9), operands, False, loc, ip)[0]


@dsl_user_op
def block_codes(words, m_bits: cutlass.Int32, fp16: bool, *, loc=None, ip=None):
    """(codes of elements 0..7, codes of 8..15) of one block for its multiplier m."""
    operands = [ir_i32(w, loc, ip) for w in words] + [ir_i32(m_bits, loc, ip)]
    return asm_i32s(2, _CODES_PTX[fp16], "=r,=r," + ",".join(["r"] * 9), operands, False, loc, ip)


@dsl_user_op
def multiplier(g_bits: cutlass.Int32, decoded, *, loc=None, ip=None):
    """m = g / v, 0 where v is not > 0, from reciprocal's (v, RN(1 / v)): the division."""
    operands = [ir_i32(g_bits, loc, ip), ir_i32(decoded[0], loc, ip)]
    return asm_i32s(1, _MULTIPLIER_PTX, "=r,r,r", operands, False, loc, ip)[0]


@dsl_user_op
def reciprocal(scale_byte: cutlass.Int32, *, loc=None, ip=None):
    """(v = e4m3(scale_byte), RN(1 / v)) as float32 bits."""
    operands = [ir_i32(scale_byte, loc, ip)]
    return asm_i32s(2, _RECIPROCAL_PTX, "=r,=r,r", operands, False, loc, ip)


@dsl_user_op
def fast_multiplier(g_bits: cutlass.Int32, decoded, *, loc=None, ip=None):
    """m = g / v, 0 where v is not > 0, from reciprocal's (v, RN(1 / v)); exact for g
    with a biased exponent in FAST_G_EXPONENTS."""
    operands = [ir_i32(g_bits, loc, ip)] + [ir_i32(w, loc, ip) for w in decoded]
    return asm_i32s(1, _FAST_MULTIPLIER_PTX, "=r,r,r,r", operands, False, loc, ip)[0]


# ---------------------------------------------------------------------------------------
# device code
# ---------------------------------------------------------------------------------------


def routing_layout(form: int) -> int:
    """A MoE form's counts in the routing kernel's encoding (:func:`.moe_routing.expert_rows`
    clamps them for both; the plain form, traced beside the MoE ones, reads none)."""
    return LAYOUTS.index("contiguous" if form == FORM_CONTIGUOUS else "masked")


@cute.jit
def clamp(value, low, high):
    return cutlass.min(cutlass.max(value, low), high)


def int32s(address, size):
    """The int32 array at a device address (a run word)."""
    return cute.make_tensor(
        cute.make_ptr(cutlass.Int32, address, cute.AddressSpace.gmem, assumed_align=4),
        cute.make_layout(size),
    )


def run_int32s(run, field: int, size):
    """The int32 array at run word ``field`` (routing counts, index, global scale bits)."""
    return int32s(run[field], size)


def padded_rows(rows):
    """An expert's scale rows: its token rows rounded up to a blocked-scale atom."""
    return (rows + SF_ROWS - 1) // SF_ROWS * SF_ROWS


@cute.jit
def expert_segments(routing, form: cutlass.Constexpr[int], s_seg, s_rows, s_unit, s_warp, tidx):
    """MoE forms: every expert's first scale row, rows and first unit (token row of the
    run's) into shared memory, from the device counts clamped as the routing kernel
    clamps them; s_unit[experts] is the number of token rows this routing has."""
    experts, capacity, per_expert, counts, _index = routing
    carried = cutlass.Int32(0)
    carried_units = cutlass.Int32(0)
    for base in cutlass.range(0, experts, THREADS, unroll=1):
        expert = base + tidx
        rows = cutlass.Int32(0)
        if expert < experts:
            _first, rows = expert_rows(expert, counts, routing_layout(form), capacity)
        if form == FORM_CONTIGUOUS:  # masked segments are e * per_expert: no scan
            before, total = block_scan(padded_rows(rows), s_warp, tidx)
            if expert < experts:
                s_seg[expert] = carried + before
            carried = carried + total
        elif expert < experts:
            s_seg[expert] = expert * per_expert
        units_before, units_total = block_scan(rows, s_warp, tidx)
        if expert < experts:
            s_rows[expert] = rows
            s_unit[expert] = carried_units + units_before
        carried_units = carried_units + units_total
    if tidx == 0:
        s_unit[experts] = carried_units
    cute.arch.barrier()


@cute.jit
def locate(routing, u, form: cutlass.Constexpr[int], scale_rows, s_seg, s_rows, s_unit, slots):
    """(kind, input row, output row, scale row) of unit row ``u`` (a token row) for this
    run's routing; ROW_NONE for one whose scale row is past the plan's ``scale_rows`` (a
    routing whose clamped counts overlap; masked ``slots``: unit row u is slot (e, m),
    checked against the count later). The input row of an indexed contiguous row is the index
    entry as read (the copy clamps it, one unit later, so that the load's latency hides
    behind a unit's math)."""
    kind = cutlass.Int32(ROW_NONE)
    in_row = u
    out_row = u
    s = u
    experts, capacity, per_expert, counts, index = routing
    use_slots = cutlass.Int32(0)
    if cutlass.const_expr(form == FORM_MASKED):
        use_slots = slots
    if form == FORM_PLAIN:
        kind = cutlass.Int32(ROW_TOKENS)
    elif use_slots != 0:  # masked, one round: unit row u is slot (e, m) = divmod(u, max_m)
        kind = cutlass.Int32(ROW_TOKENS)
        slot_expert = u // capacity
        s = slot_expert * per_expert + (u - slot_expert * capacity)
    else:
        # the last expert whose rows start at or before u (empty ones start where the
        # next one does, so the found one holds u; rows past them all are not asked for)
        low = cutlass.Int32(0)
        length = experts
        for _step in cutlass.range_constexpr(SEARCH_STEPS):
            half = length // 2
            if length > 0:
                if s_unit[low + half] <= u:
                    low = low + half + 1
                    length = length - half - 1
                else:
                    length = half
        expert = cutlass.max(low - 1, 0)
        r = u - s_unit[expert]
        s = s_seg[expert] + r
        if s < scale_rows:
            kind = cutlass.Int32(ROW_TOKENS)
            # the expert's first output row, from the counts as the scan read them (no
            # shared table: 4 KB less a CTA)
            first, _rows = expert_rows(expert, counts, routing_layout(form), capacity)
            out_row = first + r
            in_row = out_row
            if form == FORM_CONTIGUOUS and index != 0:
                in_row = int32s(index, capacity)[out_row]
    return kind, in_row, out_row, s


@cute.jit
def describe_batch(first_round, warp_index, step, routing, units, segments, scale_rows,
                   form: cutlass.Constexpr[int], s_seg, s_rows, s_unit, lane, slots):  # fmt: skip
    """Lane l's description of this warp's unit in round first_round + l: (kind, input
    row, output row, scale row, segment), ROW_NONE past the run's last unit. A
    warp describes 32 rounds at once, so that the routing's dependent loads (the segment
    search, an index entry) wait once per 32 units, not once per unit."""
    kind = cutlass.Int32(ROW_NONE)
    in_row = cutlass.Int32(0)
    out_row = cutlass.Int32(0)
    s = cutlass.Int32(0)
    segment = cutlass.Int32(0)
    round_ = first_round + lane
    unit = round_ * step + (warp_index + round_) % step  # round i: warp w's is (w + i) mod step
    if unit < units:
        u = unit // segments
        segment = unit - u * segments
        kind, in_row, out_row, s = locate(
            routing, u, form, scale_rows, s_seg, s_rows, s_unit, slots
        )
    return kind, in_row, out_row, s, segment


@cute.jit
def take(units_ahead: cute.Tensor, slot: cutlass.Constexpr[int], batch, index):
    """Slot ``slot`` of ``units_ahead`` <- the description lane ``index`` of the warp holds."""
    for i in cutlass.range_constexpr(DESCRIPTOR):
        units_ahead[DESCRIPTOR * slot + i] = cute.arch.shuffle_sync(batch[i], index)


@cute.jit
def start_copy(units_ahead: cute.Tensor, slot: cutlass.Constexpr[int], stage, full, x,
               row_stride, input_rows, blocks, unit_blocks, lane,
               fenced: cutlass.Constexpr[bool] = True):  # fmt: skip
    """Lane 0 starts the copy of the token row segment described in ``slot`` into
    ``stage`` (its bytes past k are not copied: the math reads whatever the stage held
    and stores nothing of those blocks), or completes ``full``'s phase at once for any
    other unit."""
    cute.arch.sync_warp()  # every lane has read the stage's previous unit
    if lane == 0:
        kind = units_ahead[DESCRIPTOR * slot + F_KIND]
        if kind == ROW_TOKENS:
            in_row = clamp(units_ahead[DESCRIPTOR * slot + F_IN_ROW], 0, input_rows - 1)
            first_block = units_ahead[DESCRIPTOR * slot + F_SEGMENT] * unit_blocks
            size = cutlass.min(blocks - first_block, unit_blocks) * 32
            source = x + cutlass.Int64(in_row) * row_stride + cutlass.Int64(first_block) * 32
            copy_row_segment(stage, source, size, full, fenced)
        else:
            arrive(full)


def block_words(block):
    """A block's 32 bytes in shared memory as 8 Int32 (two 16-byte loads)."""
    return [*lds_v4(block), *lds_v4(block + 16)]


@cute.jit
def quantize_blocks(count: cutlass.Constexpr[int], stage, lane, fp16: cutlass.Constexpr[bool],
                    g_bits, s_mult, codes_first, sf_first, first_block, blocks,
                    blocks_padded):  # fmt: skip
    """Quantize the lane's first ``count`` blocks of a stage (block j at lane + 32 j) and
    store their codes and scale bytes, INTERLEAVE at a time in straight-line code (bytes
    past k are read but not stored), so that one block's scale chain (amax, division,
    rounding, table lookup) overlaps another's element math. The group's scale chains
    come first, then its element math reads the words from the stage again (not kept in
    registers across the chains: 1-8 % faster on the H200, session 15)."""
    for first in cutlass.range_constexpr(0, count, INTERLEAVE):
        scaled = []
        for j in cutlass.range_constexpr(first, min(first + INTERLEAVE, count)):
            block = stage + 32 * (lane + 32 * j)
            sf = block_scale(block_words(block), g_bits, fp16)
            scaled.append((j, block, sf, s_mult[sf]))
        done = []
        for j, block, sf, m in scaled:
            done.append((j, sf, *block_codes(block_words(block), m, fp16)))
        for j, sf, lo, hi in done:
            b = first_block + 32 * j
            store_codes(codes_first + 256 * j, lo, hi, b, blocks)
            store_scale(sf_first + 4096 * j, sf, b, blocks, blocks_padded)


@cute.jit
def quantize_unit(units_ahead: cute.Tensor, stage, fp16: cutlass.Constexpr[bool], g_bits,
                  s_mult, out, out_row_bytes, scales, col_tiles, lane, blocks,
                  blocks_padded, unit_blocks):  # fmt: skip
    """Quantize the token row unit described in slot 0 (nothing for ROW_NONE) from its
    stage and store its codes and scale bytes; a block's multiplier g / sf comes from
    the CTA's table."""
    kind = units_ahead[F_KIND]
    out_row = units_ahead[F_OUT_ROW]
    s = units_ahead[F_SCALE_ROW]
    segment = units_ahead[F_SEGMENT]
    # the blocked-scale byte of (s, block b) is sf_row + (b // 4) * 512 + b % 4 (s, b >= 0:
    # shifts and masks, not signed divisions)
    sf_row = (
        scales
        + cutlass.Int64(s >> 7) * col_tiles * 512
        + cutlass.Int64((s & 31) * 16 + ((s >> 5) & 3) * 4)
    )
    first_block = segment * unit_blocks + lane
    # block first_block + 32 j: its scale byte at sf_first + j * 4096 (32 blocks are 8
    # atoms of 512 bytes), its codes at codes_first + j * 256
    sf_first = sf_row + cutlass.Int64((first_block >> 2) * 512 + (first_block & 3))
    if kind == ROW_TOKENS:
        codes_first = out + cutlass.Int64(out_row) * out_row_bytes + cutlass.Int64(first_block) * 8
        # as many of a lane's blocks as the unit has columns for (a narrow unit; a row's
        # short last segment, k = 7168: 3.5 segments), in straight-line code of its own
        columns = cutlass.min(blocks - segment * unit_blocks, unit_blocks)
        if columns > SEGMENT_BLOCKS // 2:
            quantize_blocks(BLOCKS_PER_LANE, stage, lane, fp16, g_bits, s_mult, codes_first,
                            sf_first, first_block, blocks, blocks_padded)  # fmt: skip
        elif columns > 32:
            quantize_blocks(BLOCKS_PER_LANE // 2, stage, lane, fp16, g_bits, s_mult,
                            codes_first, sf_first, first_block, blocks, blocks_padded)  # fmt: skip
        else:
            quantize_blocks(1, stage, lane, fp16, g_bits, s_mult, codes_first, sf_first,
                            first_block, blocks, blocks_padded)  # fmt: skip


@cute.jit
def zero_padding(form: cutlass.Constexpr[int], experts, capacity, col_tiles, scale_tiles,
                 scales, s_seg, s_rows, warp_index, step, lane):  # fmt: skip
    """Zero the padding scale rows: a contiguous expert's rows past its tokens to the end
    of its last 128-row atom (plain: the rows past T). A warp an atom (128 rows x 4 blocks, 512
    bytes), a lane a 16-byte chunk of it (rows c, c + 32, c + 64, c + 96, 4 bytes each),
    of which the padding rows are the tail; atoms past the plan's scale rows are not
    written (a routing whose clamped counts overlap). Run before the units, not as units
    of their own: a padding loop beside the token math made every unit slower, 4-10 %
    (H200, session 16)."""
    columns = cutlass.Int32(col_tiles)
    for item in cutlass.range(warp_index, experts * columns, step, unroll=1):
        expert = item // columns
        column = item - expert * columns
        first = cutlass.Int32(0)
        rows = capacity
        if form != FORM_PLAIN:
            first = s_seg[expert]
            rows = s_rows[expert]
        tail = rows & (SF_ROWS - 1)  # token rows in the last atom
        tile = (cutlass.Int64(first) + cutlass.Int64(rows)) >> 7
        if tail != 0 and tile < cutlass.Int64(scale_tiles):
            # lane c's rows c + 32 q are padding from the first q with c + 32 q >= tail
            q = cutlass.max(tail - lane + 31, 0) // 32
            chunk = (tile * col_tiles + cutlass.Int64(column)) * 512 + cutlass.Int64(lane * 16)
            zero_chunk_tail(scales + chunk, q * 4)


@cute.jit
def quantize_units(plan, run, form: cutlass.Constexpr[int], tables, s_warp, s_mult, stages,
                   fulls, fp16: cutlass.Constexpr[bool], operands):  # fmt: skip
    """The warp's units through its ring of STAGES shared-memory stages: lane 0 keeps
    the bulk copies of the next STAGES - 1 units in flight while the warp quantizes one;
    the units' descriptions come 32 rounds at a time (describe_batch), one per lane, and
    each round takes its unit's by shuffles.

    Round i of the grid's warps takes units i * step .. (i + 1) * step, warp w the one at
    (w + i) mod step: with step a multiple of the segments, a warp that always took the
    same segment would always take the short last one of a row (and warps w, w + 4, ...
    share a scheduler); rotating spreads every segment over every warp."""
    tidx, _, _ = cute.arch.thread_idx()
    cta, _, _ = cute.arch.block_idx()
    ctas, _, _ = cute.arch.grid_dim()
    lane = tidx % 32
    warp = tidx // 32
    blocks = cutlass.Int32(plan[Q_BLOCKS])
    blocks_padded = cutlass.Int32(plan[Q_BLOCKS_PADDED])
    segments = cutlass.Int32(plan[Q_SEGMENTS])
    unit_blocks = cutlass.Int32(plan[Q_SEGMENT_BLOCKS])  # 128, 64 or 32
    capacity = cutlass.Int32(plan[Q_CAPACITY])
    scale_units = cutlass.Int32(plan[Q_UNITS])  # the plan's scale rows x segments
    scale_rows = scale_units // segments
    input_rows = cutlass.Int32(plan[Q_INPUT_ROWS])
    col_tiles = cutlass.Int64(plan[Q_COL_TILES])
    row_stride = plan[Q_ROW_STRIDE_BYTES]
    out_row_bytes = plan[Q_OUT_ROW_BYTES]
    x, out, scales, global_scale = operands
    # this warp's stages and their mbarriers
    stage0 = stages + warp * (STAGES * STAGE_BYTES)
    full0 = fulls + warp * (STAGES * 8)
    if lane == 0:
        for i in cutlass.range_constexpr(STAGES):
            init_barrier(full0 + 8 * i)
        cute.arch.mbarrier_init_fence()
    cute.arch.sync_warp()
    units_ahead = cute.make_rmem_tensor(DESCRIPTOR * (AHEAD + 1), cutlass.Int32)
    step = ctas * WARPS
    warp_index = cta * WARPS + warp
    # the token rows' units: plain T's, described before the wait (PDL: the kernel
    # before may still run) from the plan alone; MoE this routing's (at most the plan's
    # scale rows'), from the device counts after it
    experts = cutlass.Int32(1)
    units = capacity * segments
    # the routing's words (the host's, like the plan's) before the wait: after it each
    # would be loaded again, and the counts' load would wait for its pointer's (two
    # global latencies before a masked slot's check, H100, session 30)
    plan_experts = cutlass.Int32(plan[Q_EXPERTS])
    counts = run_int32s(run, R_ROUTING, MAX_EXPERTS + 1)
    per_expert = cutlass.Int32(plan[Q_EXPERT_SCALE_ROWS])
    routing = (plan_experts, capacity, per_expert, counts, run[R_INDEX])
    # the multiplier table's divisors and their reciprocals need no g: before the wait
    table_rows = range(0, 256, THREADS)
    decoded = [reciprocal(tidx + row) for row in table_rows]
    # masked plans whose slots fit one round of the grid: the slots are the units,
    # described from the plan before the wait; a slot past its expert's count is skipped
    slots = cutlass.Int32(0)
    if cutlass.const_expr(form == FORM_MASKED):
        if plan_experts * capacity * segments <= step:
            slots = cutlass.Int32(1)
    if cutlass.const_expr(form != FORM_PLAIN):
        experts = plan_experts
        if slots == 0:
            cute.arch.griddepcontrol_wait()
            expert_segments(routing, form, *tables, s_warp, tidx)
            units = cutlass.min(tables[2][experts] * segments, scale_units)
        else:
            units = experts * capacity * segments
    k0, i0, o0, s0, e0 = describe_batch(0, warp_index, step, routing, units, segments,
                                        scale_rows, form, *tables, lane, slots)  # fmt: skip
    if cutlass.const_expr(form == FORM_PLAIN):
        cute.arch.griddepcontrol_wait()
    if cutlass.const_expr(form == FORM_MASKED):
        if slots != 0:
            cute.arch.griddepcontrol_wait()
    g_bits = global_scale[0]  # in flight while the first copies start: they have no fence
    for d in cutlass.range_constexpr(AHEAD):  # stages not read yet: no proxy fence
        take(units_ahead, d, (k0, i0, o0, s0, e0), d)
        start_copy(units_ahead, d, stage0 + d * STAGE_BYTES, full0 + 8 * d, x, row_stride,
                   input_rows, blocks, unit_blocks, lane, False)  # fmt: skip
    slot_m = cutlass.Int32(0)  # round 0's slot (e, m) (the only round) and e's count
    slot_count = cutlass.Int32(0)
    if cutlass.const_expr(form == FORM_MASKED):
        if slots != 0:
            slot_expert = units_ahead[F_OUT_ROW] // capacity
            slot_m = units_ahead[F_OUT_ROW] - slot_expert * capacity
            _first, slot_count = expert_rows(slot_expert, counts, routing_layout(form), capacity)
    # while those copies fly: the multiplier g / sf of every scale byte, once per CTA (a
    # block looks its one up instead of dividing), from the reciprocals
    g_exponent = (g_bits >> 23) & 255
    for row, divisor in zip(table_rows, decoded):
        if g_exponent >= FAST_G_EXPONENTS[0] and g_exponent <= FAST_G_EXPONENTS[1]:
            s_mult[tidx + row] = fast_multiplier(g_bits, divisor)
        else:  # 0, subnormal, huge or non-finite g (the same branch for the whole grid)
            s_mult[tidx + row] = multiplier(g_bits, divisor)
    cute.arch.barrier()
    # the padding scale rows: masked none (module docstring); plain none when T is a
    # multiple of 128, and then the loop is skipped (its presence cost time)
    padded = cutlass.Int32(1)
    if cutlass.const_expr(form == FORM_PLAIN):
        padded = capacity & (SF_ROWS - 1)
    if cutlass.const_expr(form != FORM_MASKED):
        if padded != 0:
            zero_padding(form, experts, capacity, col_tiles, scale_rows // SF_ROWS, scales,
                         tables[0], tables[1], warp_index, step, lane)  # fmt: skip
    batch_first = cutlass.Int32(0)  # the round lane 0's description is of
    consume = cutlass.Int32(0)  # the stage of the unit quantized this round, its parity
    parity = cutlass.Int32(0)
    produce = cutlass.Int32(AHEAD % STAGES)  # the stage the next copy goes to
    for r in cutlass.range(0, (units + step - 1) // step, 1, unroll=1):
        ahead = r + AHEAD  # the round whose copy starts now
        if ahead - batch_first == 32:
            k0, i0, o0, s0, e0 = describe_batch(ahead, warp_index, step, routing, units,
                                                segments, scale_rows, form, *tables,
                                                lane, slots)  # fmt: skip
            batch_first = ahead
        take(units_ahead, AHEAD, (k0, i0, o0, s0, e0), ahead - batch_first)
        start_copy(units_ahead, AHEAD, stage0 + produce * STAGE_BYTES, full0 + 8 * produce, x,
                   row_stride, input_rows, blocks, unit_blocks, lane)  # fmt: skip
        produce = produce + 1
        if produce == STAGES:
            produce = cutlass.Int32(0)
        mbar_wait(full0 + 8 * consume, parity)
        if cutlass.const_expr(form == FORM_MASKED):
            if slots != 0:  # a slot past its expert's (clamped) count: no token row
                if slot_m >= slot_count:
                    units_ahead[F_KIND] = cutlass.Int32(ROW_NONE)
        quantize_unit(units_ahead, stage0 + consume * STAGE_BYTES, fp16, g_bits, s_mult, out,
                      out_row_bytes, scales, col_tiles, lane, blocks, blocks_padded,
                      unit_blocks)  # fmt: skip
        consume = consume + 1
        if consume == STAGES:
            consume = cutlass.Int32(0)
            parity = parity ^ 1
        for i in cutlass.range_constexpr(DESCRIPTOR * AHEAD):
            units_ahead[i] = units_ahead[DESCRIPTOR + i]


@cute.jit
def quantize_form(plan, run, form: cutlass.Constexpr[int], fp16, tables, s_warp, s_mult, stages,
                  fulls, operands):  # fmt: skip
    """One form's run in the run's dtype."""
    if fp16:
        quantize_units(plan, run, form, tables, s_warp, s_mult, stages, fulls, True, operands)
    else:
        quantize_units(plan, run, form, tables, s_warp, s_mult, stages, fulls, False, operands)


@cute.kernel
def kernel(ptr_of_plan: cute.Pointer, ptr_of_run: cute.Pointer):
    plan = cute.make_tensor(ptr_of_plan, cute.make_layout(Q_WORDS))
    run = cute.make_tensor(ptr_of_run, cute.make_layout(R_WORDS))

    @cute.struct
    class SharedStorage:
        stages: cute.struct.Align[
            cute.struct.MemRange[cutlass.Int8, WARPS * STAGES * STAGE_BYTES], 128
        ]
        fulls: cute.struct.MemRange[cutlass.Int64, WARPS * STAGES]
        segment_rows: cute.struct.MemRange[cutlass.Int32, MAX_EXPERTS]
        expert_rows: cute.struct.MemRange[cutlass.Int32, MAX_EXPERTS]
        unit_rows: cute.struct.MemRange[cutlass.Int32, MAX_EXPERTS + 1]
        warp_totals: cute.struct.MemRange[cutlass.Int32, WARPS]
        multipliers: cute.struct.MemRange[cutlass.Int32, 256]

    storage = SmemAllocator().allocate(SharedStorage)
    s_seg = storage.segment_rows.get_tensor(cute.make_layout(MAX_EXPERTS))
    s_rows = storage.expert_rows.get_tensor(cute.make_layout(MAX_EXPERTS))
    s_unit = storage.unit_rows.get_tensor(cute.make_layout(MAX_EXPERTS + 1))
    s_warp = storage.warp_totals.get_tensor(cute.make_layout(WARPS))
    s_mult = storage.multipliers.get_tensor(cute.make_layout(256))
    stages = storage.stages.data_ptr().toint()
    fulls = storage.fulls.data_ptr().toint()

    # PDL (module docstring): the kernel after this one may launch now; before the wait
    # (in quantize_units) only the plan and run words, which the host copied before this
    # launch (copies, not kernels: stream order holds for them); the input, the global
    # scale, the routing and every store after it.
    cute.arch.griddepcontrol_launch_dependents()
    operands = (run[R_X], run[R_OUT], run[R_SCALES], run_int32s(run, R_GLOBAL_SCALE, 1))
    # one specialisation a form and dtype: no form's bookkeeping in another's code
    form = cutlass.Int32(plan[Q_FORM])
    fp16 = plan[Q_FP16] != 0
    tables = (s_seg, s_rows, s_unit)
    if form == FORM_PLAIN:
        quantize_form(plan, run, FORM_PLAIN, fp16, tables, s_warp, s_mult, stages, fulls,
                      operands)  # fmt: skip
    elif form == FORM_CONTIGUOUS:
        quantize_form(plan, run, FORM_CONTIGUOUS, fp16, tables, s_warp, s_mult, stages, fulls,
                      operands)  # fmt: skip
    else:
        quantize_form(plan, run, FORM_MASKED, fp16, tables, s_warp, s_mult, stages, fulls,
                      operands)  # fmt: skip


@cute.jit
def quantize_host(ptr_of_plan: cute.Pointer, ptr_of_run: cute.Pointer, num_ctas: cutlass.Int32):
    """Launch ``num_ctas`` CTAs that stride over the plan's units."""
    kernel(ptr_of_plan, ptr_of_run).launch(
        grid=(num_ctas, 1, 1),
        block=[THREADS, 1, 1],
        min_blocks_per_mp=CTAS_PER_SM,
        use_pdl=True,  # see kernel
        # several CTAs' stages per SM need the unified L1/shared memory as shared memory
        preferred_smem_carveout=100,
    )
    return


def compile(num_groups: int):
    """Compile the quantizer (one variant; ``num_groups`` is the bake's key, 1)."""
    if num_groups != 1:
        raise ValueError(f"the quantizer has one variant (num_groups 1), got {num_groups}")
    gmem = cute.AddressSpace.gmem
    return cute.compile(
        quantize_host,
        make_ptr(cutlass.Int64, 0, gmem, assumed_align=16),
        make_ptr(cutlass.Int64, 0, gmem, assumed_align=16),
        cutlass.Int32(1),
    )
