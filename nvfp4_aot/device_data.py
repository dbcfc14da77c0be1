"""Operands in device memory, for the CLI, benchmarks and GPU checks.

:class:`DeviceOperands`: one allocation holds A, B, C, SFA and SFB of every group of a
grouped GEMM, each at a 256-byte aligned offset and sized as the kernels read them
(:func:`nvfp4_aot.validation.operand_bytes`); ``columns`` lists the device pointers in
:meth:`GroupedGemmPlan.run` order.

:class:`DeviceMoe`: a MoE plan's operands, C followed by poisoned guard rows;
:class:`CapturedGraph` records runs into one CUDA graph; :func:`check_routing` compares
a routing's output with the float64 reference and checks that nothing else was written.
:func:`random_bytes` and :func:`random_scales` are cheap inputs for timing.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from . import driver, validation
from .intmath import round_up
from .layouts import E4M3_VALUES, decode_output
from .reference import relative_error

ALIGN = 256  # cuMemAlloc alignment, kept for every operand inside the allocation
NAN_F16 = 0xFFFF  # poison for C: NaN as float16 and as bfloat16, unless overwritten
GUARD_ROWS = 64  # rows of poison after a MoE C: a write past C shows there


# timing inputs --------------------------------------------------------------------------


def scale_codes(low: float = 0.25, high: float = 4.0) -> np.ndarray:
    """The positive E4M3 codes whose values lie in [low, high]."""
    codes = np.arange(128)
    values = E4M3_VALUES[:128]
    return codes[(values >= low) & (values <= high)].astype(np.uint8)


def random_bytes(size: int, rng: np.random.Generator) -> np.ndarray:
    """Random bytes: uniform FP4 codes, two per byte."""
    return np.frombuffer(rng.bytes(size), dtype=np.uint8)


def random_scales(size: int, rng: np.random.Generator) -> np.ndarray:
    """Random E4M3 scale codes in [0.25, 4] (finite, never zero)."""
    codes = scale_codes()
    return codes[random_bytes(size, rng) % len(codes)]


def random_alpha(count: int, rng: np.random.Generator) -> np.ndarray:
    """float32 alphas spread over 1e-4 .. 10 (log-uniform, random sign): products with
    large scales that would overflow FP16 unscaled come back into range."""
    magnitude = 10.0 ** rng.uniform(-4, 1, count)
    return (magnitude * rng.choice([-1.0, 1.0], count)).astype(np.float32)


# grouped GEMM ---------------------------------------------------------------------------


class DeviceOperands:
    """A, B, C, SFA, SFB of every group of ``sizes`` in one device allocation.

    ``host_arrays`` holds per group (A, B, SFA blocked, SFB blocked) numpy arrays to
    upload; without it the operands are zero-filled (enough for timing). ``alpha``
    (float32, one per group) is uploaded after them (:attr:`alpha` its address, else 0);
    C holds ``out_dtype``. Allocate with the device's context current
    (:func:`nvfp4_aot.driver.activate`).
    """

    def __init__(self, sizes, host_arrays=None, *, alpha=None, out_dtype: str = "float16"):
        self.sizes = [tuple(s[:3]) for s in sizes]
        self.out_dtype = out_dtype
        layout, offset = [], 0
        for m, n, k in self.sizes:
            nbytes = validation.operand_bytes(m, n, k)
            entry = []
            for name in validation.OPERAND_FIELDS:
                entry.append(offset)
                offset += round_up(nbytes[name], ALIGN)
            layout.append(entry)
        alpha_at = offset
        if alpha is not None:
            alpha = np.ascontiguousarray(alpha, dtype=np.float32)
            offset += round_up(alpha.nbytes, ALIGN)
        self.nbytes = offset
        self.base = driver.mem_alloc(offset)
        try:
            if host_arrays is None:
                driver.memset_d8(self.base, 0, offset)
            else:
                host = np.zeros(offset, dtype=np.uint8)
                for arrays, (pa, pb, _pc, psfa, psfb) in zip(host_arrays, layout):
                    for array, at in zip(arrays, (pa, pb, psfa, psfb)):
                        raw = np.ascontiguousarray(array).view(np.uint8).reshape(-1)
                        host[at : at + raw.size] = raw
                if alpha is not None:
                    host[alpha_at : alpha_at + alpha.nbytes] = alpha.view(np.uint8)
                driver.memcpy_htod(self.base, host.ctypes.data, offset)
        except BaseException:
            self.free()
            raise
        self.columns = tuple([self.base + entry[f] for entry in layout] for f in range(5))
        self.alpha = 0 if alpha is None else self.base + alpha_at
        self.alpha_values = alpha  # the host copy, for references

    def poison_c(self, value: int = NAN_F16, stream: int | None = None) -> None:
        """Fill every C with the 16-bit ``value``: on ``stream`` (ordered with its
        launches) or at once."""
        for c, (m, n, _k) in zip(self.columns[2], self.sizes):
            if stream is None:
                driver.memset_d16(c, value, m * n)
            else:
                driver.call("cuMemsetD16Async", c, value, m * n, stream)

    def c_raw(self, g: int) -> np.ndarray:
        """Group ``g``'s C as raw 16-bit words (to compare with a poison value)."""
        m, n, _k = self.sizes[g]
        out = np.empty((m, n), dtype=np.uint16)
        driver.memcpy_dtoh(out.ctypes.data, self.columns[2][g], out.nbytes)
        return out

    def c(self, g: int) -> np.ndarray:
        """Group ``g``'s C as float64 values (from ``out_dtype``)."""
        return decode_output(self.c_raw(g), self.out_dtype)

    def free(self) -> None:
        if self.base:
            driver.mem_free(self.base)
            self.base = 0


