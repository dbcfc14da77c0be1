"""Session 30: the quantizer variants and probes baked for its comparisons (run from a
worktree's root; each name one edit, several names applied together):

    python make_variants.py padguard mslots2

On 33657d4's kernel (call B): padguard: a plain run whose T is a multiple of 128 (no
padding rows) skips the padding loop by one uniform branch (session 28's plainaligned did
it by a second specialisation of the whole plain path: 1024 x 4096 3.86 -> 3.72 us on
the H100, but 1-3 % slower on three large rows, session 30 call A). mslots2: a masked
run whose slots fit one round of the grid reads its slot's count by one load a warp (in
flight with the copies) instead of the CTA's scans of every count (expert_segments: two
barriers and a scan the slot check does not need). Both were folded in (1f05dce).

On 1f05dce's kernel (call E, timing-only probes of the masked decode row's fixed cost:
masked E = 128, max_m = 8, k = 2048 took 3.5 us on the H100 where plain 1024 x 2048, the
same bytes, took 2.9): nocount: a slot run skips its count load (every slot counted
full: wrong bytes where counts are not full); densesf: a slot's scale row is its unit
row (s = u: dense as a plain run's, not e * 128 + m: wrong layout).
"""

import sys
from pathlib import Path

KERNEL = Path("nvfp4_aot/kernels/nvfp4_quantize.py")
EDITS = {
    "padguard": [
        (
            "    if cutlass.const_expr(form != FORM_MASKED):  # masked: no padding (module docstring)\n"
            "        zero_padding(form, experts, capacity, col_tiles, scale_rows // SF_ROWS, scales, tables[0],\n"
            "                     tables[1], warp_index, step, lane)  # fmt: skip\n",
            "    if cutlass.const_expr(form == FORM_CONTIGUOUS):\n"
            "        zero_padding(form, experts, capacity, col_tiles, scale_rows // SF_ROWS, scales, tables[0],\n"
            "                     tables[1], warp_index, step, lane)  # fmt: skip\n"
            "    if cutlass.const_expr(form == FORM_PLAIN):\n"
            "        if (capacity & (SF_ROWS - 1)) != 0:  # T % 128 == 0: no padding rows\n"
            "            zero_padding(form, experts, capacity, col_tiles, scale_rows // SF_ROWS, scales,\n"
            "                         tables[0], tables[1], warp_index, step, lane)  # fmt: skip\n",
        ),
    ],
    "mslots2": [
        (
            "    if cutlass.const_expr(form == FORM_MASKED):\n"
            "        if slots != 0:  # the counts, for the slots' check\n"
            "            expert_segments(plan, run, form, *tables, s_warp, tidx)\n",
            "    slot_count = cutlass.Int32(0)\n"
            "    if cutlass.const_expr(form == FORM_MASKED):\n"
            "        if slots != 0:  # the slot's count, for its check: one load in flight\n"
            "            counts = run_int32s(run, R_ROUTING, MAX_EXPERTS + 1)\n"
            "            _first, slot_count = expert_rows(units_ahead[F_OUT_ROW] // capacity, counts,\n"
            "                                             routing_layout(form), capacity)\n",
        ),
        (
            "                if slot_row - slot_expert * capacity >= tables[1][slot_expert]:\n",
            "                if slot_row - slot_expert * capacity >= slot_count:\n",
        ),
    ],
    "nocount": [
        (
            "            _first, slot_count = expert_rows(\n"
            "                units_ahead[F_OUT_ROW] // capacity, counts, routing_layout(form), capacity\n"
            "            )\n",
            "            slot_count = capacity\n",
        )
    ],
    "densesf": [
        (
            "        s = slot_expert * cutlass.Int32(plan[Q_EXPERT_SCALE_ROWS]) + (u - slot_expert * capacity)\n",
            "        s = u\n",
        )
    ],
}

text = KERNEL.read_text()
for name in sys.argv[1:]:
    for old, new in EDITS[name]:
        assert text.count(old) == 1, (name, old)
        text = text.replace(old, new)
KERNEL.write_text(text)
