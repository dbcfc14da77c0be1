"""Operand intake: what callers pass for A, B, C, SFA, SFB becomes checked device pointers.

Each operand is looked at once. Raw pointers and plain C-contiguous arrays of the
expected shape and dtype take a fast path (PyTorch tensors through their attributes,
``__cuda_array_interface__`` dicts read directly); anything else is described in full by
:mod:`nvfp4_aot.operands`, which either accepts it or says what is wrong, naming the group
and the field. The pointer set as a whole is then checked against what the kernels
assume (alignment, outputs disjoint from every other operand).
"""

from __future__ import annotations

from math import prod

from . import validation
from .errors import InvalidProblemError
from .operands import (
    FP4_DTYPES,
    SCALE_DTYPES,
    TORCH_FP4_DTYPES,
    TORCH_SCALE_DTYPES,
    DeviceArray,
    check_matrix,
    check_scales,
    cuda_array_interface,
    device_array,
    device_of,
    torch_pointer,
)

FIELDS = validation.OPERAND_FIELDS
_A, _B, _C, _SFA, _SFB = range(5)
# __cuda_array_interface__ typestrs taken on the fast path, per field
_BYTE_TYPESTRS = ("|u1", "|i1", "|V1")
_TYPESTRS = (_BYTE_TYPESTRS, _BYTE_TYPESTRS, ("<f2",), _BYTE_TYPESTRS, _BYTE_TYPESTRS)
# torch dtypes taken on the duck-typed tensor fast path, per field
_TORCH_DTYPES = (
    TORCH_FP4_DTYPES, TORCH_FP4_DTYPES, ("torch.float16",), TORCH_SCALE_DTYPES, TORCH_SCALE_DTYPES,
)  # fmt: skip
_ADDRESS_MASK = validation.POINTER_ALIGN - 1
_ADDRESS_END = 1 << 63  # int64 pointer tables


def describe(g: int, field: str, obj, stream: int) -> DeviceArray:
    """:func:`operands.device_array` with the group and field named in its errors."""
    try:
        return device_array(obj, stream)
    except (TypeError, ValueError) as exc:
        raise InvalidProblemError(f"group {g}: {field}: {exc}") from exc


