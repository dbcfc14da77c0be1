"""NVFP4 activation quantizer: BF16/FP16 rows -> packed E2M1 codes + blocked E4M3 scales.

Per 16-element block it does, in IEEE float32 and in this order, exactly the operations of
the numpy reference :func:`nvfp4_aot.quantize.quantize` (whose docstring states the
formulas and the zero/inf/NaN rules), so the bytes are the reference's bytes:

    amax = max|x_i| (NaN-propagating)   s = (g * amax) / 6         mul.rn, div.rn
    sf   = e4m3_rn_satfinite(s), 0x7F if amax is NaN              cvt.rn.satfinite.e4m3x2
    m    = g / e4m3(sf) if e4m3(sf) > 0 else 0                     div.rn (a CTA table)
    q_i  = E2M1_rne_sat(|x_i| * m), sign bit = the sign bit of x_i
           mul.rn, then three saturated pieces of q rounded onto 2^23 (_code_lines)

The block math is inline PTX (no fast-math division, no flush to zero, no hardware E2M1
conversion, which sm_90 lacks), the same instructions on every arch. m depends only on
the scale byte, so each CTA divides g by all 256 E4M3 values once into shared memory and
a block looks its multiplier up. E2M1 rounding is 8 FMA-pipe instructions an element
(was 16: seven threshold steps and their sum), all exact: see _code_lines.

Three forms (plan word ``Q_FORM``; :mod:`nvfp4_aot.quantize_layout` has the words):

* plain: row t of X -> row t of the codes; scale rows past T up to a multiple of 128 zero.
* contiguous (MoE, tokens sorted by expert): output row i reads X row ``index[i]`` (or i
  without an index), expert e owns output rows offsets[e] .. offsets[e + 1] and scale rows
  sf_offset[e] + (0 .. round_up(m_e, 128)), sf_offset[e] = sum_{j<e} round_up(m_j, 128),
  the padding rows' scales zero: exactly what the contiguous MoE GEMM reads.
* masked: expert e owns rows e * max_m + (0 .. masked_m[e]) of X (E, max_m, k) and of
  the codes, and scale rows e * round_up(max_m, 128) + (0 .. round_up(masked_m[e], 128)).

Device counts are clamped as the routing kernel clamps them (0 <= offsets[e] <=
offsets[e + 1] <= capacity, 0 <= masked_m[e] <= max_m), index entries to the input's
rows, and the work is a fixed list of scale rows (the plan's buffer), so no routing can
make the kernel read or write outside the buffers the plan checked.

Work: a warp takes one unit (a scale row x a segment of 128 blocks) at a time; lane l
owns blocks l, l + 32, l + 64, l + 96 of the segment: two 16-byte loads a block, an
8-byte store of codes, a scale byte. The loop is software-pipelined: the eight loads of
the warp's next unit are issued before the current unit is quantized, so DRAM latency
hides behind the math. Round i of the grid's warps takes the next step units, warp w the
one at (w + i) mod step, so that no warp (and no scheduler) always gets a row's short
last segment (k = 7168: 3.5 segments). Each CTA first turns the contiguous offsets into
the experts' scale segments in shared memory (a scan) and finds a row's expert by binary
search there.

The kernel is issue-bound, not memory-bound, unless the block math is cheap: per block
of 16 elements it was about 380 SASS instructions (two IEEE divisions, 17 an element),
now about 230 (sm_90a, 116 registers, 4 CTAs of 128 threads an SM).
"""

import cutlass
import cutlass.cute as cute
from cutlass._mlir.dialects import llvm
from cutlass.cute.runtime import make_ptr
from cutlass.cutlass_dsl import dsl_user_op
from cutlass.memory import SmemAllocator