# MoE ------------------------------------------------------------------------------------


class DeviceMoe:
    """A MoE plan's operands in device memory: A, B, SFB (and, for timing, SFA) uploaded
    once, the routing array and SFA rewritten per routing, C followed by guard rows.

    ``needs`` is the plan's :meth:`MoeLayout.operand_bytes`; ``arrays`` maps operand
    names to host arrays to upload (SFA not given starts zeroed: scale rows a routing
    leaves out stay zero). Allocate with the plan's device current.
    """

    def __init__(self, needs: dict[str, int], n: int, arrays: dict[str, np.ndarray]):
        self.n = n
        self.rows = needs["c"] // (2 * n)
        self.c_elements = (self.rows + GUARD_ROWS) * n
        self.sizes = dict(needs, c=2 * self.c_elements)
        self.pointers: dict[str, int] = {}
        try:
            for name in ("routing", "a", "b", "c", "sfa", "sfb", "alpha"):
                if name == "alpha" and name not in arrays:
                    continue
                self.pointers[name] = driver.mem_alloc(self.sizes[name])
                if name in arrays:
                    self.write(name, arrays[name])
                elif name == "sfa":
                    driver.memset_d8(self.pointers[name], 0, self.sizes[name])
        except BaseException:
            self.free()
            raise

    @classmethod
    def of_problem(cls, needs: dict[str, int], problem, alpha=None) -> DeviceMoe:
        """A :class:`~nvfp4_aot.moe_data.MoeProblem`'s activations and weights uploaded
        (and a float32 alpha per expert, where given)."""
        arrays = {"a": problem.a, "b": problem.b, "sfb": problem.sfb}
        if alpha is not None:
            arrays["alpha"] = np.ascontiguousarray(alpha, dtype=np.float32)
        return cls(needs, problem.n, arrays)

    @property
    def operands(self) -> tuple[int, ...]:
        """(a, b, c, sfa, sfb, routing): MoeGemmPlan.run's arguments."""
        p = self.pointers
        return p["a"], p["b"], p["c"], p["sfa"], p["sfb"], p["routing"]

    @property
    def alpha(self) -> int | None:
        """The per-expert alpha's address, or None (run's ``alpha`` argument)."""
        return self.pointers.get("alpha")

    def write(self, name: str, array: np.ndarray) -> None:
        """Copy ``array`` into operand ``name`` (at most its size)."""
        array = np.ascontiguousarray(array)
        if array.nbytes > self.sizes[name]:
            raise ValueError(f"{name}: {array.nbytes} bytes, the operand holds {self.sizes[name]}")
        driver.memcpy_htod(self.pointers[name], array.ctypes.data, array.nbytes)

    def load(self, routing: np.ndarray | None = None, sfa: np.ndarray | None = None) -> None:
        """Write a routing's array (and scales); poison C and its guard; wait for it all,
        so that work on any stream sees it (the memset is queued on the legacy stream)."""
        if routing is not None:
            self.write("routing", routing)
        if sfa is not None:
            self.write("sfa", sfa)
        driver.memset_d16(self.pointers["c"], NAN_F16, self.c_elements)
        driver.synchronize()

    def c_raw(self) -> np.ndarray:
        """C and its guard rows as raw float16 bits."""
        out = np.empty((self.rows + GUARD_ROWS, self.n), dtype=np.uint16)
        driver.memcpy_dtoh(out.ctypes.data, self.pointers["c"], out.nbytes)
        return out

    def free(self) -> None:
        for pointer in self.pointers.values():
            driver.mem_free(pointer)
        self.pointers = {}

    def __enter__(self) -> DeviceMoe:
        return self

    def __exit__(self, *exc) -> None:
        self.free()


