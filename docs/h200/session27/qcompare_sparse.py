"""Session 27: add decode routings of the masked form to scratch/qcompare.py (session 15's,
with session 16's widths diff): masked E = 128, max_m = 8, k = 2048 with one and sixteen
tokens' top-8 rows (8 and 128), dealt as bench/bench_quantize.py's masked_counts deals
them (the benchmark's decode rows); the bytes moved count the routing's rows. Run from
the repository root after the copy."""

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
    ("masked", 128, 8, 2048, 8),
    ("masked", 128, 8, 2048, 128),
]""",
)
sub(
    "from bench_quantize import time_graph_relaxed  # noqa: E402",
    "from bench_quantize import masked_counts, time_graph_relaxed  # noqa: E402",
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
    """            # every slot full, or the routed rows dealt as the benchmark deals them
            counts = masked_counts(experts, tokens, fill[0] if fill else None)
            routing = counts.to(torch.int32).to(device)
            x = (torch.randn(experts * tokens, k, device=device) * 4).to(torch.bfloat16)
            ops = dict(x=x, global_scale=g, routing=routing)
            moved = int(counts.sum()) * (k * 2 + k // 2)""",
)
sub(
    '        yield f"{form} E={experts} {tokens} k={k}", kw, ops, moved, padded',
    '        label = f"{form} E={experts} {tokens} k={k}" + (f" ({fill[0]} rows)" if fill else "")\n'
    "        yield label, kw, ops, moved, padded",
)
path.write_text(text)
