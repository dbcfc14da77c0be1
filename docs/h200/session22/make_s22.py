"""Session 22 variants of main's quantizer (f5ba190), edited in place (bake with
bake_one.py, then `git checkout nvfp4_aot/kernels`).

    lds2   conflict-free shared reads: lanes with (lane >> 2) & 1 read a block's second
           16 bytes first (the words' halves swap; the code words are swapped back at the store)
    sc4    the four blocks' scale chains first, then the element math two blocks at a time
    i4     INTERLEAVE = 4
"""

import sys
from pathlib import Path

KERNEL = Path("nvfp4_aot/kernels/nvfp4_quantize.py")


def sub(old: str, new: str) -> None:
    t = KERNEL.read_text()
    assert t.count(old) == 1, old
    KERNEL.write_text(t.replace(old, new))


def main():
    for what in sys.argv[1:]:
        if what in EXTRA:
            EXTRA[what]()
        elif what == "lds2":
            sub(
                '''_STORE_CODES_PTX = """{
.reg .pred p;
setp.lt.s32 p, $3, $4;
@p st.global.v2.b32 [$0], {$1, $2};
}"""''',
                '''_STORE_CODES_PTX = """{
.reg .pred p, q;
.reg .b32 a, b;
setp.lt.s32 p, $3, $4;
setp.ne.s32 q, $5, 0;
selp.b32 a, $2, $1, q;
selp.b32 b, $1, $2, q;
@p st.global.v2.b32 [$0], {a, b};
}"""''',
            )
            sub(
                '''                block: cutlass.Int32, blocks: cutlass.Int32, *, loc=None, ip=None):  # fmt: skip
    """8 bytes (``lo`` first) to ``address`` if ``block`` < ``blocks`` (predicated: no
    branch splits the unit's math)."""
    operands = [ir_i64(address, loc, ip)] + [ir_i32(v, loc, ip) for v in (lo, hi, block, blocks)]
    asm(_STORE_CODES_PTX, "l,r,r,r,r", operands, loc, ip)''',
                '''                block: cutlass.Int32, blocks: cutlass.Int32, swap, *, loc=None, ip=None):  # fmt: skip
    """8 bytes (``lo`` first) to ``address`` if ``block`` < ``blocks`` (predicated: no
    branch splits the unit's math)."""
    operands = [ir_i64(address, loc, ip)] + [ir_i32(v, loc, ip) for v in (lo, hi, block, blocks, swap)]
    asm(_STORE_CODES_PTX, "l,r,r,r,r,r", operands, loc, ip)''',
            )
            sub(
                '''def block_words(block):
    """A block's 32 bytes in shared memory as 8 Int32 (two 16-byte loads)."""
    return [*lds_v4(block), *lds_v4(block + 16)]''',
                '''def block_words(block, swap):
    """A block's 32 bytes in shared memory as 8 Int32 (two 16-byte loads), its second
    half first where swap is 16 (no bank conflicts: 8 lanes read 128 distinct bytes)."""
    return [*lds_v4(block + swap), *lds_v4(block + 16 - swap)]''',
            )
            sub(
                """            sf = block_scale(block_words(block), g_bits, fp16)""",
                """            sf = block_scale(block_words(block, swap), g_bits, fp16)""",
            )
            sub(
                """            done.append((j, sf, *block_codes(block_words(block), m, fp16)))""",
                """            done.append((j, sf, *block_codes(block_words(block, swap), m, fp16)))""",
            )
            sub(
                """            store_codes(codes_first + 256 * j, lo, hi, b, blocks)""",
                """            store_codes(codes_first + 256 * j, lo, hi, b, blocks, swap)""",
            )
            sub(
                """    for first in cutlass.range_constexpr(0, count, INTERLEAVE):
        scaled = []""",
                """    swap = (lane & 4) * 4
    for first in cutlass.range_constexpr(0, count, INTERLEAVE):
        scaled = []""",
            )
        elif what == "sc4":
            sub(
                """    for first in cutlass.range_constexpr(0, count, INTERLEAVE):
        scaled = []
        for j in cutlass.range_constexpr(first, min(first + INTERLEAVE, count)):
            block = stage + 32 * (lane + 32 * j)
            sf = block_scale(block_words(block), g_bits, fp16)
            scaled.append((j, block, sf, s_mult[sf]))
        done = []
        for j, block, sf, m in scaled:""",
                """    every = []
    for j in cutlass.range_constexpr(count):
        block = stage + 32 * (lane + 32 * j)
        sf = block_scale(block_words(block), g_bits, fp16)
        every.append((j, block, sf, s_mult[sf]))
    for first in cutlass.range_constexpr(0, count, INTERLEAVE):
        scaled = every[first:first + INTERLEAVE]
        done = []
        for j, block, sf, m in scaled:""",
            )
        elif what == "i4":
            sub("INTERLEAVE = 2  #", "INTERLEAVE = 4  #")
        else:
            raise SystemExit(__doc__)


