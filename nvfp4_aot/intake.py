"""Operand intake: what callers pass for A, B, C, SFA, SFB becomes checked device pointers.

Each operand is looked at once. Raw pointers and plain C-contiguous arrays of the
expected shape and dtype take a fast path (PyTorch tensors through their attributes,
``__cuda_array_interface__`` dicts read directly); anything else is described in full by
:mod:`nvfp4_aot.operands`, which either accepts it or says what is wrong, naming the group
and the field. The pointer set as a whole is then checked against what the kernels
assume (alignment, outputs disjoint from every other operand). A plan with a per-group
alpha takes one more operand, a float32 array of one value per group, whose address ends
the pointer list.
"""

from __future__ import annotations

from math import prod

from . import validation
from .errors import InvalidProblemError
from .operands import (
    FP4_DTYPES,
    OUT_DTYPE_CODES,
    SCALE_DTYPES,
    TORCH_ALPHA_DTYPES,
    TORCH_FP4_DTYPES,
    TORCH_OUT_DTYPES,
    TORCH_SCALE_DTYPES,
    DeviceArray,
    check_alpha,
    check_matrix,
    check_scales,
    cuda_array_interface,
    device_array,
    device_index,
    interface_stream,
    torch_pointer,
)

FIELDS = validation.OPERAND_FIELDS
_A, _B, _C, _SFA, _SFB = range(5)
# __cuda_array_interface__ typestrs taken on the fast path, per field (C: per out_dtype;
# bfloat16 has no typestr)
BYTE_TYPESTRS = ("|u1", "|i1", "|V1")
C_TYPESTRS = {"float16": ("<f2",), "bfloat16": ()}
_ADDRESS_MASK = validation.POINTER_ALIGN - 1
_ADDRESS_END = 1 << 63  # int64 pointer tables


def describe(g: int, field: str, obj, stream: int) -> DeviceArray:
    """:func:`operands.device_array` with the group and field named in its errors."""
    try:
        return device_array(obj, stream)
    except (TypeError, ValueError) as exc:
        raise InvalidProblemError(f"group {g}: {field}: {exc}") from exc


def array_pointer(field: str, obj, stream: int, producers, device: int, check) -> int:
    """The device address of array operand ``field`` of a whole-array plan (MoE,
    quantizer, a per-group plan's alpha) once it is on ``device`` and passes
    ``check(field, array)``; a producer stream it names (``__cuda_array_interface__`` v3)
    other than the launch's (``stream``) joins ``producers``."""
    try:
        array = device_array(obj, stream)
    except (TypeError, ValueError) as exc:
        raise InvalidProblemError(f"{field}: {exc}") from exc
    if array.device is not None and array.device != device:
        raise InvalidProblemError(
            f"{field} is on device {array.device}, the plan runs on device {device}"
        )
    check(field, array)
    if array.stream is not None and array.stream != interface_stream(stream):
        producers.add(array.stream)
    return array.pointer


