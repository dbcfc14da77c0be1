"""Session 19 calls 7-9: timing-only variants of the committed quantizer (0f52e15), whose
bytes differ by design. Edits nvfp4_aot/kernels/nvfp4_quantize.py in place; bake it with
bake_one.py into a copy of artifacts/, then `git checkout nvfp4_aot/kernels`.

    python make_probe_variants.py nomath nosf     # any of: nomath nosf nocodes notable sffull

nomath: no scale or code math (zeros stored); nosf / nocodes: no scale-byte / code stores;
notable: no multiplier table (nor its CTA barrier); sffull: each 32-byte scale sector
(8 scale rows x 4 blocks) written once, whole, by the warp of its first row (s & 0x61 == 0)
with two 16-byte stores of garbage, the other warps write no scales.
"""

import sys
from pathlib import Path

KERNEL = Path("nvfp4_aot/kernels/nvfp4_quantize.py")
text = KERNEL.read_text()


def replace(old: str, new: str, count: int = 1) -> None:
    global text
    assert text.count(old) == count, (old, text.count(old))
    text = text.replace(old, new)


edits = set(sys.argv[1:])
if "nomath" in edits:
    replace(
        """            sf = block_scale(block_words(block), g_bits, fp16)
            scaled.append((j, block, sf, s_mult[sf]))
        done = []
        for j, block, sf, m in scaled:
            done.append((j, sf, *block_codes(block_words(block), m, fp16)))""",
        """            sf = cutlass.Int32(0)
            scaled.append((j, block, sf, sf))
        done = []
        for j, block, sf, m in scaled:
            done.append((j, sf, m, m))""",
    )
if "nosf" in edits:
    replace("            store_scale(sf_first + 4096 * j, sf, b, blocks, blocks_padded)\n", "")
if "nocodes" in edits:
    replace("            store_codes(codes_first + 256 * j, lo, hi, b, blocks)\n", "")
if "notable" in edits:
    replace(
        """        s_mult[tidx + THREADS * i] = multiplier(tidx + THREADS * i, g_bits)
    cute.arch.barrier()""",
        """        s_mult[tidx + THREADS * i] = g_bits""",
    )
if "sffull" in edits:
    replace(
        """.reg .pred pw, pl;
.reg .b32 v;
setp.lt.s32 pw, $2, $4;
setp.lt.s32 pl, $2, $3;
selp.b32 v, $1, 0, pl;
@pw st.global.u8 [$0], v;""",
        """.reg .pred pw;
.reg .b32 v, a;
setp.lt.s32 pw, $2, $4;
and.b32 a, $2, 3;
setp.eq.and.s32 pw, a, 0, pw;
mul.lo.u32 v, $1, 16843009;
@pw st.global.v4.b32 [$0], {v, v, v, v};
@pw st.global.v4.b32 [$0+16], {v, v, v, v};""",
    )
    replace(
        """    if kind == ROW_TOKENS:
        codes_first = out""",
        """    bound = cutlass.Int32(0)
    if (s & 0x61) == 0:
        bound = blocks_padded
    if kind == ROW_TOKENS:
        codes_first = out""",
    )
    replace(
        "first_block, blocks, blocks_padded)  # fmt: skip",
        "first_block, blocks, bound)  # fmt: skip",
        3,
    )
KERNEL.write_text(text)
