"""Session 27's variants of main's quantizer (904fffc) for the MoE forms' extra ~1.4 µs
a run (timing-only ones, and correct candidates): edits nvfp4_aot/kernels/nvfp4_quantize.py in place (run in a
worktree; bake with docs/h200/session19/bake_one.py).

    python make_moe_variants.py nopad    # no padding scale rows zeroed (bytes differ)
    python make_moe_variants.py slots    # MoE units described from the plan before the
                                         # wait (unit u = output row u: masked e * max_m + m,
                                         # contiguous u), routing scans after the first
                                         # copies (masked with full counts: main's bytes)
    python make_moe_variants.py slots nopad
    python make_moe_variants.py search8  # the segment search's 11 steps cut to 8 (E <= 256)
    python make_moe_variants.py idxpre   # a correct candidate: contiguous runs with an
                                         # index load each lane's first-batch entry index[u]
                                         # right after the wait, beside the counts, and use
                                         # it where the routing puts unit row u at output
                                         # row u (offsets from 0, as the routing kernel
                                         # makes them); else index[out_row] as main does
    python make_moe_variants.py mslots   # a correct candidate: masked plans whose slots
                                         # (E x max_m x segments) fit one round of the grid
                                         # take the slots as units, described from the plan
                                         # before the wait (copies of empty slots too); the
                                         # counts are scanned after the first copies and a
                                         # slot past its expert's count is skipped
    python make_moe_variants.py padafter # a correct candidate: the padding scale rows
                                         # zeroed after the warp's units, not before (the
                                         # padding bytes are no unit's)
"""

import sys
from pathlib import Path

KERNEL = Path("nvfp4_aot/kernels/nvfp4_quantize.py")


def sub(old: str, new: str) -> None:
    t = KERNEL.read_text()
    assert t.count(old) == 1, old
    KERNEL.write_text(t.replace(old, new))


