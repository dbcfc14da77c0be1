"""Every precondition the kernels rely on without checking, checked on the host.

The kernels (``nvfp4_aot/kernels/sm100_grouped_gemm.py``, "Preconditions"; the sm_90a
kernel takes the same ABI) trust their inputs. Breaking a precondition does not raise
on the GPU: it reads or writes the wrong memory. So each one is checked here, and each
error names the group index, the field, the expected and the actual value.

======================  =====================================  ==========================================
what                    requirement                            why (kernel source)
======================  =====================================  ==========================================
number of groups        >= 1; <= 8 runs the G = 8 variant,     ``num_groups`` is a compile-time constant;
                        <= 120 the G = 120 one, more are       groups past the real ones are padded with
                        split into several launches            (0, 0, 0, 0) and 0 tiles (precondition 4)
m, n, k                 ints; m >= 0, n, k >= 1                a group with tiles but no K tile never
                                                               clears its accumulator (precondition 5);
                                                               m = 0 groups are left out of every launch
                                                               (empty groups may not sit between groups
                                                               with tiles: precondition 4) and their
                                                               operands are neither read nor checked
l                       == 1 (or omitted)                      only batch 0 is computed and the CTA
                                                               prefix counts m x n tiles (precondition 2)
k                       k % 32 == 0                            A/B strides ``cute.assume(k, 32)``; the
                                                               K-major row pitch k / 2 bytes must be a
                                                               multiple of 16 for TMA; implies k % 16
                                                               (one scale per 16 elements)
n                       n % 32 == 0                            C's row stride is ``cute.assume(n, 32)``;
                                                               full tiles use 128-bit stores
m * k, n * k, m * n     < 2**31                                32-bit layout arithmetic (precondition 7)
total output tiles      < 2**31                                ``cta_prefix`` is int32 (precondition 3)
A, B, C, SFA, SFB ptr   non-zero, 32-byte aligned              ``make_ptr(...).align(32)``; TMA needs 16
A                       (m, k / 2) bytes, rows packed          TMA descriptor with row pitch k / 2
B                       (n, k / 2) bytes, rows packed          TMA descriptor with row pitch k / 2
C                       (m, n) float16, C-contiguous,          row-major store with stride n; written
                        writable, no overlap between groups    by concurrent CTAs
SFA, SFB                >= blocked_scale_bytes(rows, k)        whole 512-byte blocked atoms are loaded
                        bytes, contiguous                      (precondition 9)
SFA, SFB padding        when k % 64 == 32: the padding scale   they multiply the zero-filled A/B
columns                 columns k/16 .. 4*ceil(k/64)-1 hold    elements past k; a NaN scale there makes
                        zeros (never NaN; not checked: it is   valid outputs NaN (precondition 9);
                        data, read only by the GPU)            ``layouts.scales_to_blocked`` writes zeros
======================  =====================================  ==========================================

The table pointers, the tensormap workspace (64-byte aligned, one per concurrently
running launch) and grid == persistent_blocks are the runtime's own business
(:mod:`nvfp4_aot.plan`) and need no user-facing check.
"""

from __future__ import annotations

import operator

from .blocked import blocked_scale_bytes
from .errors import InvalidProblemError
from .intmath import ceil_div

INT32_MAX = (1 << 31) - 1
POINTER_ALIGN = 32
ALPHA_ALIGN = 4  # the alpha array: float32
K_MULTIPLE = 32
N_MULTIPLE = 32
FIELDS = ("m", "n", "k", "l")
OPERAND_FIELDS = ("a", "b", "c", "sfa", "sfb")
"""The operands of a group, in the order every API takes them and pointer tables list them."""


class ProblemSizes(tuple):
    """Problem sizes that passed :func:`problem_sizes`: a tuple of (m, n, k, 1) tuples.

    The type records that they were checked, so that code handed them (a plan made
    through the plan cache) does not check them again.
    """

    __slots__ = ()


def problem_sizes(sizes) -> ProblemSizes:
    """Normalise and check problem sizes: a sequence of (m, n, k) or (m, n, k, l).

    Returns
    -------
    ProblemSizes: a tuple of (m, n, k, 1) tuples of Python ints (``sizes`` itself when
    it already is one).

    Raises
    ------
    InvalidProblemError
        Naming the group, the field, what was expected and what was given.
    """
    if type(sizes) is ProblemSizes:
        return sizes
    try:
        rows = list(sizes)
    except TypeError as exc:
        raise InvalidProblemError(
            f"problem_sizes must be a sequence of (m, n, k) or (m, n, k, l), got {sizes!r}"
        ) from exc
    if not rows:
        raise InvalidProblemError("problem_sizes is empty: expected at least one group")
    result = []
    for g, row in enumerate(rows):
        try:
            values = [operator.index(v) for v in row]
        except TypeError as exc:
            raise InvalidProblemError(
                f"group {g}: problem size must be integers (m, n, k) or (m, n, k, l), got {row!r}"
            ) from exc
        if len(values) not in (3, 4):
            raise InvalidProblemError(
                f"group {g}: problem size must have 3 (m, n, k) or 4 (m, n, k, l) entries, "
                f"got {len(values)}: {tuple(values)}"
            )
        if len(values) == 3:
            values.append(1)
        check_group(g, *values)
        result.append(tuple(values))
    return ProblemSizes(result)


