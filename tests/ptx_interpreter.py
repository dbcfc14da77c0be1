"""A numpy interpreter for the inline PTX the kernels are built from (vectorised over
many inputs), so that the PTX text that is baked (its registers, constants, prmt
selectors, word order) is checked against the reference on the CPU: the quantizer's
block math (tests/test_quantizer.py) and the sm_90a GEMMs' FP4 decode
(tests/test_sm90_decode.py). Semantics follow the PTX ISA."""

from __future__ import annotations

import numpy as np


def fma32(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """float32 fma, rounded once: a * b is exact in float64 (48 bits), the float64 sum s
    of it and c carries its rounding error e exactly (TwoSum), and rounding s to float32
    is the fma's rounding unless s fell on a float32 midpoint, where e decides."""
    with np.errstate(all="ignore"):
        product = a.astype(np.float64) * b.astype(np.float64)
        s = product + c.astype(np.float64)
        bv = s - product
        e = (product - (s - bv)) + (c.astype(np.float64) - bv)
        r = s.astype(np.float32)
        low = np.where(r.astype(np.float64) > s, np.nextafter(r, np.float32(-np.inf)), r)
        high = np.nextafter(low, np.float32(np.inf))
        midpoint = (low.astype(np.float64) + high.astype(np.float64)) / 2 == s
        fix = np.isfinite(s) & midpoint & (e != 0)
        return np.where(fix, np.where(e > 0, high, low), r).astype(np.float32)


class PtxBlock:
    """Runs one inline-PTX string on arrays: ``run({"$1": ...})`` gives every register
    after the last line. The E4M3 conversions are the reference's rounding (what the
    ISA states for cvt.rn.satfinite)."""

    def __init__(self, ptx: str):
        self.lines = [
            line.strip().rstrip(";")
            for line in ptx.splitlines()
            if line.strip() and line.strip()[0] not in "{}."
        ]

    def run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        self.r = {name: value.astype(np.uint64) for name, value in inputs.items()}
        for line in self.lines:
            op, rest = line.split(None, 1)
            args = [a.strip() for a in _split_args(rest)]
            getattr(self, "op_" + op.replace(".", "_"))(*args)
        return self.r

    # operands
    def get(self, a: str) -> np.ndarray:
        if a in self.r:
            return self.r[a]
        if a.startswith("0f"):
            return np.uint64(int(a[2:], 16))
        return np.uint64(int(a, 0) % 2**32)

    def put(self, d: str, value) -> None:
        self.r[d] = np.asarray(value).astype(np.uint64) & np.uint64(0xFFFFFFFF)

    def f32(self, a: str) -> np.ndarray:
        return np.asarray(self.get(a)).astype(np.uint32).view(np.float32)

    def put_f32(self, d: str, value) -> None:
        self.put(d, np.asarray(value, np.float32).view(np.uint32))

    # integer and bit operations
    def op_and_b32(self, d, a, b):
        self.put(d, self.get(a) & self.get(b))

    def op_or_b32(self, d, a, b):
        self.put(d, self.get(a) | self.get(b))

    def op_shl_b32(self, d, a, b):
        self.put(d, self.get(a) << self.get(b))

    def op_shr_b32(self, d, a, b):
        self.put(d, self.get(a) >> self.get(b))

    def op_mov_b32(self, d, a):
        if a.startswith("{"):  # pack halves
            lo, hi = (x.strip() for x in a.strip("{}").split(","))
            self.put(d, (self.get(lo) & np.uint64(0xFFFF)) | (self.get(hi) << np.uint64(16)))
        elif d.startswith("{"):  # unpack halves
            lo, hi = (x.strip() for x in d.strip("{}").split(","))
            value = self.get(a)
            self.put(lo, value & np.uint64(0xFFFF))
            self.put(hi, value >> np.uint64(16))
        else:
            self.put(d, np.broadcast_to(self.get(a), self._shape()))

    def op_selp_b32(self, d, a, b, p):
        self.put(d, np.where(self.r[p] != 0, self.get(a), self.get(b)))

    def op_lop3_b32(self, d, a, b, c, lut):
        # bit i of the result: bit (a_i b_i c_i as a 3-bit number) of the table
        va, vb, vc, table = self.get(a), self.get(b), self.get(c), int(lut, 0)
        ones = np.uint64(0xFFFFFFFF)
        out = np.uint64(0)
        for index in range(8):
            if table >> index & 1:
                term = va if index & 4 else va ^ ones
                term = term & (vb if index & 2 else vb ^ ones)
                out = out | (term & (vc if index & 1 else vc ^ ones))
        self.put(d, out)

    def op_mul_hi_u32(self, d, a, b):
        self.put(d, (self.get(a) * self.get(b)) >> np.uint64(32))  # < 2^64: exact

    def op_mad_hi_u32(self, d, a, b, c):
        self.put(d, ((self.get(a) * self.get(b)) >> np.uint64(32)) + self.get(c))

    def op_mad_lo_u32(self, d, a, b, c):
        self.put(d, self.get(a) * self.get(b) + self.get(c))

    def op_sub_u32(self, d, a, b):
        self.put(d, self.get(a) + np.uint64(2**32) - self.get(b))

    def op_prmt_b32(self, d, a, b, selector):
        data = [(self.get(a) >> np.uint64(8 * i)) & np.uint64(0xFF) for i in range(4)]
        data += [(self.get(b) >> np.uint64(8 * i)) & np.uint64(0xFF) for i in range(4)]
        sel = int(selector, 0)
        out = sum(data[(sel >> (4 * k)) & 7] << np.uint64(8 * k) for k in range(4))
        self.put(d, out)

    def op_cvt_u32_u16(self, d, a):
        self.put(d, self.get(a) & np.uint64(0xFFFF))

    def op_cvt_u16_u32(self, d, a):
        self.put(d, self.get(a) & np.uint64(0xFFFF))

    # packed 16-bit maxima (NaN-propagating: the canonical NaN 0x7FFF)
    def _max_halves(self, d, va, vb, kind):
        """d <- the NaN-propagating max of each 16-bit half of the values va and vb."""
        out = np.uint64(0)
        for shift in (0, 16):
            ha = ((va >> np.uint64(shift)) & np.uint64(0xFFFF)).astype(np.uint16)
            hb = ((vb >> np.uint64(shift)) & np.uint64(0xFFFF)).astype(np.uint16)
            if kind == "bf16":
                fa = (ha.astype(np.uint32) << 16).view(np.float32)
                fb = (hb.astype(np.uint32) << 16).view(np.float32)
            else:
                fa, fb = ha.view(np.float16), hb.view(np.float16)
            pick = np.where(fa >= fb, ha, hb)
            pick = np.where(np.isnan(fa) | np.isnan(fb), np.uint16(0x7FFF), pick)
            out = out | (pick.astype(np.uint64) << np.uint64(shift))
        self.put(d, out)

    def op_max_NaN_bf16x2(self, d, a, b):
        self._max_halves(d, self.get(a), self.get(b), "bf16")

    def op_max_NaN_f16x2(self, d, a, b):
        self._max_halves(d, self.get(a), self.get(b), "f16")

    def _max_abs_xorsign(self, d, a, b, kind):
        # max(|a|, |b|) per half (NaN-propagating), its sign bit sign(a) xor sign(b)
        signs = (self.get(a) ^ self.get(b)) & np.uint64(0x80008000)
        magnitude = np.uint64(0x7FFF7FFF)
        self._max_halves(d, self.get(a) & magnitude, self.get(b) & magnitude, kind)
        self.put(d, self.r[d] | signs)

    def op_max_NaN_xorsign_abs_bf16x2(self, d, a, b):
        self._max_abs_xorsign(d, a, b, "bf16")

    def op_max_NaN_xorsign_abs_f16x2(self, d, a, b):
        self._max_abs_xorsign(d, a, b, "f16")

    def op_abs_f32(self, d, a):
        self.put(d, self.get(a) & np.uint64(0x7FFFFFFF))

    def op_neg_f32(self, d, a):
        self.put(d, self.get(a) ^ np.uint64(0x80000000))

    # float32
    def op_max_NaN_f32(self, d, a, b):
        x, y = self.f32(a), self.f32(b)
        self.put_f32(d, np.where(np.isnan(x) | np.isnan(y), np.float32(np.nan), np.maximum(x, y)))

    def op_mul_rn_f32(self, d, a, b):
        with np.errstate(all="ignore"):
            self.put_f32(d, self.f32(a) * self.f32(b))

    def op_div_rn_f32(self, d, a, b):
        with np.errstate(all="ignore"):
            self.put_f32(d, self.f32(a) / self.f32(b))

    def op_rcp_rn_f32(self, d, a):
        with np.errstate(all="ignore"):
            self.put_f32(d, np.float32(1) / self.f32(a))

    def op_add_rn_f32(self, d, a, b):
        with np.errstate(all="ignore"):
            self.put_f32(d, self.f32(a) + self.f32(b))

    def op_mul_rn_sat_f32(self, d, a, b):
        with np.errstate(all="ignore"):
            value = self.f32(a) * self.f32(b)
            self.put_f32(d, np.where(np.isnan(value), np.float32(0), np.clip(value, 0, 1)))

    def op_fma_rn_f32(self, d, a, b, c):
        self.put_f32(d, fma32(self.f32(a), self.f32(b), self.f32(c)))

    def op_fma_rn_sat_f32(self, d, a, b, c):
        value = fma32(self.f32(a), self.f32(b), self.f32(c))
        self.put_f32(d, np.where(np.isnan(value), np.float32(0), np.clip(value, 0, 1)))

    def op_setp_gt_f32(self, p, a, b):
        self.r[p] = (self.f32(a) > self.f32(b)).astype(np.uint64)

    def op_mul_rn_f16x2(self, d, a, b):
        # each half: the float32 product of two halves is exact, so one rounding to f16
        out = np.uint64(0)
        for shift in (np.uint64(0), np.uint64(16)):
            x = ((self.get(a) >> shift) & np.uint64(0xFFFF)).astype(np.uint16).view(np.float16)
            y = ((self.get(b) >> shift) & np.uint64(0xFFFF)).astype(np.uint16).view(np.float16)
            with np.errstate(all="ignore"):
                product = (x.astype(np.float32) * y.astype(np.float32)).astype(np.float16)
            out = out | (product.view(np.uint16).astype(np.uint64) << shift)
        self.put(d, out)

    # conversions
    def op_cvt_f32_f16(self, d, a):
        half = (self.get(a) & np.uint64(0xFFFF)).astype(np.uint16).view(np.float16)
        self.put_f32(d, half.astype(np.float32))

    def op_cvt_rn_satfinite_e4m3x2_f32(self, d, a, b):
        from nvfp4_aot.quantize import float_to_e4m3_rn_sat

        hi, lo = float_to_e4m3_rn_sat(self.f32(a)), float_to_e4m3_rn_sat(self.f32(b))
        self.put(d, (hi.astype(np.uint64) << np.uint64(8)) | lo.astype(np.uint64))

    def op_cvt_rn_f16x2_e4m3x2(self, d, a):
        from nvfp4_aot.layouts import E4M3_VALUES

        out = np.uint64(0)
        for shift in (0, 8):
            code = ((self.get(a) >> np.uint64(shift)) & np.uint64(0xFF)).astype(np.intp)
            half = E4M3_VALUES[code].astype(np.float16).view(np.uint16).astype(np.uint64)
            out = out | (half << np.uint64(2 * shift))
        self.put(d, out)

    def _shape(self):
        return next(iter(self.r.values())).shape


def _split_args(text: str) -> list[str]:
    """Operands separated by commas, a {a, b} group kept whole."""
    parts, depth, current = [], 0, ""
    for ch in text:
        depth += ch == "{"
        depth -= ch == "}"
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    return parts + [current]
