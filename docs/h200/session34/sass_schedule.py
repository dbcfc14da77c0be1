"""ptxas's own schedule of a cubin's largest basic blocks: instructions, the sum of the
stall fields of their control words (the cycles a lone warp waits between issues where
no scoreboard is involved) and the instructions that wait on a scoreboard (shared or
global loads, whose latency comes on top). Session 34 used it on the quantizer's
four-block path (main: 740 instructions, 929-962 cycles; the 64-block units of
docs/experiments/quantizer_narrow4.patch: 378-391, 542-595). The sums read a schedule;
they do not rank variants on the GPU (the -O2 build has the smallest and is the slowest).

    nvdisasm -hex -c CUBIN > k.sass && python sass_schedule.py k.sass [BLOCKS]
"""

import re
import sys
from collections import Counter

# the second 64-bit word of a Volta+ instruction: stall cycles at bits 41-44, the
# scoreboard wait mask at bits 52-57
STALL_SHIFT, STALL_MASK = 41, 0xF
WAIT_SHIFT, WAIT_MASK = 52, 0x3F


def basic_blocks(lines):
    blocks, current, pending = [], None, None
    for line in lines:
        text = line.strip()
        label = re.match(r"^(\.L_x_\d+):", text)
        if label:
            current = (label.group(1), [])
            blocks.append(current)
            continue
        first = re.match(r"/\*[0-9a-f]{4,}\*/\s+(.*?);\s*/\* (0x[0-9a-f]+) \*/", text)
        if first:
            pending = first.group(1)
            continue
        second = re.match(r"/\* (0x[0-9a-f]+) \*/", text)
        if second and pending is not None and current is not None:
            current[1].append((pending, int(second.group(1), 16)))
            pending = None
    return blocks


def main():
    path, count = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 4
    blocks = basic_blocks(open(path).read().splitlines())
    for name, body in sorted(blocks, key=lambda b: -len(b[1]))[:count]:
        stalls = [(control >> STALL_SHIFT) & STALL_MASK for _, control in body]
        waits = sum(1 for _, control in body if (control >> WAIT_SHIFT) & WAIT_MASK)
        histogram = sorted(Counter(stalls).items())
        print(f"{name}: {len(body)} instructions, stall fields {sum(stalls)} cycles "
              f"({sum(stalls) / len(body):.2f} a instruction), {waits} scoreboard waits, "
              f"stall histogram {histogram}")  # fmt: skip


if __name__ == "__main__":
    main()
