"""Session 27's timing-only variants of main's quantizer (904fffc) for the MoE forms'
extra ~1.4 µs a run: edits nvfp4_aot/kernels/nvfp4_quantize.py in place (run in a
worktree; bake with docs/h200/session19/bake_one.py).

    python make_moe_variants.py nopad    # no padding scale rows zeroed (bytes differ)
    python make_moe_variants.py slots    # MoE units described from the plan before the
                                         # wait (unit u = output row u: masked e * max_m + m,
                                         # contiguous u), routing scans after the first
                                         # copies (masked with full counts: main's bytes)
    python make_moe_variants.py slots nopad
    python make_moe_variants.py search8  # the segment search's 11 steps cut to 8 (E <= 256)
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
    else:
        raise SystemExit(__doc__)
