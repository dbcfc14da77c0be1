"""Operands of a grouped GEMM in device memory, for the CLI, benchmarks and GPU checks.

One allocation holds A, B, C, SFA and SFB of every group, each at a 256-byte aligned
offset and sized as the kernels read them (:func:`nvfp4_aot.validation.operand_bytes`);
``columns`` lists the device pointers in :meth:`GroupedGemmPlan.run` order.
"""

from __future__ import annotations

import numpy as np

from . import driver, validation
from .intmath import round_up

ALIGN = 256  # cuMemAlloc alignment, kept for every operand inside the allocation
NAN_F16 = 0xFFFF  # poison for C: an element the kernel leaves unwritten reads as NaN


class DeviceOperands:
    """A, B, C, SFA, SFB of every group of ``sizes`` in one device allocation.

    ``host_arrays`` holds per group (A, B, SFA blocked, SFB blocked) numpy arrays to
    upload; without it the operands are zero-filled (enough for timing). Allocate with
    the device's context current (:func:`nvfp4_aot.driver.activate`).
    """

    def __init__(self, sizes, host_arrays=None):
        self.sizes = [tuple(s[:3]) for s in sizes]
        layout, offset = [], 0
        for m, n, k in self.sizes:
            nbytes = validation.operand_bytes(m, n, k)
            entry = []
            for name in validation.OPERAND_FIELDS:
                entry.append(offset)
                offset += round_up(nbytes[name], ALIGN)
            layout.append(entry)
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
                driver.memcpy_htod(self.base, host.ctypes.data, offset)
        except BaseException:
            self.free()
            raise
        self.columns = tuple([self.base + entry[f] for entry in layout] for f in range(5))

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
        """Group ``g``'s C as float16."""
        return self.c_raw(g).view(np.float16)

    def free(self) -> None:
        if self.base:
            driver.mem_free(self.base)
            self.base = 0