class OperandIntake:
    """Turns the five per-group operand columns of one plan (and its alpha array) into a
    flat pointer list.

    Parameters
    ----------
    problem_sizes : checked (m, n, k, 1) per group
    device : the plan's device ordinal
    out_dtype : C's dtype, "float16" or "bfloat16"
    alpha : whether runs pass a float32 alpha array (one value per group)
    """

    def __init__(self, problem_sizes, device: int, out_dtype: str = "float16", alpha=False):
        self.problem_sizes = problem_sizes
        self.device = device
        self.count = len(problem_sizes)
        self.out_dtype = out_dtype
        self.alpha = alpha
        self._typestrs = (
            BYTE_TYPESTRS, BYTE_TYPESTRS, C_TYPESTRS[out_dtype], BYTE_TYPESTRS, BYTE_TYPESTRS,
        )  # fmt: skip
        self.torch_dtypes = (
            TORCH_FP4_DTYPES, TORCH_FP4_DTYPES, TORCH_OUT_DTYPES[out_dtype], TORCH_SCALE_DTYPES,
            TORCH_SCALE_DTYPES,
        )  # fmt: skip
        # per field: torch dtype object -> its element size where the field takes it, else 0
        self._torch_dtype_sizes = tuple({} for _ in FIELDS)
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

    def pointers(self, a, b, c, sfa, sfb, stream: int, alpha=None) -> tuple[list[int], set[int]]:
        """The flat (A, B, C, SFA, SFB) x group pointer list (then alpha's address, for a
        plan with alpha) and the producer streams (``__cuda_array_interface__`` v3) that a
        launch on ``stream`` must order after.

        Checks every array operand; the pointer set is checked by :meth:`check_pointers`.
        """
        self.check_alpha_given(alpha)
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
            flat = []
            for f, column in enumerate(columns):
                self._column_pointers(f, column, stream, producers, flat)
        if self.alpha:
            flat.append(
                alpha if type(alpha) is int else self.alpha_pointer(alpha, stream, producers)
            )
        return flat, producers

    def check_alpha_given(self, alpha) -> None:
        """Alpha given exactly when the plan was made with it."""
        validation.check_alpha_given(alpha, self.alpha, "group")

    def alpha_pointer(self, obj, stream: int, producers) -> int:
        """The address of a float32 alpha array (one value per group), checked."""
        pointer = torch_pointer(obj, TORCH_ALPHA_DTYPES, self.device, None, 4 * self.count)
        if pointer is not None:
            return pointer
        return array_pointer("alpha", obj, stream, producers, self.device, self._check_alpha_array)

    def _check_alpha_array(self, field: str, array) -> None:
        problem = check_alpha(array, self.count)
        if problem:
            raise InvalidProblemError(f"{field} {problem}")

    def check_pointers(self, flat) -> None:
        """Every pointer an int, non-null, 32-byte aligned (alpha: 4), inside the int64
        tables; no C overlapping any other operand (alpha included)."""
        count = self.count
        expected = len(FIELDS) * count + self.alpha
        if len(flat) != expected or not all(type(x) is int for x in flat):
            alpha = ", then alpha" if self.alpha else ""
            raise InvalidProblemError(
                f"expected {expected} int pointers (a, b, c, sfa, sfb of {count} groups"
                f"{alpha}), got {len(flat)} values"
            )
        if self.alpha:
            self._check_alpha_pointer(flat[-1], flat[2 * count : 3 * count])
            flat = flat[:-1]
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

    def _check_alpha_pointer(self, alpha: int, c_pointers) -> None:
        """Alpha non-null, float32-aligned, and none of its values under a group's C."""
        if not 0 < alpha < _ADDRESS_END or alpha % validation.ALPHA_ALIGN:
            raise InvalidProblemError(
                f"alpha must be a {validation.ALPHA_ALIGN}-byte aligned device address, "
                f"got 0x{alpha:x}"
            )
        end = alpha + 4 * self.count
        for g, c in enumerate(c_pointers):
            size = self._operand_sizes[_C * self.count + g]
            if size and c < end and alpha < c + size:
                raise InvalidProblemError(
                    f"group {g}: c overlaps alpha (0x{alpha:x} + {4 * self.count} bytes); "
                    "the output must not alias an input"
                )

    def _column_pointers(self, f: int, column, stream: int, producers, flat: list) -> None:
        """Append the pointers of one field's operands to ``flat``.

        The hot path of a run with arrays (issue #17: 100+ groups x 5 operands per call):
        one loop per column with its constants hoisted, PyTorch-like tensors and
        ``__cuda_array_interface__`` v3 dicts that plainly fit read inline, accepted
        torch dtype objects looked up in a dict (dtypes are long-lived singletons; the
        dict holds them). Nothing about an operand itself is remembered between calls.
        Anything that does not plainly fit goes to :meth:`_pointer_of`, which accepts it
        or names the group, field and problem.
        """
        launch_stream = interface_stream(stream)
        empty, expected, device = self._empty, self._expected[f], self.device
        matrix, is_c = f <= _C, f == _C
        dtype_sizes, torch_names = self._torch_dtype_sizes[f], self.torch_dtypes[f]
        typestrs = self._typestrs[f]
        append = flat.append
        for g, x in enumerate(column):
            kind = type(x)
            if kind is int:
                append(x)
                continue
            if empty[g]:  # an empty group's operand: never touched, not looked at
                append(0)
                continue
            torch_like = _TORCH_LIKE.get(kind)
            if torch_like is None:
                torch_like = _torch_like(kind)
            if torch_like:
                if x.is_cuda:
                    dtype = x.dtype
                    itemsize = dtype_sizes.get(dtype)
                    if itemsize is None:
                        itemsize = _accepted_itemsize(dtype_sizes, dtype, torch_names, x, matrix)
                    if (
                        itemsize
                        and x.get_device() == device
                        and x.is_contiguous()
                        and (
                            x.shape == expected[g] if matrix
                            else x.numel() * itemsize >= expected[g]
                        )
                    ):  # fmt: skip
                        append(x.data_ptr())
                        continue
            else:
                try:
                    interface = x.__cuda_array_interface__
                except Exception:  # none, or a property that raises: the full path says
                    interface = None
                if (
                    type(interface) is dict
                    and interface.get("version") == 3
                    and interface.get("typestr") in typestrs
                    and interface.get("strides") is None
                    and interface.get("mask") is None
                ):
                    data, shape = interface.get("data"), interface.get("shape")
                    if (
                        type(data) is tuple
                        and type(shape) is tuple
                        and (shape == expected[g] if matrix else prod(shape) >= expected[g])
                        and not (is_c and data[1])
                        and device_index(getattr(x, "device", None)) in (None, device)
                    ):
                        producer = interface.get("stream")
                        if producer is not None and producer != launch_stream:
                            producers.add(producer)
                        append(data[0])
                        continue
            append(self._pointer_of(f, g, x, stream, launch_stream, producers))

    def _pointer_of(self, f: int, g: int, obj, stream: int, launch_stream: int, producers) -> int:
        expected = self._expected[f][g]
        pointer = torch_pointer(
            obj, self.torch_dtypes[f], self.device, (expected,) if f <= _C else None,
            0 if f <= _C else expected,
        )  # fmt: skip
        if pointer is not None:
            return pointer
        interface = cuda_array_interface(obj)
        if type(interface) is dict:
            shape = interface.get("shape")
            if (
                interface.get("typestr") in self._typestrs[f]
                and type(interface.get("data")) is tuple
                and interface.get("strides") is None
                and interface.get("mask") is None
                and type(shape) is tuple
                and (shape == expected if f <= _C else prod(shape) >= expected)
                and (f != _C or not interface["data"][1])
                and device_index(getattr(obj, "device", None)) in (None, self.device)
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
            code = OUT_DTYPE_CODES[self.out_dtype]
            problem = check_matrix(array, (code,), rows, 2 * cols, writable=True)
        elif f <= _B:
            problem = check_matrix(array, FP4_DTYPES, *expected)
        else:
            problem = check_scales(array, SCALE_DTYPES, expected)
        if problem:
            raise InvalidProblemError(f"group {g}: {field} {problem}")


# per class: whether it is PyTorch-like (``is_cuda`` at class level, as torch.Tensor); classes
# are long-lived and held here, so this never confuses one object with another
_TORCH_LIKE: dict[type, bool] = {}


def _torch_like(kind: type) -> bool:
    if len(_TORCH_LIKE) > 256:  # classes made on the fly: do not grow without bound
        _TORCH_LIKE.clear()
    answer = _TORCH_LIKE[kind] = hasattr(kind, "is_cuda")
    return answer


def _accepted_itemsize(sizes: dict, dtype, names, obj, matrix: bool) -> int:
    """Element size of ``dtype`` where its name is one of ``names`` (1 for a matrix field,
    whose shape is compared instead), else 0; remembered per dtype object in ``sizes``
    (a handful of dtypes exist)."""
    if len(sizes) > 64:
        sizes.clear()
    accepted = str(dtype) in names
    size = sizes[dtype] = (1 if matrix else obj.element_size()) if accepted else 0
    return size


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
