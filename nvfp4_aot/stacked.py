"""Stacked operands for the per-group API: one array per operand, so that a run's host
work does not grow with the number of groups.

``GroupedGemmPlan.run`` takes one array per group per operand and must look at each
(issue #17: 100+ groups x 5 operands per call; reading a torch tensor's attributes alone
costs more than the whole launch). :meth:`GroupedGemmPlan.run_stacked` takes one array
per operand holding every group's operand back to back instead::

    group g's operand starts at byte offsets[field][g] of the field's array:
        offsets[field][0] = 0
        offsets[field][g + 1] = offsets[field][g] + round_up(bytes of g's operand, 32)
    bytes: A m*k/2, B n*k/2, C m*n*2, SFA blocked_scale_bytes(m, k), SFB (n, k); 0 for an
    empty group (m = 0), which takes no room

When every k is a multiple of 64 no rounding happens (every operand's size is a multiple
of 32 bytes), so the arrays are exactly the per-group operands concatenated: A the rows
of every group's A, (sum m, k/2) when the groups share k; C (sum m, n) when they share n;
B (G, n, k/2); SFA and SFB the blocked buffers one after the other. Five arrays are
checked per call (dtype, device, contiguity, size, row length where the groups share it),
whatever the group count; the group pointers they imply are checked and packed once per
set of base addresses.
"""

from __future__ import annotations

from math import prod

from . import validation
from .errors import InvalidProblemError
from .intake import BYTE_TYPESTRS, C_TYPESTRS
from .intmath import round_up
from .operands import (
    FP4_DTYPES,
    OUT_DTYPE_CODES,
    SCALE_DTYPES,
    DeviceArray,
    device_array,
    device_index,
    interface_stream,
    is_c_contiguous,
    is_dense,
    nbytes,
    torch_pointer,
)

FIELDS = validation.OPERAND_FIELDS
_ADDRESS_END = 1 << 63
_ITEMSIZE = {"|u1": 1, "|i1": 1, "|V1": 1, "<f2": 2}