from ..quantize_layout import (
    FORM_CONTIGUOUS,
    FORM_MASKED,
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
from .cta_scan import block_scan

FAMILY = "nvfp4_quantize"
ARCHS = ("sm_90a", "sm_100a", "sm_103a")
THREADS = 128
WARPS = THREADS // 32
BLOCKS_PER_LANE = SEGMENT_BLOCKS // 32
SF_ROWS = 128  # rows of a blocked-scale atom (512 bytes: 32 x 16)
SEARCH_STEPS = (MAX_EXPERTS).bit_length()  # binary search over <= MAX_EXPERTS segments

# No tiles of its own; the bake records a tile shape for every family.
TILE_M, TILE_N, TILE_K = 1, 1, 1

# row kinds of a unit
ROW_NONE, ROW_TOKENS, ROW_PADDING = 0, 1, 2


# ---------------------------------------------------------------------------------------
# inline PTX
# ---------------------------------------------------------------------------------------

_SIX = "0f40C00000"  # 6.0f, the largest E2M1 magnitude
_HALF, _FOUR, _TWO = "0f3F000000", "0f40800000", "0f40000000"
_MINUS_ONE, _MINUS_TWO = "0fBF800000", "0fC0000000"
_MAGIC = "0f4B000000"  # 2^23: float32 bits of 2^23 + c are 0x4B000000 + c for 0 <= c < 2^23
# sum over the 8 nibbles n of 0x4B000000 * 16^n (mod 2^32), subtracted once per word
_MAGIC_NIBBLES = (0x4B000000 * 0x11111111) % 2**32


def _code_lines(q: str, out: str, j: int) -> list[str]:
    """Add 16^j * (2^23 + the E2M1 magnitude code of float32 q >= 0 or NaN) to ``out``
    (float32 bits, mod 2^32). The code is RNE(2 min(q, 2)) for q <= 2, 4 + RNE(q - 2) on
    [2, 4] and 6 + RNE((q - 4) / 2) on [4, 6], saturating at 7: three saturated pieces
    (exact: q / 2, q / 2 - 1 and q / 2 - 2 are representable where they are not clamped;
    NaN gives 0), each rounded onto the integers by adding it to 2^23 + the integer the
    pieces before it reached, whose parity is the E2M1 code's, so ties go to the even code.
    All but the packing run on the FMA pipe (compares, selects and integer adds would load
    the half-rate ALU pipe). tests/test_quantizer.py checks this against the reference for
    every float32 near the ties (NVFP4_AOT_EXHAUSTIVE=1: all 2^31 of q >= 0 and NaN)."""
    return [
        f"mul.rn.sat.f32 ca, {q}, {_HALF};",  # min(q, 2) / 2
        f"fma.rn.sat.f32 cb, {q}, {_HALF}, {_MINUS_ONE};",  # clamp(q - 2, 0, 2) / 2
        f"fma.rn.sat.f32 cc, {q}, {_HALF}, {_MINUS_TWO};",  # clamp(q - 4, 0, 2) / 2
        f"fma.rn.f32 t, ca, {_FOUR}, {_MAGIC};",  # 2^23 + RNE(2 min(q, 2))
        f"fma.rn.f32 t, cb, {_TWO}, t;",  # + RNE(clamp(q - 2, 0, 2)), ties to even
        "add.rn.f32 t, t, cc;",  # + RNE(clamp(q - 4, 0, 2) / 2) (0 or 1)
        f"mad.lo.u32 {out}, t, {16**j}, {out};",
    ]


def _code_ptx() -> str:
    """PTX of one code (tests): $1 q (float32 bits) -> $0 its E2M1 magnitude code."""
    lines = ["{", ".reg .b32 ca, cb, cc, t, o;", "mov.b32 o, 0;"]
    lines += _code_lines("$1", "o", 0)
    lines += ["sub.u32 o, o, 0x4B000000;", "mov.b32 $0, o;", "}"]
    return "\n".join(lines)


def _sign_clear(words):
    return [f"and.b32 a{i}, {w}, 0x7FFF7FFF;" for i, w in enumerate(words)]


def _scale_ptx(fp16: bool) -> str:
    """PTX of a block's scale byte: $1..$8 the 16 inputs as 8 x (2 x 16-bit) words,
    element 2i in the low half of word i; $9 g (float32 bits). Out: $0 the E4M3 byte."""
    words = [f"${1 + i}" for i in range(8)]
    lines = ["{", ".reg .b32 a<8>, r<4>, t, amax, s, sfb;", ".reg .b16 h, hl, hh;",
             ".reg .pred pn;"]  # fmt: skip
    # amax over |x|: clear both sign bits, packed NaN-propagating max (exact: a max is a
    # selection), then the larger half as float32
    lines += _sign_clear(words)
    vmax = "max.NaN.f16x2" if fp16 else "max.NaN.bf16x2"
    lines += [f"{vmax} r{i}, a{2 * i}, a{2 * i + 1};" for i in range(4)]
    lines += [f"{vmax} r0, r0, r1;", f"{vmax} r2, r2, r3;", f"{vmax} r0, r0, r2;"]
    if fp16:
        lines += ["mov.b32 {hl, hh}, r0;", "cvt.f32.f16 t, hl;", "cvt.f32.f16 amax, hh;"]
    else:
        lines += ["shl.b32 t, r0, 16;", "and.b32 amax, r0, 0xFFFF0000;"]
    lines += [
        "max.NaN.f32 amax, amax, t;",
        # s = (g * amax) / 6, two IEEE roundings
        "mul.rn.f32 s, $9, amax;",
        f"div.rn.f32 s, s, {_SIX};",
        # the scale byte: RNE onto E4M3, > 448 and +inf saturate to 448; NaN -> 0x7F
        "cvt.rn.satfinite.e4m3x2.f32 h, s, s;",
        "cvt.u32.u16 sfb, h;",
        "and.b32 sfb, sfb, 255;",
        "setp.nan.f32 pn, amax, amax;",
        "selp.b32 $0, 127, sfb, pn;",
        "}",
    ]
    return "\n".join(lines)


# m = g / e4m3(sf) if e4m3(sf) > 0 else 0, for a scale byte $1 and g $2 (float32 bits)
_MULTIPLIER_PTX = """{
.reg .b32 t, u, sfv, m;
.reg .b16 h, hl, hh;
.reg .pred pp;
shl.b32 t, $1, 8;
or.b32 t, t, $1;
cvt.u16.u32 h, t;
cvt.rn.f16x2.e4m3x2 u, h;
mov.b32 {hl, hh}, u;
cvt.f32.f16 sfv, hl;
div.rn.f32 m, $2, sfv;
setp.gt.f32 pp, sfv, 0f00000000;
selp.b32 $0, m, 0, pp;
}"""


def _codes_ptx(fp16: bool) -> str:
    """PTX of a block's codes: $2..$9 the words as for the scale, $10 its multiplier m
    (float32 bits). Out: $0 codes of elements 0..7, $1 of 8..15 (element 2j in the low
    nibble of byte j)."""
    words = [f"${2 + i}" for i in range(8)]
    lines = ["{", ".reg .b32 a<8>, x, q, ca, cb, cc, t, o0, o1, p01, p23, shi, slo;",
             ".reg .b16 hl, hh;", "mov.b32 o0, 0;", "mov.b32 o1, 0;"]  # fmt: skip
    lines += _sign_clear(words)
    for j in range(16):  # |x| as float32 (exact), q = |x| * m, its code
        i, high = divmod(j, 2)
        if fp16:
            lines += [f"mov.b32 {{hl, hh}}, a{i};", f"cvt.f32.f16 x, {'hh' if high else 'hl'};"]
        elif high:
            lines.append(f"and.b32 x, a{i}, 0xFFFF0000;")
        else:
            lines.append(f"shl.b32 x, a{i}, 16;")
        lines.append("mul.rn.f32 q, x, $10;")
        lines += _code_lines("q", "o0" if j < 8 else "o1", j % 8)
    lines += [f"sub.u32 o0, o0, {_MAGIC_NIBBLES};", f"sub.u32 o1, o1, {_MAGIC_NIBBLES};"]
    for out, group in (("o0", words[:4]), ("o1", words[4:])):
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
            f"or.b32 {out}, {out}, shi;",
            f"or.b32 {out}, {out}, slo;",
        ]
    lines += ["mov.b32 $0, o0;", "mov.b32 $1, o1;", "}"]
    return "\n".join(lines)