def check_group(g: int, m: int, n: int, k: int, l: int = 1) -> None:  # noqa: E741
    for name, value in zip(FIELDS[:3], (m, n, k)):
        if value < (0 if name == "m" else 1):
            low = "0 (an empty group)" if name == "m" else "1"
            raise InvalidProblemError(f"group {g}: {name} must be >= {low}, got {value}")
        if value > INT32_MAX:
            raise InvalidProblemError(f"group {g}: {name} must be < 2**31, got {value}")
    if l != 1:
        raise InvalidProblemError(
            f"group {g}: l must be 1 (batched groups are not supported; pass each batch "
            f"entry as its own group), got {l}"
        )
    if k % K_MULTIPLE:
        raise InvalidProblemError(
            f"group {g}: k must be a multiple of {K_MULTIPLE} (A/B rows of k/2 bytes must be "
            f"16-byte aligned for TMA), got {k}"
        )
    if n % N_MULTIPLE:
        raise InvalidProblemError(
            f"group {g}: n must be a multiple of {N_MULTIPLE} (the kernel assumes C's row "
            f"stride is), got {n}"
        )
    for name, value in (("m * k", m * k), ("n * k", n * k), ("m * n", m * n)):
        if value > INT32_MAX:
            raise InvalidProblemError(
                f"group {g}: {name} must be < 2**31 (32-bit layout arithmetic), got {value}"
            )


def tiles(m: int, n: int, tile_m: int, tile_n: int) -> int:
    return ceil_div(m, tile_m) * ceil_div(n, tile_n)


def check_total_tiles(total: int) -> None:
    if total > INT32_MAX:
        raise InvalidProblemError(
            f"the groups of one launch have {total} output tiles, at most {INT32_MAX} fit the "
            "int32 CTA prefix; split the problem into several plans"
        )


def check_pointer(g: int, field: str, pointer: int) -> None:
    if pointer == 0:
        raise InvalidProblemError(f"group {g}: {field} is a null pointer")
    if not 0 < pointer < 1 << 63:
        raise InvalidProblemError(f"group {g}: {field} is not a device address: {pointer}")
    if pointer % POINTER_ALIGN:
        raise InvalidProblemError(
            f"group {g}: {field} must be {POINTER_ALIGN}-byte aligned, got address "
            f"0x{pointer:x} (offset {pointer % POINTER_ALIGN})"
        )


def operand_bytes(m: int, n: int, k: int) -> dict[str, int]:
    """Minimum bytes of each operand of one group."""
    return {
        "a": m * (k // 2),
        "b": n * (k // 2),
        "c": m * n * 2,
        "sfa": blocked_scale_bytes(m, k),
        "sfb": blocked_scale_bytes(n, k),
    }


def check_outputs_disjoint(pointers, sizes, count: int) -> None:
    """No group's C overlaps another group's C or any operand of any group.

    ``pointers`` and ``sizes`` (bytes) are field-major: A of every group, then B, C, SFA,
    SFB. Inputs may overlap each other (groups sharing weights are fine); an output may
    not, since CTAs write C while others still read. One sweep in address order.
    ``None`` marks an operand no kernel touches (an empty group's).
    """
    order = sorted((i for i, x in enumerate(pointers) if x is not None), key=pointers.__getitem__)
    reach = c_reach = 0  # furthest end so far of any interval / of any C
    for position, index in enumerate(order):  # noqa: B007 (used after the break)
        start, is_c = pointers[index], index // count == 2
        if start < (reach if is_c else c_reach):
            break
        end = start + sizes[index]
        reach = max(reach, end)
        if is_c:
            c_reach = max(c_reach, end)
    else:
        return
    j = next(
        j for j in order[:position] if pointers[j] + sizes[j] > start and (is_c or j // count == 2)
    )
    (gi, fi), (gj, fj) = divmod(index, count)[::-1], divmod(j, count)[::-1]
    if fi == 2 and fj == 2:
        (g, fg), (h, fh) = sorted(((gi, fi), (gj, fj)))[::-1]
        advice = "every group needs its own output"
    else:
        (g, fg), (h, fh) = ((gi, fi), (gj, fj)) if fi == 2 else ((gj, fj), (gi, fi))
        advice = "the output must not alias an input"
    raise InvalidProblemError(
        f"group {g}: c overlaps group {h}'s {OPERAND_FIELDS[fh]} (0x{pointers[j]:x} + "
        f"{sizes[j]} bytes reaches past 0x{start:x}); {advice}"
    )


def check_alpha_given(alpha, planned: bool, per: str) -> None:
    """``alpha`` given exactly when the plan was made with ``alpha=True`` (one float32
    ``per`` group or expert)."""
    if (alpha is None) == planned:
        raise InvalidProblemError(
            f"alpha is missing: the plan was made with alpha=True (one float32 per {per})"
            if planned
            else "alpha was given but the plan was made without it; create it with alpha=True"
        )
