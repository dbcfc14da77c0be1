"""Session 30: timing-only probes of the masked decode row's fixed cost (masked E = 128,
max_m = 8, k = 2048 takes 3.5 us on the H100 where plain 1024 x 2048, the same bytes,
takes 2.9), on main's kernel (run from a worktree's root; names applied together):

    python make_probes.py nocount densesf

nocount: a slot run skips its count load (every slot counted full: wrong bytes where
counts are not full). densesf: a slot's scale row is its unit row (s = u: the scale rows
dense as a plain run's, not e * 128 + m: wrong layout). Neither is correct; they only
show what the count load and the scattered scale rows cost.
"""

import sys
from pathlib import Path

KERNEL = Path("nvfp4_aot/kernels/nvfp4_quantize.py")
EDITS = {
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