_SCALE_PTX = {False: _scale_ptx(False), True: _scale_ptx(True)}
_CODES_PTX = {False: _codes_ptx(False), True: _codes_ptx(True)}
_CODE_PTX = _code_ptx()

# A predicated 16-byte load through the read-only path; zeros where the predicate is 0.
_LOAD_PTX = """{
.reg .pred p;
setp.ne.b32 p, $5, 0;
mov.b32 $0, 0;
mov.b32 $1, 0;
mov.b32 $2, 0;
mov.b32 $3, 0;
@p ld.global.nc.v4.b32 {$0, $1, $2, $3}, [$4];
}"""


def _i32(v, loc, ip):
    return cutlass.Int32(v).ir_value(loc=loc, ip=ip)


def _i64(v, loc, ip):
    return cutlass.Int64(v).ir_value(loc=loc, ip=ip)


def _asm(results, ptx, constraints, operands, side_effects, loc, ip):
    """Inline PTX with ``results`` 32-bit results (a list of Int32)."""
    if results == 0:
        llvm.inline_asm(
            None, operands, ptx, constraints + ",~{memory}", has_side_effects=True,
            is_align_stack=False, asm_dialect=llvm.AsmDialect.AD_ATT, loc=loc, ip=ip,
        )  # fmt: skip
        return []
    struct = llvm.StructType.get_literal([cutlass.Int32.mlir_type] * results)
    value = llvm.inline_asm(
        struct, operands, ptx, constraints, has_side_effects=side_effects,
        is_align_stack=False, asm_dialect=llvm.AsmDialect.AD_ATT, loc=loc, ip=ip,
    )  # fmt: skip
    return [
        cutlass.Int32(llvm.extractvalue(cutlass.Int32.mlir_type, value, [i], loc=loc, ip=ip))
        for i in range(results)
    ]


