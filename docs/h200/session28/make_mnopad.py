"""Session 28: the masked form without its padding scale rows (run from a worktree's root).

    python make_mnopad.py    # masked runs zero no scale row past an expert's tokens

The masked GEMM never writes C rows at or past masked_m[e], and a run leaves those rows'
codes as they were, so their scales being zero buys nothing; on a decode routing they
are most of what the masked form writes (E = 128, max_m = 8: 2 MB of zeros of 7.3 MB).
Plain and contiguous runs keep their zero padding (the issue's contract, cuBLAS's layout).
"""

from pathlib import Path

KERNEL = Path("nvfp4_aot/kernels/nvfp4_quantize.py")
OLD = "    zero_padding(form, experts, capacity,"
NEW = (
    "    if cutlass.const_expr(form != FORM_MASKED):\n        zero_padding(form, experts, capacity,"
)
OLD_TAIL = "                 tables[1], warp_index, step, lane)  # fmt: skip\n"
NEW_TAIL = "                     tables[1], warp_index, step, lane)  # fmt: skip\n"

text = KERNEL.read_text()
assert text.count(OLD) == 1 and text.count(OLD_TAIL) == 1
KERNEL.write_text(text.replace(OLD, NEW).replace(OLD_TAIL, NEW_TAIL))
