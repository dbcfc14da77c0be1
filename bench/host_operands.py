#!/usr/bin/env python3
"""Host cost per operand of the per-group API (``GroupedGemmPlan.run`` with arrays), on CPU.

Issue #17: a decode step hands one array per group per operand (108 experts x 5 operands
= 540 objects) to ``run``; every call looks at each one. This measures that work with no
GPU: :class:`nvfp4_aot.intake.OperandIntake` (what ``run`` does with array operands before
the launch) and the table lookup ``run`` tries first, for

  int       raw device pointers (the all-int path; no per-operand look)
  cai       ``__cuda_array_interface__`` v3 objects (tests/support.py's FakeArray: a fixed
            dict, so CuPy's own cost of building that dict each access is not in it)
  torchlike duck-typed CUDA tensors (tests/test_bad_inputs.py's TorchLike: Python
            attributes and methods, dearer than torch's C ones)
  torch     real torch CPU tensors, with ``torch.Tensor.is_cuda`` / ``get_device()``
            replaced by Python stand-ins saying CUDA device 0 (the other attributes are
            torch's own C getters); torch optional

then ``run_stacked``'s intake (one array per operand, nvfp4_aot.stacked) for cai and
torch, and the floor of any per-object path: reading is_cuda, dtype, get_device(),
is_contiguous(), shape and data_ptr() of plain torch tensors in a loop.

    PYTHONPATH=. python bench/host_operands.py [--groups 108] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nvfp4_aot.intake import OperandIntake  # noqa: E402
from nvfp4_aot.layouts import blocked_scale_bytes  # noqa: E402

try:  # run_stacked (issue #17); absent in older checkouts this script may measure
    from nvfp4_aot.stacked import StackedIntake  # noqa: E402
except ImportError:
    StackedIntake = None
from nvfp4_aot.validation import problem_sizes as checked_sizes  # noqa: E402

M, N, K = 19, 256, 256  # per group; the cost per operand does not depend on the sizes
BASE = 0x10_0000_0000


class FakeArray:
    """``__cuda_array_interface__`` v3, as tests/support.py's FakeArray."""

    def __init__(self, pointer, shape, typestr):
        self.__cuda_array_interface__ = {
            "version": 3, "shape": tuple(shape), "typestr": typestr, "data": (pointer, False),
            "strides": None, "stream": None,
        }  # fmt: skip


class TorchLike:
    """Duck-typed like a PyTorch CUDA tensor, as tests/test_bad_inputs.py's TorchLike."""

    is_cuda = True

    def __init__(self, pointer, shape, dtype, itemsize):
        self.shape = tuple(shape)
        self.dtype = dtype
        self._itemsize = itemsize
        self.device = SimpleNamespace(type="cuda", index=0)
        self._pointer = pointer

    def data_ptr(self):
        return self._pointer

    def is_contiguous(self):
        return True

    def get_device(self):
        return self.device.index

    def numel(self):
        count = 1
        for extent in self.shape:
            count *= extent
        return count

    def element_size(self):
        return self._itemsize