@dsl_user_op
def load_v4(address: cutlass.Int64, predicate: cutlass.Int32, *, loc=None, ip=None):
    """16 bytes at ``address`` as 4 Int32 where ``predicate`` != 0, else zeros."""
    operands = [_i64(address, loc, ip), _i32(predicate, loc, ip)]
    return _asm(4, _LOAD_PTX, "=r,=r,=r,=r,l,r", operands, False, loc, ip)


@dsl_user_op
def store_v2(address: cutlass.Int64, lo: cutlass.Int32, hi: cutlass.Int32, *, loc=None, ip=None):
    """8 bytes (``lo`` first) to ``address``."""
    operands = [_i64(address, loc, ip), _i32(lo, loc, ip), _i32(hi, loc, ip)]
    _asm(0, "st.global.v2.b32 [$0], {$1, $2};", "l,r,r", operands, True, loc, ip)


@dsl_user_op
def store_u8(address: cutlass.Int64, value: cutlass.Int32, *, loc=None, ip=None):
    """The low byte of ``value`` to ``address``."""
    operands = [_i64(address, loc, ip), _i32(value, loc, ip)]
    _asm(0, "st.global.u8 [$0], $1;", "l,r", operands, True, loc, ip)


@dsl_user_op
def block_scale(words, g_bits: cutlass.Int32, fp16: bool, *, loc=None, ip=None):
    """The E4M3 scale byte of one 16-element block (8 words) for global scale ``g_bits``."""
    operands = [_i32(w, loc, ip) for w in words] + [_i32(g_bits, loc, ip)]
    return _asm(1, _SCALE_PTX[fp16], "=r," + ",".join(["r"] * 9), operands, False, loc, ip)[0]


@dsl_user_op
def block_codes(words, m_bits: cutlass.Int32, fp16: bool, *, loc=None, ip=None):
    """(codes of elements 0..7, codes of 8..15) of one block for its multiplier m."""
    operands = [_i32(w, loc, ip) for w in words] + [_i32(m_bits, loc, ip)]
    return _asm(2, _CODES_PTX[fp16], "=r,=r," + ",".join(["r"] * 9), operands, False, loc, ip)


@dsl_user_op
def multiplier(scale_byte: cutlass.Int32, g_bits: cutlass.Int32, *, loc=None, ip=None):
    """m = g / e4m3(scale_byte), 0 where that is not > 0 (float32 bits)."""
    operands = [_i32(scale_byte, loc, ip), _i32(g_bits, loc, ip)]
    return _asm(1, _MULTIPLIER_PTX, "=r,r,r", operands, False, loc, ip)[0]


# ---------------------------------------------------------------------------------------
# device code
# ---------------------------------------------------------------------------------------