class StackedIntake:
    """Base addresses of the five stacked arrays of one plan, and the group pointers they
    imply.

    Parameters
    ----------
    intake : the plan's :class:`nvfp4_aot.intake.OperandIntake` (problem sizes, device,
        output dtype, alpha and its checks are shared with it)
    """

    def __init__(self, intake):
        self._intake = intake
        sizes = intake.problem_sizes
        live = [m > 0 for m, _n, _k, _l in sizes]
        bytes_of = [
            validation.operand_bytes(m, n, k) if m else dict.fromkeys(FIELDS, 0)
            for m, n, k, _l in sizes
        ]
        offsets, required = {}, {}
        for field in FIELDS:
            at, column, end = 0, [], 0
            for g, size in enumerate(b[field] for b in bytes_of):
                column.append(at)
                if live[g]:
                    end = at + size
                at += round_up(size, validation.POINTER_ALIGN)
            offsets[field], required[field] = tuple(column), end
        #: per field: byte offset of each group's operand in the field's stacked array
        self.offsets = offsets
        #: per field: bytes the field's stacked array must hold at least
        self.required = required
        ks = {k for m, _n, k, _l in sizes if m}
        ns = {n for m, n, _k, _l in sizes if m}
        k = ks.pop() if len(ks) == 1 else None
        n = ns.pop() if len(ns) == 1 else None
        # bytes per row of A, B (k/2) and C (2n), where every group with rows shares them
        self._row_bytes = {
            "a": k // 2 if k else None, "b": k // 2 if k else None, "c": 2 * n if n else None,
        }  # fmt: skip
        self._torch_dtypes = dict(zip(FIELDS, intake.torch_dtypes))
        self._typestrs = dict.fromkeys(FIELDS, BYTE_TYPESTRS) | {"c": C_TYPESTRS[intake.out_dtype]}
        self._dtypes = {
            "a": FP4_DTYPES, "b": FP4_DTYPES, "c": (OUT_DTYPE_CODES[intake.out_dtype],),
            "sfa": SCALE_DTYPES, "sfb": SCALE_DTYPES,
        }  # fmt: skip

    def bases(self, a, b, c, sfa, sfb, stream: int, alpha=None) -> tuple[tuple, set[int]]:
        """The base address of each stacked array (then alpha's, for a plan with alpha)
        and the producer streams a launch on ``stream`` must order after."""
        intake = self._intake
        intake.check_alpha_given(alpha)
        producers: set[int] = set()
        bases = tuple(
            obj if type(obj) is int else self._base(field, obj, stream, producers)
            for field, obj in zip(FIELDS, (a, b, c, sfa, sfb))
        )
        if intake.alpha:
            pointer = (
                alpha if type(alpha) is int else intake.alpha_pointer(alpha, stream, producers)
            )
            bases = (*bases, pointer)
        return bases, producers

    def expand(self, bases) -> list[int]:
        """The flat (A, B, C, SFA, SFB) x group pointer list (then alpha) of these bases."""
        flat = [
            base + offset
            for field, base in zip(FIELDS, bases)
            for offset in self.offsets[field]
        ]  # fmt: skip
        return flat + list(bases[len(FIELDS) :])

    def check(self, bases) -> None:
        """Each base an aligned device address; then every group pointer as the per-group
        API checks them (alignment, no C overlapping any operand)."""
        if len(bases) != len(FIELDS) + self._intake.alpha or not all(type(x) is int for x in bases):
            raise InvalidProblemError(f"expected int base addresses, got {bases!r}")
        for field, base in zip(FIELDS, bases):
            if self.required[field] and (
                not 0 < base < _ADDRESS_END or base % validation.POINTER_ALIGN
            ):
                raise InvalidProblemError(
                    f"stacked {field} must be a {validation.POINTER_ALIGN}-byte aligned "
                    f"device address, got 0x{base:x}"
                )
        self._intake.check_pointers(self.expand(bases))

    def _base(self, field: str, obj, stream: int, producers) -> int:
        need, row = self.required[field], self._row_bytes.get(field)
        pointer = torch_pointer(obj, self._torch_dtypes[field], self._intake.device, None, need)
        if pointer is not None:
            shape = obj.shape
            if row is None or (len(shape) and shape[-1] * obj.element_size() == row):
                return pointer
        pointer = self._plain_cai_pointer(field, obj, need, row, stream, producers)
        if pointer is not None:
            return pointer
        try:
            array = device_array(obj, stream)
        except (TypeError, ValueError) as exc:
            raise InvalidProblemError(f"stacked {field}: {exc}") from exc
        problem = self._problem(field, array, need, row)
        if problem:
            raise InvalidProblemError(f"stacked {field} {problem}")
        if array.stream is not None and array.stream != interface_stream(stream):
            producers.add(array.stream)
        return array.pointer

    def _plain_cai_pointer(self, field, obj, need, row, stream, producers) -> int | None:
        """The address in a ``__cuda_array_interface__`` v3 dict that plainly fits, else
        None (then :func:`device_array` describes the array and :meth:`_problem` says
        what is wrong)."""
        try:
            interface = obj.__cuda_array_interface__
        except Exception:  # none, or a property that raises: the full path says
            return None
        if type(interface) is not dict or interface.get("version") != 3:
            return None
        typestr, data, shape = (interface.get(key) for key in ("typestr", "data", "shape"))
        if (
            typestr not in self._typestrs[field]
            or interface.get("strides") is not None
            or interface.get("mask") is not None
            or type(data) is not tuple
            or type(shape) is not tuple
            or not shape
        ):
            return None
        item = _ITEMSIZE[typestr]
        if (
            prod(shape) * item < need
            or (row is not None and shape[-1] * item != row)
            or (field == "c" and data[1])
            or device_index(getattr(obj, "device", None)) not in (None, self._intake.device)
        ):
            return None
        producer = interface.get("stream")
        if producer is not None and producer != interface_stream(stream):
            producers.add(producer)
        return data[0]

    def _problem(self, field: str, array: DeviceArray, need: int, row) -> str | None:
        device = self._intake.device
        if array.device is not None and array.device != device:
            return (
                f"is on device {array.device}, the plan runs on device {device}; create "
                f"the plan with device={array.device} or move the data"
            )
        if field == "c" and array.readonly:
            return "is read-only"
        if array.shape is None:
            return None
        if array.dtype not in self._dtypes[field]:
            return f"must have dtype {' or '.join(self._dtypes[field])}, got {array.dtype}"
        if field in ("sfa", "sfb"):
            if not is_dense(array.shape, array.strides):
                return f"must be dense, got shape {array.shape} strides {array.strides}"
        elif not is_c_contiguous(array.shape, array.strides):
            return f"must be C-contiguous, got shape {array.shape} strides {array.strides}"
        if row is not None and (not array.shape or array.shape[-1] * array.bits // 8 != row):
            return f"must have rows of {row} bytes (the last axis), got shape {array.shape}"
        size = nbytes(array)
        if size < need:
            return (
                f"must hold at least {need} bytes (every group's operand), got {size} "
                f"(shape {array.shape})"
            )
        return None
