"""Session 21's launch-shape variants of main's quantizer (9f79c69): edits
nvfp4_aot/kernels (in place); bake with docs/h200/session19/bake_one.py, then
`git checkout nvfp4_aot/kernels`. (Calls 1, 4 and 7 ran them as three scripts with these
same edits.)

    python make_variants.py tlp THREADS CTAS INTERLEAVE   # b512 (call 1): tlp 512 1 2
    python make_variants.py narrow STAGE_BYTES STAGES      # stages of a narrow unit (call 7)
"""

import sys
from pathlib import Path

KERNEL = "nvfp4_aot/kernels/nvfp4_quantize.py"


def sub(path: str, old: str, new: str) -> None:
    p = Path(path)
    t = p.read_text()
    assert t.count(old) == 1, old
    p.write_text(t.replace(old, new))


what, *args = sys.argv[1:]
if what == "tlp":  # THREADS threads a CTA, CTAS CTAs an SM (the registry's), INTERLEAVE
    threads, ctas, interleave = args
    sub(KERNEL, "THREADS = 256\n", f"THREADS = {threads}\n")
    sub(KERNEL, "INTERLEAVE = 2  #", f"INTERLEAVE = {interleave}  #")
    sub(
        KERNEL,
        """    for i in cutlass.range_constexpr(256 // THREADS):
        s_mult[tidx + THREADS * i] = multiplier(tidx + THREADS * i, g_bits)""",
        """    if tidx < 256:
        s_mult[tidx] = multiplier(tidx, g_bits)""",
    )
    sub(
        "nvfp4_aot/kernels/__init__.py",
        "blocks_per_sm=2,  # each CTA's",
        f"blocks_per_sm={ctas},  # each CTA's",
    )
elif what == "narrow":  # plans must force a unit width that fits (qcompare NAME=ART:WIDTH)
    stage_bytes, stages = args
    sub(KERNEL, "STAGE_BYTES = SEGMENT_BLOCKS * 32  #", f"STAGE_BYTES = {stage_bytes}  #")
    sub(KERNEL, "STAGES = 2  #", f"STAGES = {stages}  #")
else:
    raise SystemExit(__doc__)
