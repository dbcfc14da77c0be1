"""Session 27: add decode routings of the masked form to scratch/qcompare.py (session 15's,
with session 16's widths diff): masked E = 128, max_m = 8, k = 2048 with 8 experts of one
row (a top-8 step of one token) and with 128 rows over the experts at random (16 tokens);
the bytes moved count the routing's rows. Run from the repository root after the copy."""

from pathlib import Path

path = Path("scratch/qcompare.py")
text = path.read_text()


def sub(old: str, new: str) -> None:
    global text
    assert text.count(old) == 1, old
    text = text.replace(old, new)


sub(
    '    ("masked", 256, 64, 7168),\n]',
    """    ("masked", 256, 64, 7168),
    ("masked", 128, 8, 2048, "one"),
    ("masked", 128, 8, 2048, "sixteen"),
]""",
)
sub(
    "    for form, experts, tokens, k in [] if PLAIN_ONLY else MOE:",
    "    for form, experts, tokens, k, *fill in [] if PLAIN_ONLY else MOE:",
)
sub(
    """            routing = torch.full((experts,), tokens, dtype=torch.int32, device=device)
            x = (torch.randn(experts * tokens, k, device=device) * 4).to(torch.bfloat16)
            ops = dict(x=x, global_scale=g, routing=routing)
            moved = experts * tokens * (k * 2 + k // 2)""",
    """            counts = torch.full((experts,), tokens, dtype=torch.int32)
            if fill == ["one"]:  # one token's top-8: 8 experts of one row
                counts = torch.zeros(experts, dtype=torch.int32)
                counts[torch.randperm(experts)[:8]] = 1
            elif fill == ["sixteen"]:  # 16 tokens' top-8: 128 rows at random, <= max_m each
                gen = torch.Generator().manual_seed(16)
                counts = torch.zeros(experts, dtype=torch.int32)
                for e in torch.randint(0, experts, (4 * 128,), generator=gen).tolist():
                    if counts.sum() < 128 and counts[e] < tokens:
                        counts[e] += 1
            routing = counts.to(device)
            x = (torch.randn(experts * tokens, k, device=device) * 4).to(torch.bfloat16)
            ops = dict(x=x, global_scale=g, routing=routing)
            moved = int(counts.sum()) * (k * 2 + k // 2)""",
)
sub(
    '        yield f"{form} E={experts} {tokens} k={k}", kw, ops, moved, padded',
    '        label = f"{form} E={experts} {tokens} k={k}" + (f" ({fill[0]})" if fill else "")\n'
    "        yield label, kw, ops, moved, padded",
)
path.write_text(text)