def layouts(groups: int):
    """Per field: (shape, typestr, torch dtype name, itemsize) per group."""
    sfa, sfb = blocked_scale_bytes(M, K), blocked_scale_bytes(N, K)
    return [
        ((M, K // 2), "|u1", "uint8", 1),
        ((N, K // 2), "|u1", "uint8", 1),
        ((M, N), "<f2", "float16", 2),
        ((sfa,), "|u1", "uint8", 1),
        ((sfb,), "|u1", "uint8", 1),
    ]


def fake_columns(groups: int, kind: str):
    """Five columns of ``groups`` operands at distinct aligned fake addresses."""
    columns = []
    for f, (shape, typestr, dtype, itemsize) in enumerate(layouts(groups)):
        column = []
        for g in range(groups):
            pointer = BASE + f * 0x1_0000_0000 + g * 0x100_0000
            if kind == "int":
                column.append(pointer)
            elif kind == "cai":
                column.append(FakeArray(pointer, shape, typestr))
            else:
                column.append(TorchLike(pointer, shape, f"torch.{dtype}", itemsize))
        columns.append(column)
    return columns


def torch_columns(groups: int):
    """Real torch CPU tensors that answer like CUDA tensors on device 0 (None, None
    without torch): ``torch.Tensor.is_cuda`` and ``get_device`` are replaced by Python
    stand-ins for this process (torch's own are C getters); every other attribute is
    torch's. Also the same tensors as plain ones, for the attribute floor."""
    try:
        import torch
    except ImportError:
        return None, None
    columns = []
    for shape, _typestr, dtype, _item in layouts(groups):
        columns.append([torch.zeros(shape, dtype=getattr(torch, dtype)) for _ in range(groups)])
    return columns, columns


def looking_like_cuda():
    """Make torch CPU tensors say they are CUDA tensors on device 0; returns the undo."""
    import torch

    saved = torch.Tensor.is_cuda, torch.Tensor.get_device
    torch.Tensor.is_cuda = property(lambda self: True)
    torch.Tensor.get_device = lambda self: 0

    def undo():
        torch.Tensor.is_cuda, torch.Tensor.get_device = saved

    return undo


def stacked_arrays(stacked, kind: str):
    """The five stacked arrays of ``stacked``'s plan (None for torch without torch)."""
    rows = {"a": K // 2, "b": K // 2, "c": N}
    arrays = []
    for f, (field, (_shape, typestr, dtype, itemsize)) in enumerate(
        zip(("a", "b", "c", "sfa", "sfb"), layouts(0))
    ):
        need = stacked.required[field]
        shape = (need // (rows[field] * itemsize), rows[field]) if field in rows else (need,)
        if kind == "cai":
            arrays.append(FakeArray(BASE + f * 0x1_0000_0000, shape, typestr))
        else:
            try:
                import torch
            except ImportError:
                return None
            arrays.append(torch.zeros(shape, dtype=getattr(torch, dtype)))
    return arrays


def per_call_us(call, reps: int, batches: int = 15, clock=time.perf_counter) -> float:
    """Median over batches of one call's time by ``clock`` (wall time; the host benches on
    the shared development box pass ``time.thread_time``), in microseconds."""
    for _ in range(max(3, reps // 10)):
        call()
    samples = []
    for _ in range(batches):
        start = clock()
        for _ in range(reps):
            call()
        samples.append((clock() - start) / reps * 1e6)
    return statistics.median(samples)


def table_lookup(columns):
    """What ``GroupedGemmPlan.run`` does first: its checked-tables lookup for these
    operands (a miss for arrays; the tables hold int pointer tuples)."""
    from nvfp4_aot.plan import GroupedGemmPlan

    plan = object.__new__(GroupedGemmPlan)  # run's prefix only: no driver, no launch
    plan._tables = SimpleNamespace(get={(1, 2, 3): b""}.get)
    plan.alpha = False
    lookup = getattr(GroupedGemmPlan, "_known_table", None)
    if lookup is not None:
        return lambda: lookup(plan, *columns, None)
    a, b, c, sfa, sfb = columns

    def before():  # the code of run() before #17: the key hashed whatever the operands
        key = (*a, *b, *c, *sfa, *sfb)
        return plan._tables.get(key)

    return before


def attribute_floor(plain) -> float:
    """µs per tensor to read the attributes any per-object path needs."""
    tensors = [t for column in plain for t in column]

    def read():
        for t in tensors:
            t.is_cuda, t.dtype, t.get_device(), t.is_contiguous(), t.shape, t.data_ptr()

    return per_call_us(read, 50) / len(tensors)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=108)
    parser.add_argument("--reps", type=int, default=200, help="calls per timed batch")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    groups = args.groups
    sizes = checked_sizes([(M, N, K)] * groups)
    intake = OperandIntake(sizes, device=0)
    operands = 5 * groups
    kinds = {kind: fake_columns(groups, kind) for kind in ("int", "cai", "torchlike")}
    torch_cols, plain = torch_columns(groups)
    if torch_cols is not None:
        kinds["torch"] = torch_cols
    rows = {}
    for kind, columns in kinds.items():
        undo = looking_like_cuda() if kind == "torch" else None
        pointers, _ = intake.pointers(*columns, 7)
        intake.check_pointers(pointers)
        intake_us = per_call_us(lambda c=columns: intake.pointers(*c, 7), args.reps)
        lookup_us = per_call_us(table_lookup(columns), args.reps)
        rows[kind] = {
            "intake_us": intake_us,
            "lookup_us": lookup_us,
            "per_operand_us": (intake_us + lookup_us) / operands,
        }
        if undo is not None:
            undo()
    # run_stacked: one array per operand (nvfp4_aot.stacked), whatever the group count
    stacked = StackedIntake(intake) if StackedIntake is not None else None
    for kind in ("cai", "torch") if stacked is not None else ():
        arrays = stacked_arrays(stacked, kind)
        if arrays is None:
            continue
        undo = looking_like_cuda() if kind == "torch" else None
        tables = {stacked.bases(*arrays, 7)[0]: b""}
        call_us = per_call_us(lambda a=arrays, t=tables: t.get(stacked.bases(*a, 7)[0]), args.reps)
        rows[f"{kind} stacked (5 arrays)"] = {
            "intake_us": call_us,
            "lookup_us": 0.0,
            "per_operand_us": call_us / operands,
        }
        if undo is not None:
            undo()
    if plain is not None:
        rows["torch_attribute_floor"] = {"per_operand_us": attribute_floor(plain)}
    print(f"# {groups} groups x 5 operands = {operands} per call; Python {sys.version.split()[0]}")
    print(f"{'operands':24} {'intake µs':>10} {'lookup µs':>10} {'µs/operand':>11}")
    for kind, row in rows.items():
        intake_us = f"{row['intake_us']:10.1f}" if "intake_us" in row else " " * 10
        lookup_us = f"{row['lookup_us']:10.1f}" if "lookup_us" in row else " " * 10
        print(f"{kind:24} {intake_us} {lookup_us} {row['per_operand_us']:11.3f}")
    if args.json:
        args.json.write_text(json.dumps({"groups": groups, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