for what in sys.argv[1:]:
    if what == "nopad":
        sub(
            "    zero_padding(form, experts, capacity,",
            "    if cutlass.const_expr(False):\n        zero_padding(form, experts, capacity,",
        )
        sub(
            "                 tables[1], warp_index, step, lane)  # fmt: skip\n",
            "                     tables[1], warp_index, step, lane)  # fmt: skip\n",
        )
    elif what == "slots":
        sub(
            """    if form == FORM_PLAIN:
        kind = cutlass.Int32(ROW_TOKENS)
    else:""",
            """    if form == FORM_PLAIN:
        kind = cutlass.Int32(ROW_TOKENS)
    elif form == FORM_MASKED:
        kind = cutlass.Int32(ROW_TOKENS)
        e = u // capacity
        s = e * cutlass.Int32(plan[Q_EXPERT_SCALE_ROWS]) + (u - e * capacity)
    elif form == FORM_CONTIGUOUS:
        kind = cutlass.Int32(ROW_TOKENS)
    else:""",
        )
        sub(
            """    if cutlass.const_expr(form != FORM_PLAIN):
        cute.arch.griddepcontrol_wait()
        expert_segments(plan, run, form, *tables, s_warp, tidx)
        experts = cutlass.Int32(plan[Q_EXPERTS])
        units = cutlass.min(tables[2][experts] * segments, scale_units)
    k0, i0, o0, s0, e0 = describe_batch(0, warp_index, step, plan, run, units, segments,
                                        scale_rows, form, *tables, lane)  # fmt: skip
    if cutlass.const_expr(form == FORM_PLAIN):
        cute.arch.griddepcontrol_wait()
""",
            """    if cutlass.const_expr(form != FORM_PLAIN):
        experts = cutlass.Int32(plan[Q_EXPERTS])
        units = cutlass.Int32(plan[Q_UNITS]) // segments
        if cutlass.const_expr(form == FORM_MASKED):
            units = experts * capacity * segments
        else:
            units = capacity * segments
    k0, i0, o0, s0, e0 = describe_batch(0, warp_index, step, plan, run, units, segments,
                                        scale_rows, form, *tables, lane)  # fmt: skip
    cute.arch.griddepcontrol_wait()
""",
        )
        sub(
            """    # while those copies fly: the multiplier g / sf""",
            """    if cutlass.const_expr(form != FORM_PLAIN):
        expert_segments(plan, run, form, *tables, s_warp, tidx)
    # while those copies fly: the multiplier g / sf""",
        )
    elif what == "search8":
        sub("SEARCH_STEPS = (MAX_EXPERTS).bit_length()", "SEARCH_STEPS = 8")
    elif what == "idxpre":
        sub(
            "def locate(plan, run, u, form: cutlass.Constexpr[int], scale_rows, s_seg, s_rows, s_unit):",
            "def locate(plan, run, u, form: cutlass.Constexpr[int], scale_rows, s_seg, s_rows, s_unit,\n"
            "           pre_u, pre_row):",
        )
        sub(
            """            if form == FORM_CONTIGUOUS and run[R_INDEX] != 0:
                in_row = run_int32s(run, R_INDEX, capacity)[out_row]""",
            """            if form == FORM_CONTIGUOUS and run[R_INDEX] != 0:
                if out_row == pre_u:
                    in_row = pre_row
                else:
                    in_row = run_int32s(run, R_INDEX, capacity)[out_row]""",
        )
        sub(
            """                   form: cutlass.Constexpr[int], s_seg, s_rows, s_unit, lane):  # fmt: skip""",
            """                   form: cutlass.Constexpr[int], s_seg, s_rows, s_unit, lane, pre_u, pre_row):  # fmt: skip""",
        )
        sub(
            "        kind, in_row, out_row, s = locate(plan, run, u, form, scale_rows, s_seg, s_rows, s_unit)",
            "        kind, in_row, out_row, s = locate(plan, run, u, form, scale_rows, s_seg, s_rows, s_unit,\n"
            "                                          pre_u, pre_row)",
        )
        sub(
            """    if cutlass.const_expr(form != FORM_PLAIN):
        cute.arch.griddepcontrol_wait()
        expert_segments(""",
            """    pre_u = cutlass.Int32(-1)
    pre_row = cutlass.Int32(0)
    if cutlass.const_expr(form != FORM_PLAIN):
        cute.arch.griddepcontrol_wait()
        if cutlass.const_expr(form == FORM_CONTIGUOUS):
            if run[R_INDEX] != 0:
                first_unit = lane * step + (warp_index + lane) % step
                u0 = first_unit // segments
                if u0 < capacity:
                    pre_u = u0
                    pre_row = run_int32s(run, R_INDEX, capacity)[u0]
        expert_segments(""",
        )
        sub(
            """                                        scale_rows, form, *tables, lane)  # fmt: skip
    if cutlass.const_expr(form == FORM_PLAIN):""",
            """                                        scale_rows, form, *tables, lane, pre_u, pre_row)  # fmt: skip
    if cutlass.const_expr(form == FORM_PLAIN):""",
        )
        sub(
            """                                                segments, scale_rows, form, *tables,
                                                lane)  # fmt: skip""",
            """                                                segments, scale_rows, form, *tables,
                                                lane, cutlass.Int32(-1), cutlass.Int32(0))  # fmt: skip""",
        )
    elif what == "mslots":
        sub(
            "def locate(plan, run, u, form: cutlass.Constexpr[int], scale_rows, s_seg, s_rows, s_unit):",
            "def locate(plan, run, u, form: cutlass.Constexpr[int], scale_rows, s_seg, s_rows, s_unit,\n"
            "           slots):",
        )
        sub(
            """    if form == FORM_PLAIN:
        kind = cutlass.Int32(ROW_TOKENS)
    else:
        experts = cutlass.Int32(plan[Q_EXPERTS])""",
            """    use_slots = cutlass.Int32(0)
    if cutlass.const_expr(form == FORM_MASKED):
        use_slots = slots
    if form == FORM_PLAIN:
        kind = cutlass.Int32(ROW_TOKENS)
    elif use_slots != 0:  # masked, one round: unit row u is slot (e, m) = divmod(u, max_m)
        kind = cutlass.Int32(ROW_TOKENS)
        slot_expert = u // capacity
        s = slot_expert * cutlass.Int32(plan[Q_EXPERT_SCALE_ROWS]) + (u - slot_expert * capacity)
    else:
        experts = cutlass.Int32(plan[Q_EXPERTS])""",
        )
        sub(
            """                   form: cutlass.Constexpr[int], s_seg, s_rows, s_unit, lane):  # fmt: skip""",
            """                   form: cutlass.Constexpr[int], s_seg, s_rows, s_unit, lane, slots):  # fmt: skip""",
        )
        sub(
            "        kind, in_row, out_row, s = locate(plan, run, u, form, scale_rows, s_seg, s_rows, s_unit)",
            "        kind, in_row, out_row, s = locate(plan, run, u, form, scale_rows, s_seg, s_rows, s_unit,\n"
            "                                          slots)",
        )
        sub(
            """    if cutlass.const_expr(form != FORM_PLAIN):
        cute.arch.griddepcontrol_wait()
        expert_segments(plan, run, form, *tables, s_warp, tidx)
        experts = cutlass.Int32(plan[Q_EXPERTS])
        units = cutlass.min(tables[2][experts] * segments, scale_units)
    k0, i0, o0, s0, e0 = describe_batch(0, warp_index, step, plan, run, units, segments,
                                        scale_rows, form, *tables, lane)  # fmt: skip
    if cutlass.const_expr(form == FORM_PLAIN):
        cute.arch.griddepcontrol_wait()
""",
            """    # masked plans whose slots fit one round of the grid: the slots are the units,
    # described from the plan before the wait; a slot past its expert's count is skipped
    slots = cutlass.Int32(0)
    if cutlass.const_expr(form == FORM_MASKED):
        if cutlass.Int32(plan[Q_EXPERTS]) * capacity * segments <= step:
            slots = cutlass.Int32(1)
    if cutlass.const_expr(form != FORM_PLAIN):
        if slots == 0:
            cute.arch.griddepcontrol_wait()
            expert_segments(plan, run, form, *tables, s_warp, tidx)
            experts = cutlass.Int32(plan[Q_EXPERTS])
            units = cutlass.min(tables[2][experts] * segments, scale_units)
        else:
            experts = cutlass.Int32(plan[Q_EXPERTS])
            units = experts * capacity * segments
    k0, i0, o0, s0, e0 = describe_batch(0, warp_index, step, plan, run, units, segments,
                                        scale_rows, form, *tables, lane, slots)  # fmt: skip
    if cutlass.const_expr(form == FORM_PLAIN):
        cute.arch.griddepcontrol_wait()
    if cutlass.const_expr(form == FORM_MASKED):
        if slots != 0:
            cute.arch.griddepcontrol_wait()
""",
        )
        sub(
            """    # while those copies fly: the multiplier g / sf""",
            """    if cutlass.const_expr(form == FORM_MASKED):
        if slots != 0:  # the counts, for the padding and the slots' check
            expert_segments(plan, run, form, *tables, s_warp, tidx)
    # while those copies fly: the multiplier g / sf""",
        )
        sub(
            """                                                segments, scale_rows, form, *tables,
                                                lane)  # fmt: skip""",
            """                                                segments, scale_rows, form, *tables,
                                                lane, slots)  # fmt: skip""",
        )
        sub(
            """        mbar_wait(full0 + 8 * consume, parity)
        quantize_unit(""",
            """        mbar_wait(full0 + 8 * consume, parity)
        if cutlass.const_expr(form == FORM_MASKED):
            if slots != 0:  # a slot past its expert's (clamped) count: no token row
                slot_row = units_ahead[F_OUT_ROW]
                slot_expert = slot_row // capacity
                if slot_row - slot_expert * capacity >= tables[1][slot_expert]:
                    units_ahead[F_KIND] = cutlass.Int32(ROW_NONE)
        quantize_unit(""",
        )
    elif what == "padafter":
        sub(
            """    zero_padding(form, experts, capacity, col_tiles, scale_rows // SF_ROWS, scales, tables[0],
                 tables[1], warp_index, step, lane)  # fmt: skip
    batch_first""",
            """    batch_first""",
        )
        sub(
            """        for i in cutlass.range_constexpr(DESCRIPTOR * AHEAD):
            units_ahead[i] = units_ahead[DESCRIPTOR + i]
""",
            """        for i in cutlass.range_constexpr(DESCRIPTOR * AHEAD):
            units_ahead[i] = units_ahead[DESCRIPTOR + i]
    zero_padding(form, experts, capacity, col_tiles, scale_rows // SF_ROWS, scales, tables[0],
                 tables[1], warp_index, step, lane)  # fmt: skip
""",
        )
    else:
        raise SystemExit(__doc__)
