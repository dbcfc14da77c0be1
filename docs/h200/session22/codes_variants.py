"""Session 22: schedule variants of the block math (same operations, another order in
the PTX text), appended to the kernel module as overrides of _CODES_PTX / _SCALE_PTX, or
(keep) the words of a block kept from its scale step instead of read again.

    python scratch/codes_variants.py ORDER [stage] [pack4] [keep] [chain]
    ORDER: natural | evenodd | reverse | interleave
"""

import sys
from pathlib import Path

KERNEL = Path("nvfp4_aot/kernels/nvfp4_quantize.py")
order, *flags = sys.argv[1:]
OVERRIDE = """

# --- session 22 schedule variant ---------------------------------------------------------
def _variant_codes_ptx(fp16, order, stage, pack4):
    words = [f"${2 + i}" for i in range(8)]
    regs = ", ".join(f"x{j}, q{j}, ca{j}, cb{j}, cc{j}, t{j}" for j in range(16))
    lines = ["{", f".reg .b32 {regs}, pa, pb, ev, od, p01, p23, shi, slo, e0, e1;",
             ".reg .b16 hl, hh;"]
    perm = {"natural": list(range(16)), "evenodd": list(range(0, 16, 2)) + list(range(1, 16, 2)),
            "reverse": list(range(15, -1, -1)),
            "interleave": [j for p in zip(range(8), range(8, 16)) for j in p]}.get(order)
    if perm is None:  # rNNN: a seeded random order
        import random
        perm = list(range(16))
        random.Random(int(order[1:])).shuffle(perm)

    def convert(j):
        i, high = divmod(j, 2)
        if fp16:
            return [f"mov.b32 {{hl, hh}}, {words[i]};", f"cvt.f32.f16 x{j}, {'hh' if high else 'hl'};"]
        if high:
            return [f"and.b32 x{j}, {words[i]}, 0xFFFF0000;"]
        return [f"shl.b32 x{j}, {words[i]}, 16;"]

    def element(j):
        return [*convert(j), f"abs.f32 x{j}, x{j};", f"mul.rn.f32 q{j}, x{j}, $10;",
                *[line.replace(" ca", f" ca{j}").replace(" cb", f" cb{j}").replace(" cc", f" cc{j}")
                  .replace("ca,", f"ca{j},").replace("cb,", f"cb{j},").replace("cc;", f"cc{j};")
                  for line in _code_lines(f"q{j}", f"t{j}")]]

    def pack(out, first, group, tmp):
        body = []
        for half, name in ((0, "ev"), (1, "od")):
            t = [f"t{first + half + 2 * n}" for n in range(4)]
            body += [f"prmt.b32 pa, {t[0]}, {t[1]}, 0x0040;", f"prmt.b32 pb, {t[2]}, {t[3]}, 0x4000;",
                     f"prmt.b32 {name}, pa, pb, 0x7610;"]
        body += [f"prmt.b32 p01, {group[0]}, {group[1]}, 0x5173;",
                 f"prmt.b32 p23, {group[2]}, {group[3]}, 0x5173;",
                 "prmt.b32 shi, p01, p23, 0x5410;", "prmt.b32 slo, p01, p23, 0x7632;",
                 "and.b32 shi, shi, 0x80808080;", "shr.b32 slo, slo, 4;",
                 "and.b32 slo, slo, 0x08080808;", "mad.lo.u32 ev, od, 16, ev;",
                 "or.b32 ev, ev, shi;", f"or.b32 {out}, ev, slo;"]
        return body

    elems = [element(j) for j in perm]
    if stage:
        depth = max(len(e) for e in elems)
        for s in range(depth):
            for e in elems:
                if s < len(e):
                    lines.append(e[s])
    else:
        packed = set()
        for n, j in enumerate(perm):
            lines += elements_of(elems, n)
            if pack4:
                done = set(perm[: n + 1])
                for out, first, group in (("$0", 0, words[:4]), ("$1", 8, words[4:])):
                    if out not in packed and all(first + m in done for m in range(8)):
                        lines += pack(out, first, group, None)
                        packed.add(out)
    for out, first, group in (("$0", 0, words[:4]), ("$1", 8, words[4:])):
        if not pack4 or stage:
            lines += pack(out, first, group, None)
    lines.append("}")
    return "\\n".join(lines)


def elements_of(elems, n):
    return elems[n]


_CODES_PTX = {False: _variant_codes_ptx(False, ORDER, STAGE, PACK4),
              True: _variant_codes_ptx(True, ORDER, STAGE, PACK4)}
"""
text = KERNEL.read_text()
if order != "none":
    text += (
        OVERRIDE.replace("ORDER", repr(order))
        .replace("STAGE", str("stage" in flags))
        .replace("PACK4", str("pack4" in flags))
    )
if "keep" in flags:
    old = """            sf = block_scale(block_words(block), g_bits, fp16)
            scaled.append((j, block, sf, s_mult[sf]))
        done = []
        for j, block, sf, m in scaled:
            done.append((j, sf, *block_codes(block_words(block), m, fp16)))"""
    new = """            words = block_words(block)
            sf = block_scale(words, g_bits, fp16)
            scaled.append((j, words, sf, s_mult[sf]))
        done = []
        for j, words, sf, m in scaled:
            done.append((j, sf, *block_codes(words, m, fp16)))"""
    assert text.count(old) == 1
    text = text.replace(old, new)
KERNEL.write_text(text)
