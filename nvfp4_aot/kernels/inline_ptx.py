"""Inline PTX from CuTe DSL kernels: operands as MLIR values and ``llvm.inline_asm`` with
32-bit results, shared by every kernel family that writes PTX by hand."""

import cutlass
from cutlass._mlir.dialects import llvm


def ir_i32(v, loc, ip):
    """``v`` (Python or DSL integer) as an i32 MLIR value, for inline-PTX operands."""
    return cutlass.Int32(v).ir_value(loc=loc, ip=ip)


def ir_i64(v, loc, ip):
    """``v`` (Python or DSL integer) as an i64 MLIR value (addresses)."""
    return cutlass.Int64(v).ir_value(loc=loc, ip=ip)


def _inline_asm(result_type, ptx, constraints, operands, has_side_effects, loc, ip):
    return llvm.inline_asm(
        result_type,
        operands,
        ptx,
        constraints,
        has_side_effects=has_side_effects,
        is_align_stack=False,
        asm_dialect=llvm.AsmDialect.AD_ATT,
        loc=loc,
        ip=ip,
    )


def asm_i32s(n, ptx, constraints, operands, has_side_effects, loc, ip):
    """Inline PTX with ``n`` 32-bit results, returned as a list of Int32."""
    struct = llvm.StructType.get_literal([cutlass.Int32.mlir_type] * n)
    res = _inline_asm(struct, ptx, constraints, operands, has_side_effects, loc, ip)
    return [
        cutlass.Int32(llvm.extractvalue(cutlass.Int32.mlir_type, res, [i], loc=loc, ip=ip))
        for i in range(n)
    ]


def asm(ptx, constraints, operands, loc, ip):
    """Inline PTX without results, ordered with every other memory access."""
    clobbers = constraints + ",~{memory}" if constraints else "~{memory}"
    _inline_asm(None, ptx, clobbers, operands, True, loc, ip)


def asm_i32(ptx, constraints, operands, loc, ip):
    """Inline PTX with one 32-bit result, never reordered or dropped."""
    return cutlass.Int32(
        _inline_asm(cutlass.Int32.mlir_type, ptx, constraints, operands, True, loc, ip)
    )