def wide():
    """One CTA of 16 warps an SM (session 21's b512 with the current table rows)."""
    sub("THREADS = 256\n", "THREADS = 512\n")
    sub(
        """    table_rows = range(0, 256, THREADS)
    decoded = [reciprocal(tidx + row) for row in table_rows]""",
        """    table_rows = range(0, 256, THREADS)
    decoded = [reciprocal(tidx % 256 + row) for row in table_rows]""",
    )
    sub(
        """    for row, divisor in zip(table_rows, decoded):
        if g_exponent""",
        """    for row, divisor in zip(table_rows, decoded):
      if tidx < 256:
        if g_exponent""",
    )
    sub(
        """        else:  # 0, subnormal, huge or non-finite g (the same branch for the whole grid)
            s_mult[tidx + row] = multiplier(g_bits, divisor)""",
        """        else:  # 0, subnormal, huge or non-finite g (the same branch for the whole grid)
          s_mult[tidx + row] = multiplier(g_bits, divisor)""",
    )
    p = Path("nvfp4_aot/kernels/__init__.py")
    t = p.read_text()
    old = "blocks_per_sm=2,  # each CTA's"
    assert t.count(old) == 1
    p.write_text(t.replace(old, "blocks_per_sm=1,  # each CTA's"))


def claim():
    """Single-round plain runs of 128-block units: every warp claims (unit, block pair)
    tasks from a CTA counter, pair 0 of every unit first, one code path (a 2-block
    math at runtime offsets)."""
    sub("from .inline_ptx import asm, asm_i32s,", "from .inline_ptx import asm, asm_i32, asm_i32s,")
    sub(
        """@dsl_user_op
def arrive(full""",
        """@dsl_user_op
def fetch_add(counter: cutlass.Int32, *, loc=None, ip=None):
    return asm_i32("atom.shared::cta.add.u32 $0, [$1], 1;", "=r,r", [ir_i32(counter, loc, ip)],
                   loc, ip)


@cute.jit
def claim(claims, lane):
    item = cutlass.Int32(0)
    if lane == 0:
        item = fetch_add(claims)
    return cute.arch.shuffle_sync(item, 0)


@cute.jit
def claim_pairs(s_desc: cute.Tensor, claims, stages, fulls, fp16: cutlass.Constexpr[bool],
                g_bits, s_mult, out, out_row_bytes, scales, col_tiles, lane, blocks,
                blocks_padded):
    item = claim(claims, lane)
    while item < 2 * WARPS:
        owner = item % WARPS
        pair = item // WARPS
        if s_desc[4 * owner] == ROW_TOKENS:
            segment = s_desc[4 * owner + 3]
            columns = cutlass.min(blocks - segment * SEGMENT_BLOCKS, SEGMENT_BLOCKS)
            if columns > 64 * pair:
                mbar_wait(fulls + owner * (STAGES * 8), 0)
                out_row = s_desc[4 * owner + 1]
                s = s_desc[4 * owner + 2]
                sf_row = (
                    scales
                    + cutlass.Int64(s >> 7) * col_tiles * 512
                    + cutlass.Int64((s & 31) * 16 + ((s >> 5) & 3) * 4)
                )
                first_block = segment * SEGMENT_BLOCKS + lane + 64 * pair
                sf_first = sf_row + cutlass.Int64((first_block >> 2) * 512 + (first_block & 3))
                codes_first = (out + cutlass.Int64(out_row) * out_row_bytes
                               + cutlass.Int64(first_block) * 8)
                stage = stages + owner * (STAGES * STAGE_BYTES) + 2048 * pair
                quantize_blocks(2, stage, lane, fp16, g_bits, s_mult, codes_first, sf_first,
                                first_block, blocks, blocks_padded)
        item = claim(claims, lane)


@dsl_user_op
def arrive(full""",
    )
    sub(
        """def quantize_units(plan, run, form: cutlass.Constexpr[int], tables, s_warp, s_mult, stages,
                   fulls, fp16: cutlass.Constexpr[bool], operands):  # fmt: skip""",
        """def quantize_units(plan, run, form: cutlass.Constexpr[int], tables, s_warp, s_mult, stages,
                   fulls, fp16: cutlass.Constexpr[bool], operands, shared):  # fmt: skip""",
    )
    sub(
        """    x, out, scales, global_scale = operands
    # this warp's stages""",
        """    x, out, scales, global_scale = operands
    s_desc, s_claim = shared
    # this warp's stages""",
    )
    sub(
        """        start_copy(units_ahead, d, stage0 + d * STAGE_BYTES, full0 + 8 * d, x, row_stride,
                   input_rows, blocks, unit_blocks, lane, False)  # fmt: skip""",
        """        start_copy(units_ahead, d, stage0 + d * STAGE_BYTES, full0 + 8 * d, x, row_stride,
                   input_rows, blocks, unit_blocks, lane, False)  # fmt: skip
    if lane == 0:
        s_desc[4 * warp] = units_ahead[F_KIND]
        s_desc[4 * warp + 1] = units_ahead[F_OUT_ROW]
        s_desc[4 * warp + 2] = units_ahead[F_SCALE_ROW]
        s_desc[4 * warp + 3] = units_ahead[F_SEGMENT]
    if tidx == 0:
        s_claim[0] = 0""",
    )
    sub(
        """    batch_first = cutlass.Int32(0)  # the round lane 0's description is of
    consume = cutlass.Int32(0)  # the stage of the unit quantized this round, its parity
    parity = cutlass.Int32(0)
    produce = cutlass.Int32(AHEAD % STAGES)  # the stage the next copy goes to
    for r in cutlass.range(0, (units + step - 1) // step, 1, unroll=1):""",
        """    batch_first = cutlass.Int32(0)  # the round lane 0's description is of
    consume = cutlass.Int32(0)  # the stage of the unit quantized this round, its parity
    parity = cutlass.Int32(0)
    produce = cutlass.Int32(AHEAD % STAGES)  # the stage the next copy goes to
    rounds = (units + step - 1) // step
    if cutlass.const_expr(form == FORM_PLAIN):
        if units <= step and unit_blocks == SEGMENT_BLOCKS:
            rounds = cutlass.Int32(0)
            claim_pairs(s_desc, s_claim.iterator.toint(), stages, fulls, fp16, g_bits, s_mult,
                        out, out_row_bytes, scales, col_tiles, lane, blocks, blocks_padded)
    for r in cutlass.range(0, rounds, 1, unroll=1):""",
    )
    sub(
        """        quantize_units(plan, run, form, tables, s_warp, s_mult, stages, fulls, True, operands)
    else:
        quantize_units(plan, run, form, tables, s_warp, s_mult, stages, fulls, False, operands)""",
        """        quantize_units(plan, run, form, tables, s_warp, s_mult, stages, fulls, True, operands,
                       shared)
    else:
        quantize_units(plan, run, form, tables, s_warp, s_mult, stages, fulls, False, operands,
                       shared)""",
    )
    sub(
        """def quantize_form(plan, run, form: cutlass.Constexpr[int], fp16, tables, s_warp, s_mult, stages,
                  fulls, operands):  # fmt: skip""",
        """def quantize_form(plan, run, form: cutlass.Constexpr[int], fp16, tables, s_warp, s_mult, stages,
                  fulls, operands, shared):  # fmt: skip""",
    )
    sub(
        """        multipliers: cute.struct.MemRange[cutlass.Int32, 256]
""",
        """        multipliers: cute.struct.MemRange[cutlass.Int32, 256]
        descriptions: cute.struct.MemRange[cutlass.Int32, WARPS * 4]
        claims: cute.struct.MemRange[cutlass.Int32, 1]
""",
    )
    sub(
        """    stages = storage.stages.data_ptr().toint()""",
        """    shared = (
        storage.descriptions.get_tensor(cute.make_layout(WARPS * 4)),
        storage.claims.get_tensor(cute.make_layout(1)),
    )
    stages = storage.stages.data_ptr().toint()""",
    )
    t = KERNEL.read_text()
    for f in ("FORM_PLAIN", "FORM_CONTIGUOUS", "FORM_MASKED"):
        old = f"quantize_form(plan, run, {f}, fp16, tables, s_warp, s_mult, stages, fulls"
        assert t.count(old) == 1, old
    t = t.replace(
        """                      operands)  # fmt: skip""",
        """                      operands, shared)  # fmt: skip""",
    )
    t = t.replace(
        """fulls,
                      operands)  # fmt: skip""",
        """fulls,
                      operands, shared)  # fmt: skip""",
    )
    KERNEL.write_text(t)


EXTRA = {"wide": wide, "claim": claim}


def fat():
    """8 warps an SM (one CTA of 256 threads, up to 255 registers)."""
    p = Path("nvfp4_aot/kernels/__init__.py")
    t = p.read_text()
    old = "blocks_per_sm=2,  # each CTA's"
    assert t.count(old) == 1
    p.write_text(t.replace(old, "blocks_per_sm=1,  # each CTA's"))


def i4():
    sub("INTERLEAVE = 2  #", "INTERLEAVE = 4  #")


EXTRA.update(fat=fat, i4=i4)
main()
