"""Session 27's timing-only probe of the quantizer, every form: main's kernel (or a
make_moe_variants.py variant applied first) plus per-warp stamps, written by lane 0 of each
warp after its last unit to the global-scale buffer at byte 256 + 64 * warp (the harness,
timeline_moe.py, passes a 1 MB buffer with g in its first word). Edits
nvfp4_aot/kernels/nvfp4_quantize.py in place (run in a worktree).

words (u32): 0 smid, 1 globaltimer at the wait, 2 globaltimer at the end, 3-12 SM clock
at: entry, the PDL wait, the routing tables (MoE: after expert_segments; plain: the
wait), the first unit descriptions, the first copies started, the multiplier table's
barrier, the padding zeroed, the first unit's data landed, the first unit quantized, the
end; 13 rounds, 14 the first unit's kind, 15 globaltimer at entry.
"""

from pathlib import Path

KERNEL = Path("nvfp4_aot/kernels/nvfp4_quantize.py")
text = KERNEL.read_text()


def sub(old: str, new: str, count: int = 1) -> None:
    global text
    assert text.count(old) == count, (old, text.count(old))
    text = text.replace(old, new)


sub(
    "from .inline_ptx import asm, asm_i32s,",
    "from .inline_ptx import asm_i32, asm, asm_i32s,",
)
sub(
    'FAMILY = "nvfp4_quantize"',
    '''@dsl_user_op
def stamp(which: str, *, loc=None, ip=None):
    return asm_i32(f"mov.u32 $0, %{which};", "=r,~{memory}", [], loc, ip)


@dsl_user_op
def store_stamps(address: cutlass.Int64, words, *, loc=None, ip=None):
    for q in range(4):
        asm(
            "st.global.v4.u32 [$0], {$1, $2, $3, $4};",
            "l,r,r,r,r",
            [ir_i64(address + 16 * q, loc, ip)]
            + [ir_i32(w, loc, ip) for w in words[4 * q : 4 * q + 4]],
            loc,
            ip,
        )


FAMILY = "nvfp4_quantize"''',
)
# entry
sub(
    """    tidx, _, _ = cute.arch.thread_idx()
    cta, _, _ = cute.arch.block_idx()
    ctas, _, _ = cute.arch.grid_dim()
    lane = tidx % 32
    warp = tidx // 32
    blocks = cutlass.Int32(plan[Q_BLOCKS])""",
    """    c_entry = stamp("clock")
    t_entry = stamp("globaltimer_lo")
    tidx, _, _ = cute.arch.thread_idx()
    cta, _, _ = cute.arch.block_idx()
    ctas, _, _ = cute.arch.grid_dim()
    lane = tidx % 32
    warp = tidx // 32
    blocks = cutlass.Int32(plan[Q_BLOCKS])""",
)
# the wait and the routing tables (MoE), or the wait (plain)
sub(
    """    if cutlass.const_expr(form != FORM_PLAIN):
        cute.arch.griddepcontrol_wait()
        expert_segments(""",
    """    c_wait = cutlass.Int32(0)
    t_wait = cutlass.Int32(0)
    c_routed = cutlass.Int32(0)
    if cutlass.const_expr(form != FORM_PLAIN):
        cute.arch.griddepcontrol_wait()
        c_wait = stamp("clock")
        t_wait = stamp("globaltimer_lo")
        expert_segments(""",
)
sub(
    """        units = cutlass.min(tables[2][experts] * segments, scale_units)
    k0, i0, o0, s0, e0 = describe_batch(0,""",
    """        units = cutlass.min(tables[2][experts] * segments, scale_units)
        c_routed = stamp("clock")
    k0, i0, o0, s0, e0 = describe_batch(0,""",
)
sub(
    """    if cutlass.const_expr(form == FORM_PLAIN):
        cute.arch.griddepcontrol_wait()
    g_bits = global_scale[0]""",
    """    c_described = stamp("clock")
    if cutlass.const_expr(form == FORM_PLAIN):
        cute.arch.griddepcontrol_wait()
        c_wait = stamp("clock")
        t_wait = stamp("globaltimer_lo")
        c_routed = c_wait
    g_bits = global_scale[0]""",
)
sub(
    """                   input_rows, blocks, unit_blocks, lane, False)  # fmt: skip
    # while those copies fly""",
    """                   input_rows, blocks, unit_blocks, lane, False)  # fmt: skip
    c_copy = stamp("clock")
    kind0 = units_ahead[F_KIND]
    # while those copies fly""",
)
sub(
    """    cute.arch.barrier()
    zero_padding(form, experts, capacity, col_tiles, scale_rows // SF_ROWS, scales, tables[0],
                 tables[1], warp_index, step, lane)  # fmt: skip
""",
    """    cute.arch.barrier()
    c_table = stamp("clock")
    zero_padding(form, experts, capacity, col_tiles, scale_rows // SF_ROWS, scales, tables[0],
                 tables[1], warp_index, step, lane)  # fmt: skip
    c_padding = stamp("clock")
    c_data0 = cutlass.Int32(0)
    c_done0 = cutlass.Int32(0)
    rounds = cutlass.Int32(0)
""",
)
sub(
    """        mbar_wait(full0 + 8 * consume, parity)
        quantize_unit(units_ahead, stage0 + consume * STAGE_BYTES, fp16, g_bits, s_mult, out,
                      out_row_bytes, scales, col_tiles, lane, blocks, blocks_padded,
                      unit_blocks)  # fmt: skip
""",
    """        mbar_wait(full0 + 8 * consume, parity)
        if r == 0:
            c_data0 = stamp("clock")
        quantize_unit(units_ahead, stage0 + consume * STAGE_BYTES, fp16, g_bits, s_mult, out,
                      out_row_bytes, scales, col_tiles, lane, blocks, blocks_padded,
                      unit_blocks)  # fmt: skip
        if r == 0:
            c_done0 = stamp("clock")
        rounds = rounds + 1
""",
)
sub(
    """        for i in cutlass.range_constexpr(DESCRIPTOR * AHEAD):
            units_ahead[i] = units_ahead[DESCRIPTOR + i]
""",
    """        for i in cutlass.range_constexpr(DESCRIPTOR * AHEAD):
            units_ahead[i] = units_ahead[DESCRIPTOR + i]
    c_end = stamp("clock")
    t_end = stamp("globaltimer_lo")
    if lane == 0:
        words = [stamp("smid"), t_wait, t_end, c_entry, c_wait, c_routed, c_described, c_copy,
                 c_table, c_padding, c_data0, c_done0, c_end, rounds, kind0, t_entry]
        store_stamps(cutlass.Int64(run[R_GLOBAL_SCALE]) + 256 + cutlass.Int64(warp_index) * 64,
                     words)
""",
)
KERNEL.write_text(text)
