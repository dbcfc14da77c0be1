"""Stall samples of an Nsight Compute source page (``ncu --import R --page source --csv
--print-source sass``): the top instructions and the share of each opcode (session 10's
inline script, as a file).

    python stalls.py docs/h200/session21/call2/source_16384x4096.csv  (gunzip it first)
"""

import csv
import sys


def num(text: str) -> float:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


rows = list(csv.reader(open(sys.argv[1])))
head = next((i for i, r in enumerate(rows) if "Source" in r), None)
if head is None:
    print("\n".join(",".join(r)[:200] for r in rows[:10]))
    sys.exit()
names = rows[head]
src = names.index("Source")
cols = [i for i, n in enumerate(names) if "Stall Sampling" in n]
print("stall columns:", [names[i] for i in cols])
col = next((i for i in cols if "All" in names[i]), cols[0])
executed = next((i for i, n in enumerate(names) if n.startswith("Instructions Executed")), None)
body = [r for r in rows[head + 1 :] if len(r) == len(names)]
total = sum(num(r[col]) for r in body)
ran = sum(num(r[executed]) for r in body) if executed is not None else "?"
print(f"total stall samples {total:.0f}; instructions executed {ran}")
for r in sorted(body, key=lambda r: -num(r[col]))[:40]:
    print(f"{num(r[col]) / total * 100:5.1f}%  {r[0][:6]:>6} {r[src][:100]}")
ops: dict[str, float] = {}
for r in body:
    parts = r[src].split()
    if not parts:
        continue
    op = (parts[1] if parts[0].startswith("@") and len(parts) > 1 else parts[0]).split(".")[0]
    ops[op] = ops.get(op, 0) + num(r[col])
top = sorted(ops.items(), key=lambda kv: -kv[1])[:20]
print("by opcode:", ", ".join(f"{k} {v / total * 100:.1f}%" for k, v in top))