class OperandIntake:
    """Turns the five per-group operand columns of one plan into a flat pointer list.

    Parameters
    ----------
    problem_sizes : checked (m, n, k, 1) per group
    device : the plan's device ordinal
    """

    def __init__(self, problem_sizes, device: int):
        self.problem_sizes = problem_sizes
        self.device = device
        self.count = len(problem_sizes)
        self._empty = tuple(m == 0 for m, _n, _k, _l in problem_sizes)
        # flat indices (field * G + group) of the operands the kernels touch: empty groups'
        # operands are never read, so they may be anything (null, or shape (0, ...))
        self._live = frozenset(
            f * self.count + g
            for f in range(len(FIELDS))
            for g, (m, _n, _k, _l) in enumerate(problem_sizes)
            if m > 0
        )
        bytes_of = [
            validation.operand_bytes(m, n, k) if m else dict.fromkeys(FIELDS, 0)
            for m, n, k, _l in problem_sizes
        ]
        # per field and group: the (rows, cols) shape of A, B, C; minimum bytes of SFA, SFB
        self._expected = (
            [(m, k // 2) for m, _n, k, _l in problem_sizes],
            [(n, k // 2) for _m, n, k, _l in problem_sizes],
            [(m, n) for m, n, _k, _l in problem_sizes],
            [b["sfa"] for b in bytes_of],
            [b["sfb"] for b in bytes_of],
        )
        # bytes the kernel touches per operand, field-major like the flat pointer list
        self._operand_sizes = tuple(b[f] for f in FIELDS for b in bytes_of)

    def pointers(self, a, b, c, sfa, sfb, stream: int) -> tuple[list[int], set[int]]:
        """The flat (A, B, C, SFA, SFB) x group pointer list and the producer streams
        (``__cuda_array_interface__`` v3) that a launch on ``stream`` must order after.

        Checks every array operand; the pointer set is checked by :meth:`check_pointers`.
        """
        columns = (a, b, c, sfa, sfb)
        for f, column in enumerate(columns):
            try:
                length = len(column)
            except TypeError:
                raise InvalidProblemError(
                    f"{FIELDS[f]} must be a sequence with one operand per group, got "
                    f"{type(column).__name__}"
                ) from None
            if length != self.count:
                raise InvalidProblemError(
                    f"{FIELDS[f]} has {length} operands, the plan has {self.count} groups"
                )
        producers: set[int] = set()
        flat = [*a, *b, *c, *sfa, *sfb]
        if not all(type(x) is int for x in flat):  # arrays (or junk): look at each one
            launch_stream = 1 if stream == 0 else stream
            empty = self._empty
            flat = [
                x if type(x) is int
                else 0 if empty[g]  # an empty group's operand: never touched, not looked at
                else self._pointer_of(f, g, x, stream, launch_stream, producers)
                for f, column in enumerate(columns)
                for g, x in enumerate(column)
            ]  # fmt: skip
        return flat, producers

    def check_pointers(self, flat) -> None:
        """Every pointer an int, non-null, 32-byte aligned, inside the int64 tables; no
        C overlapping any other operand."""
        count = self.count
        if len(flat) != len(FIELDS) * count or not all(type(x) is int for x in flat):
            raise InvalidProblemError(
                f"expected {len(FIELDS) * count} int pointers (a, b, c, sfa, sfb of {count} "
                f"groups), got {len(flat)} values"
            )
        live = self._live
        if len(live) < len(flat):  # empty groups: check only what the kernels touch
            flat = [x if i in live else None for i, x in enumerate(flat)]
            if all(x is None for x in flat):
                return
        if _misaligned(x for x in flat if x is not None):
            i = next(
                i for i, x in enumerate(flat)
                if x is not None and (x & _ADDRESS_MASK or not 0 < x < _ADDRESS_END)
            )  # fmt: skip
            validation.check_pointer(i % count, FIELDS[i // count], flat[i])
        validation.check_outputs_disjoint(flat, self._operand_sizes, count)

    def _pointer_of(self, f: int, g: int, obj, stream: int, launch_stream: int, producers) -> int:
        expected = self._expected[f][g]
        pointer = torch_pointer(
            obj, _TORCH_DTYPES[f], self.device, (expected,) if f <= _C else None,
            0 if f <= _C else expected,
        )  # fmt: skip
        if pointer is not None:
            return pointer
        interface = cuda_array_interface(obj)
        if type(interface) is dict:
            shape = interface.get("shape")
            if (
                interface.get("typestr") in _TYPESTRS[f]
                and type(interface.get("data")) is tuple
                and interface.get("strides") is None
                and interface.get("mask") is None
                and (shape == expected if f <= _C else prod(shape) >= expected)
                and (f != _C or not interface["data"][1])
                and device_of(obj) in (None, self.device)
            ):
                producer = interface.get("stream")
                if producer is not None and producer != launch_stream:
                    producers.add(producer)
                return interface["data"][0]
        array = describe(g, FIELDS[f], obj, stream)
        self._check_array(f, g, array)
        if array.stream is not None and array.stream != launch_stream:
            producers.add(array.stream)
        return array.pointer

    def _check_array(self, f: int, g: int, array: DeviceArray) -> None:
        field = FIELDS[f]
        if array.device is not None and array.device != self.device:
            raise InvalidProblemError(
                f"group {g}: {field} is on device {array.device}, the plan runs on device "
                f"{self.device}; create the plan with device={array.device} or move the data"
            )
        expected = self._expected[f][g]
        if f == _C:
            rows, cols = expected
            problem = check_matrix(array, ("f2",), rows, 2 * cols, writable=True)
        elif f <= _B:
            problem = check_matrix(array, FP4_DTYPES, *expected)
        else:
            problem = check_scales(array, SCALE_DTYPES, expected)
        if problem:
            raise InvalidProblemError(f"group {g}: {field} {problem}")


def _misaligned(pointers) -> bool:
    """Any pointer null, negative, past 2**63 or not 32-byte aligned (a plain loop: the hot
    path; a numpy round trip costs more below a few hundred pointers)."""
    for x in pointers:
        if x & _ADDRESS_MASK or not 0 < x < _ADDRESS_END:
            return True
    return False


def infer_problem_sizes(a, b) -> list[tuple[int, int, int, int]]:
    """(m, n, k, 1) per group from the described shapes of A (m, k/2) and B (n, k/2)."""
    sizes = []
    for g, (a_g, b_g) in enumerate(zip(a, b, strict=True)):
        shapes = []
        for field, operand in (("a", a_g), ("b", b_g)):
            if operand.shape is None:
                raise InvalidProblemError(
                    f"group {g}: {field} is a raw pointer, so problem_sizes must be given"
                )
            if len(operand.shape) < 2:
                raise InvalidProblemError(
                    f"group {g}: {field} must be 2-D (rows, k/2), got shape {operand.shape}"
                )
            k = operand.shape[1] * (2 if operand.dtype != "e2m1" else 1)
            shapes.append((operand.shape[0], k))
        (m, k_a), (n, k_b) = shapes
        if k_a != k_b:
            raise InvalidProblemError(f"group {g}: a implies k = {k_a}, b implies k = {k_b}")
        sizes.append((m, n, k_a, 1))
    return sizes