@cute.jit
def clamp(value, low, high):
    return cutlass.min(cutlass.max(value, low), high)


@cute.jit
def expert_segments(plan, run, s_seg, s_first, s_rows, s_warp, tidx):
    """Contiguous form: every expert's first output row, rows and first scale row (into
    shared memory), from the device offsets clamped as the routing kernel clamps them;
    s_seg[experts] is the end of the last segment."""
    experts = cutlass.Int32(plan[Q_EXPERTS])
    capacity = cutlass.Int32(plan[Q_CAPACITY])
    offsets = cute.make_tensor(
        cute.make_ptr(cutlass.Int32, run[R_ROUTING], cute.AddressSpace.gmem, assumed_align=4),
        cute.make_layout(MAX_EXPERTS + 1),
    )
    carried = cutlass.Int32(0)
    for base in cutlass.range(0, experts, THREADS, unroll=1):
        expert = base + tidx
        first = cutlass.Int32(0)
        rows = cutlass.Int32(0)
        if expert < experts:
            first = clamp(offsets[expert], 0, capacity)
            rows = clamp(offsets[expert + 1], first, capacity) - first
        padded = (rows + SF_ROWS - 1) // SF_ROWS * SF_ROWS
        before, total = block_scan(padded, s_warp, tidx)
        if expert < experts:
            s_seg[expert] = carried + before
            s_first[expert] = first
            s_rows[expert] = rows
        carried = carried + total
    if tidx == 0:
        s_seg[experts] = carried
    cute.arch.barrier()


@cute.jit
def locate(plan, run, s, form, s_seg, s_first, s_rows):
    """(kind, input row, output row) of scale row ``s`` for this run's routing."""
    kind = cutlass.Int32(ROW_NONE)
    in_row = cutlass.Int32(0)
    out_row = cutlass.Int32(0)
    capacity = cutlass.Int32(plan[Q_CAPACITY])
    if form == FORM_CONTIGUOUS:
        experts = cutlass.Int32(plan[Q_EXPERTS])
        # the last expert whose segment starts at or before s (empty ones start where
        # the next one does, so the found one holds s unless s is past every segment)
        low = cutlass.Int32(0)
        length = experts
        for _step in cutlass.range_constexpr(SEARCH_STEPS):
            half = length // 2
            if length > 0:
                if s_seg[low + half] <= s:
                    low = low + half + 1
                    length = length - half - 1
                else:
                    length = half
        expert = low - 1
        r = s - s_seg[expert]
        if s < s_seg[experts] and r >= 0:
            rows = s_rows[expert]
            kind = cutlass.Int32(ROW_PADDING)
            if r < rows:
                kind = cutlass.Int32(ROW_TOKENS)
                out_row = s_first[expert] + r
                in_row = out_row
                if run[R_INDEX] != 0:
                    index = cute.make_tensor(
                        cute.make_ptr(
                            cutlass.Int32, run[R_INDEX], cute.AddressSpace.gmem, assumed_align=4
                        ),
                        cute.make_layout(capacity),
                    )
                    in_row = clamp(index[out_row], 0, cutlass.Int32(plan[Q_INPUT_ROWS]) - 1)
    elif form == FORM_MASKED:
        per_expert = cutlass.Int32(plan[Q_EXPERT_SCALE_ROWS])
        expert = s // per_expert
        r = s - expert * per_expert
        masked_m = cute.make_tensor(
            cute.make_ptr(cutlass.Int32, run[R_ROUTING], cute.AddressSpace.gmem, assumed_align=4),
            cute.make_layout(MAX_EXPERTS),
        )
        rows = clamp(masked_m[expert], 0, capacity)
        if r < rows:
            kind = cutlass.Int32(ROW_TOKENS)
            out_row = expert * capacity + r
            in_row = out_row
        elif r < (rows + SF_ROWS - 1) // SF_ROWS * SF_ROWS:
            kind = cutlass.Int32(ROW_PADDING)
    else:
        kind = cutlass.Int32(ROW_PADDING)
        if s < capacity:
            kind = cutlass.Int32(ROW_TOKENS)
            out_row = s
            in_row = s
    return kind, in_row, out_row


