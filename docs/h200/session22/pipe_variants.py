"""Session 22: the order of a lane's block steps (s: scale chain, c: element math and
stores) in quantize_blocks, e.g. "s0 s1 c0 s2 c1 s3 c2 c3"; and (conv) the low bf16
element converted by a multiply instead of a shift.

    python scratch/pipe_variants.py ORDER|- [conv]
"""

import sys
from pathlib import Path

KERNEL = Path("nvfp4_aot/kernels/nvfp4_quantize.py")
t = KERNEL.read_text()
order, *flags = sys.argv[1:]
if order != "-":
    old = """    for first in cutlass.range_constexpr(0, count, INTERLEAVE):
        scaled = []
        for j in cutlass.range_constexpr(first, min(first + INTERLEAVE, count)):
            block = stage + 32 * (lane + 32 * j)
            sf = block_scale(block_words(block), g_bits, fp16)
            scaled.append((j, block, sf, s_mult[sf]))
        done = []
        for j, block, sf, m in scaled:
            done.append((j, sf, *block_codes(block_words(block), m, fp16)))
        for j, sf, lo, hi in done:
            b = first_block + 32 * j
            store_codes(codes_first + 256 * j, lo, hi, b, blocks)
            store_scale(sf_first + 4096 * j, sf, b, blocks, blocks_padded)"""
    new = f"""    steps = {[(s[0], int(s[1])) for s in order.split()]!r}
    scaled = {{}}
    for step, j in steps:
        if cutlass.const_expr(j < count):
            block = stage + 32 * (lane + 32 * j)
            if cutlass.const_expr(step == "s"):
                sf = block_scale(block_words(block), g_bits, fp16)
                scaled[j] = (sf, s_mult[sf])
            else:
                sf, m = scaled[j]
                lo, hi = block_codes(block_words(block), m, fp16)
                b = first_block + 32 * j
                store_codes(codes_first + 256 * j, lo, hi, b, blocks)
                store_scale(sf_first + 4096 * j, sf, b, blocks, blocks_padded)"""
    assert t.count(old) == 1
    t = t.replace(old, new)
if "conv" in flags:
    old = """            lines.append(f"shl.b32 x, {words[i]}, 16;")"""
    assert t.count(old) == 1
    t = t.replace(old, """            lines.append(f"mul.lo.u32 x, {words[i]}, 65536;")""")
KERNEL.write_text(t)
