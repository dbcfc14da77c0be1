"""After `git apply docs/h200/session23/octets.diff` (octg): turn the octet copies back
into call 2's 8 bulk copies a unit (`oct`): start_octet_copy and the stage mbarriers."""

from pathlib import Path

path = Path("nvfp4_aot/kernels/nvfp4_quantize.py")
s = path.read_text()
edits = [
    (
        """            start_octet_loads(units_ahead, d, stage0 + d * STAGE_BYTES, x, row_stride,
                              input_rows, blocks, lane)  # fmt: skip""",
        """            start_octet_copy(units_ahead, d, stage0 + d * STAGE_BYTES, full0 + 8 * d, x,
                             row_stride, input_rows, blocks, lane, False)  # fmt: skip""",
    ),
    (
        """            start_octet_loads(units_ahead, AHEAD, stage0 + produce * STAGE_BYTES, x,
                              row_stride, input_rows, blocks, lane)  # fmt: skip""",
        """            start_octet_copy(units_ahead, AHEAD, stage0 + produce * STAGE_BYTES,
                             full0 + 8 * produce, x, row_stride, input_rows, blocks, lane)  # fmt: skip""",
    ),
    (
        """        if cutlass.const_expr(form == FORM_OCTETS):
            wait_copies(AHEAD)
            cute.arch.sync_warp()  # the other lanes' copies too
        elif""",
        """        if""",
    ),
]
for old, new in edits:
    assert s.count(old) == 1, old
    s = s.replace(old, new)
path.write_text(s)