@cute.jit
def unit_row(plan, run, unit, units, segments, form, s_seg, s_first, s_rows):
    """(kind, input row, output row, scale row, segment) of ``unit``; ROW_NONE past the
    plan's last unit."""
    kind = cutlass.Int32(ROW_NONE)
    in_row = cutlass.Int32(0)
    out_row = cutlass.Int32(0)
    s = cutlass.Int32(0)
    segment = cutlass.Int32(0)
    if unit < units:
        s = unit // segments
        segment = unit - s * segments
        kind, in_row, out_row = locate(plan, run, s, form, s_seg, s_first, s_rows)
    return kind, in_row, out_row, s, segment


@cute.jit
def load_unit(words: cute.Tensor, half: cutlass.Constexpr[int], x, row_stride, kind, in_row,
              segment, lane, blocks):  # fmt: skip
    """Issue the lane's 16-byte loads of a unit into words[32 * half ...] (zeros for
    blocks past k and for rows that are not token rows)."""
    x_row = x + cutlass.Int64(in_row) * row_stride
    first_block = segment * SEGMENT_BLOCKS + lane
    for j in cutlass.range_constexpr(BLOCKS_PER_LANE):
        b = first_block + 32 * j
        live = cutlass.Int32(0)
        if kind == ROW_TOKENS:
            if b < blocks:
                live = cutlass.Int32(1)
        address = x_row + cutlass.Int64(b) * 32
        loaded = load_v4(address, live) + load_v4(address + 16, live)
        for i in cutlass.range_constexpr(8):
            words[32 * half + 8 * j + i] = loaded[i]


@cute.jit
def store_unit(words: cute.Tensor, fp16: cutlass.Constexpr[bool], g_bits, s_mult, out,
               out_row_bytes, scales, col_tiles, kind, out_row, s, segment, lane, blocks,
               blocks_padded):  # fmt: skip
    """Quantize the unit held in words[0 .. 32] and store its codes and scale bytes (zero
    scales for a padding row); a block's multiplier g / sf comes from the CTA's table."""
    # the blocked-scale byte of (s, block b) is sf_row + (b // 4) * 512 + b % 4 (s, b >= 0:
    # shifts and masks, not signed divisions)
    sf_row = (
        scales
        + cutlass.Int64(s >> 7) * col_tiles * 512
        + cutlass.Int64((s & 31) * 16 + ((s >> 5) & 3) * 4)
    )
    first_block = segment * SEGMENT_BLOCKS + lane
    if kind == ROW_TOKENS:
        out_row_address = out + cutlass.Int64(out_row) * out_row_bytes
        for j in cutlass.range_constexpr(BLOCKS_PER_LANE):
            b = first_block + 32 * j
            if b < blocks_padded:
                block = [words[8 * j + i] for i in range(8)]
                sf = block_scale(block, g_bits, fp16)
                lo, hi = block_codes(block, s_mult[sf], fp16)
                if b < blocks:
                    store_v2(out_row_address + cutlass.Int64(b) * 8, lo, hi)
                store_u8(sf_row + cutlass.Int64((b >> 2) * 512 + (b & 3)), sf)
    elif kind == ROW_PADDING:
        for j in cutlass.range_constexpr(BLOCKS_PER_LANE):
            b = first_block + 32 * j
            if b < blocks_padded:
                store_u8(sf_row + cutlass.Int64((b >> 2) * 512 + (b & 3)), cutlass.Int32(0))


