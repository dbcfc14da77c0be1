"""Timing-only probe (session 20): the quantizer (main's at ae8dddf, or a session-20
candidate: calls 1, 2, 5; the two were separate scripts then, with these same edits) plus per-warp timestamps
(globaltimer / clock64 / smid) written by lane 0 of each warp over the INPUT buffer x at
x + warp_index * 128 after the warp's last unit (bytes differ by design). Edits the kernel in
place; bake with bake_one.py, then `git checkout nvfp4_aot/kernels`.

words: 0 smid, 1 gt_entry, 2 gt_wait, 3 gt_end, 4 clk_entry, 5 clk_wait, 6 clk_copy,
7 clk_prologue, 8 clk_data0, 9 clk_done0, 10 clk_end, 11 rounds, 12 clk_data_last,
13 clk_done_last
"""

from pathlib import Path

KERNEL = Path("nvfp4_aot/kernels/nvfp4_quantize.py")
text = KERNEL.read_text()


def replace(old: str, new: str, count: int = 1) -> None:
    global text
    assert text.count(old) == count, (old, text.count(old))
    text = text.replace(old, new)


replace(
    "from .inline_ptx import asm, asm_i32s,",
    "from .inline_ptx import _inline_asm, asm_i32, asm, asm_i32s,",
)
replace(
    '''FAMILY = "nvfp4_quantize"''',
    '''@dsl_user_op
def stamp(which: str, *, loc=None, ip=None):
    return cutlass.Int64(_inline_asm(cutlass.Int64.mlir_type, f"mov.u64 $0, %{which};", "=l",
                                     [], True, loc, ip))


@dsl_user_op
def smid(*, loc=None, ip=None):
    return asm_i32("mov.u32 $0, %smid;", "=r", [], loc, ip)


FAMILY = "nvfp4_quantize"''',
)
if "    cute.arch.griddepcontrol_wait()\n    operands = (x, out" in text:
    # main's kernel at ae8dddf (call 1): the wait in the kernel function
    replace(
        """    cute.arch.griddepcontrol_wait()
    operands = (x, out, scales, global_scale[0])""",
        """    t_entry = stamp("globaltimer")
    c_entry = stamp("clock64")
    cute.arch.griddepcontrol_wait()
    t_wait = stamp("globaltimer")
    c_wait = stamp("clock64")
    operands = (x, out, scales, global_scale[0], t_entry, c_entry, t_wait, c_wait)""",
    )
    replace(
        "    x, out, scales, g_bits = operands\n",
        "    x, out, scales, g_bits, t_entry, c_entry, t_wait, c_wait = operands\n",
    )
else:
    # session 20's candidates (calls 2, 5): the wait in quantize_units, per form
    replace(
        """    tables = (s_seg, s_rows, s_unit)
    if form == FORM_PLAIN:""",
        """    tables = (s_seg, s_rows, s_unit)
    operands = (*operands, stamp("globaltimer"), stamp("clock64"))
    if form == FORM_PLAIN:""",
    )
    replace(
        "    x, out, scales, global_scale = operands\n",
        "    x, out, scales, global_scale, t_entry, c_entry = operands\n",
    )
    replace(
        """        cute.arch.griddepcontrol_wait()
    else:
        cute.arch.griddepcontrol_wait()
""",
        """        cute.arch.griddepcontrol_wait()
        t_wait = stamp("globaltimer")
        c_wait = stamp("clock64")
    else:
        cute.arch.griddepcontrol_wait()
        t_wait = stamp("globaltimer")
        c_wait = stamp("clock64")
""",
    )
replace(
    """    # while those copies fly: the multiplier""",
    """    c_copy = stamp("clock64")
    # while those copies fly: the multiplier""",
)
replace(
    """    batch_first = cutlass.Int32(0)  # the round lane 0's description is of""",
    """    c_prologue = stamp("clock64")
    c_data0 = cutlass.Int64(0)
    c_done0 = cutlass.Int64(0)
    c_data = cutlass.Int64(0)
    c_done = cutlass.Int64(0)
    rounds = (units + step - 1) // step
    batch_first = cutlass.Int32(0)  # the round lane 0's description is of""",
)
replace(
    """        mbar_wait(full0 + 8 * consume, parity)
        quantize_unit(units_ahead, stage0 + consume * STAGE_BYTES, fp16, g_bits, s_mult, out,
                      out_row_bytes, scales, col_tiles, lane, blocks, blocks_padded,
                      unit_blocks)  # fmt: skip
""",
    """        mbar_wait(full0 + 8 * consume, parity)
        c_data = stamp("clock64")
        quantize_unit(units_ahead, stage0 + consume * STAGE_BYTES, fp16, g_bits, s_mult, out,
                      out_row_bytes, scales, col_tiles, lane, blocks, blocks_padded,
                      unit_blocks)  # fmt: skip
        c_done = stamp("clock64")
        if r == 0:
            c_data0 = c_data
            c_done0 = c_done
""",
)
replace(
    """        for i in cutlass.range_constexpr(DESCRIPTOR * AHEAD):
            units_ahead[i] = units_ahead[DESCRIPTOR + i]
""",
    """        for i in cutlass.range_constexpr(DESCRIPTOR * AHEAD):
            units_ahead[i] = units_ahead[DESCRIPTOR + i]
    c_end = stamp("clock64")
    t_end = stamp("globaltimer")
    if lane == 0:
        log = cute.make_tensor(
            cute.make_ptr(cutlass.Int64, x + cutlass.Int64(warp_index) * 128,
                          cute.AddressSpace.gmem, assumed_align=16),
            cute.make_layout(16),
        )
        log[0] = cutlass.Int64(smid())
        log[1] = t_entry
        log[2] = t_wait
        log[3] = t_end
        log[4] = c_entry
        log[5] = c_wait
        log[6] = c_copy
        log[7] = c_prologue
        log[8] = c_data0
        log[9] = c_done0
        log[10] = c_end
        log[11] = cutlass.Int64(rounds)
        log[12] = c_data
        log[13] = c_done
""",
)
KERNEL.write_text(text)
print("timeline probe written")