class CapturedGraph:
    """What ``record()`` queues on ``stream``, captured into one CUDA graph and
    instantiated; replay it with :meth:`launch`.

    Captured in relaxed mode, as an application (or ``torch.cuda.graph(...,
    capture_error_mode="relaxed")``) would capture a plan's runs; a plan's own graphs use
    thread-local mode (:func:`nvfp4_aot.driver.capture_begin`).
    """

    def __init__(self, stream: int, record: Callable[[], None]):
        driver.capture_begin(stream, relaxed=True)
        try:
            record()
        except BaseException:
            driver.graph_destroy(driver.capture_end(stream))
            raise
        self.graph = driver.capture_end(stream)
        try:
            self.executable = driver.graph_instantiate(self.graph)
        except BaseException:
            driver.graph_destroy(self.graph)
            raise

    def launch(self, stream: int) -> None:
        driver.graph_launch(self.executable, stream)

    def destroy(self) -> None:
        if self.graph is not None:
            driver.graph_exec_destroy(self.executable)
            driver.graph_destroy(self.graph)
            self.graph = self.executable = None

    def __enter__(self) -> CapturedGraph:
        return self

    def __exit__(self, *exc) -> None:
        self.destroy()


def check_routing(
    data: DeviceMoe, problem, routing, tol: float, out_dtype: str = "float16", alpha=None
) -> dict:
    """Every expert's rows of C (``out_dtype``) against ``problem.reference`` (float64,
    times ``alpha[e]`` where given); every other row of C and the guard after it must
    still hold the poison (:meth:`DeviceMoe.load`).

    ``relative_error`` is the worst expert's (NaN wins); ``stray_rows`` counts rows
    outside the routed ranges that were written; ``ok`` needs every expert finite and
    within ``tol`` and no stray row.
    """
    raw = data.c_raw()
    written = np.zeros(raw.shape[0], dtype=bool)
    worst, worst_expert, max_abs, finite = 0.0, None, 0.0, True
    for e, (start, stop) in enumerate(routing.row_ranges):
        if stop <= start:
            continue
        written[start:stop] = True
        out = decode_output(raw[start:stop], out_dtype)
        ref = problem.reference(routing, e)
        if alpha is not None:
            ref = ref * float(alpha[e])
        error = relative_error(out, ref)
        if not np.isfinite(out).all():
            finite = False
        else:
            max_abs = max(max_abs, float(np.max(np.abs(out - ref))))
        if worst_expert is None or (not math.isnan(worst) and not error <= worst):
            worst, worst_expert = error, e
    stray = int((raw[~written] != NAN_F16).any(axis=1).sum())
    return {
        "relative_error": worst,
        "worst_expert": worst_expert,
        "max_abs_error": max_abs if finite else None,
        "finite": finite,
        "stray_rows": stray,
        "ok": finite and worst <= tol and stray == 0,
    }