@cute.jit
def quantize_units(plan, run, form, s_seg, s_first, s_rows, s_mult,
                   fp16: cutlass.Constexpr[bool]):  # fmt: skip
    """The warp's units, software-pipelined: the loads of the next unit are issued
    before the current one is quantized, so that every warp keeps its 4 KB of loads in
    flight while it computes (DRAM latency is otherwise exposed once a unit).

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
    units = cutlass.Int32(plan[Q_UNITS])
    col_tiles = cutlass.Int64(plan[Q_COL_TILES])
    row_stride = plan[Q_ROW_STRIDE_BYTES]
    out_row_bytes = plan[Q_OUT_ROW_BYTES]
    x = run[R_X]
    out = run[R_OUT]
    scales = run[R_SCALES]
    words = cute.make_rmem_tensor(2 * 8 * BLOCKS_PER_LANE, cutlass.Int32)  # [this | next]
    step = ctas * WARPS
    position = cta * WARPS + warp  # (w + i) mod step
    kind, in_row, out_row, s, segment = unit_row(
        plan, run, position, units, segments, form, s_seg, s_first, s_rows
    )
    load_unit(words, 0, x, row_stride, kind, in_row, segment, lane, blocks)
    # while those loads fly: the multiplier g / sf of every scale byte, once per CTA (a
    # block looks its one up instead of dividing)
    g_bits = cute.make_tensor(
        cute.make_ptr(cutlass.Int32, run[R_GLOBAL_SCALE], cute.AddressSpace.gmem, assumed_align=4),
        cute.make_layout(1),
    )[0]
    for i in cutlass.range_constexpr(256 // THREADS):
        s_mult[tidx + THREADS * i] = multiplier(tidx + THREADS * i, g_bits)
    cute.arch.barrier()
    base = cutlass.Int32(0)
    for _round in cutlass.range(0, (units + step - 1) // step, 1, unroll=1):
        base = base + step
        position = position + 1
        if position == step:
            position = cutlass.Int32(0)
        next_kind, next_in, next_out, next_s, next_segment = unit_row(
            plan, run, base + position, units, segments, form, s_seg, s_first, s_rows
        )
        load_unit(words, 1, x, row_stride, next_kind, next_in, next_segment, lane, blocks)
        store_unit(words, fp16, g_bits, s_mult, out, out_row_bytes, scales, col_tiles, kind,
                   out_row, s, segment, lane, blocks, blocks_padded)  # fmt: skip
        for i in cutlass.range_constexpr(8 * BLOCKS_PER_LANE):
            words[i] = words[8 * BLOCKS_PER_LANE + i]
        kind = next_kind
        in_row = next_in
        out_row = next_out
        s = next_s
        segment = next_segment


@cute.kernel
def kernel(ptr_of_plan: cute.Pointer, ptr_of_run: cute.Pointer):
    tidx, _, _ = cute.arch.thread_idx()
    plan = cute.make_tensor(ptr_of_plan, cute.make_layout(Q_WORDS))
    run = cute.make_tensor(ptr_of_run, cute.make_layout(R_WORDS))

    @cute.struct
    class SharedStorage:
        segment_rows: cute.struct.MemRange[cutlass.Int32, MAX_EXPERTS + 1]
        first_rows: cute.struct.MemRange[cutlass.Int32, MAX_EXPERTS]
        expert_rows: cute.struct.MemRange[cutlass.Int32, MAX_EXPERTS]
        warp_totals: cute.struct.MemRange[cutlass.Int32, WARPS]
        multipliers: cute.struct.MemRange[cutlass.Int32, 256]

    storage = SmemAllocator().allocate(SharedStorage)
    s_seg = storage.segment_rows.get_tensor(cute.make_layout(MAX_EXPERTS + 1))
    s_first = storage.first_rows.get_tensor(cute.make_layout(MAX_EXPERTS))
    s_rows = storage.expert_rows.get_tensor(cute.make_layout(MAX_EXPERTS))
    s_warp = storage.warp_totals.get_tensor(cute.make_layout(WARPS))
    s_mult = storage.multipliers.get_tensor(cute.make_layout(256))

    form = cutlass.Int32(plan[Q_FORM])
    if form == FORM_CONTIGUOUS:
        expert_segments(plan, run, s_seg, s_first, s_rows, s_warp, tidx)
    if plan[Q_FP16] != 0:
        quantize_units(plan, run, form, s_seg, s_first, s_rows, s_mult, True)
    else:
        quantize_units(plan, run, form, s_seg, s_first, s_rows, s_mult, False)


@cute.jit
def quantize_host(ptr_of_plan: cute.Pointer, ptr_of_run: cute.Pointer, num_ctas: cutlass.Int32):
    """Launch ``num_ctas`` CTAs that stride over the plan's units."""
    kernel(ptr_of_plan, ptr_of_run).launch(grid=(num_ctas, 1, 1), block=[THREADS, 1, 1])
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
