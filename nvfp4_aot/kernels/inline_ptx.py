"""Inline PTX from CuTe DSL kernels: operands as MLIR values and ``llvm.inline_asm`` with
32-bit results, shared by every kernel family that writes PTX by hand."""

import cutlass
from cutlass._mlir.dialects import llvm
from cutlass.cutlass_dsl import dsl_user_op


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


# shared memory ---------------------------------------------------------------------------


@dsl_user_op
def lds_v4(addr: cutlass.Int32, *, loc=None, ip=None):
    """16-byte shared load -> 4 Int32."""
    return asm_i32s(
        4,
        "ld.shared.v4.b32 {$0, $1, $2, $3}, [$4];",
        "=r,=r,=r,=r,r,~{memory}",
        [ir_i32(addr, loc, ip)],
        True,
        loc,
        ip,
    )


@dsl_user_op
def lds_u32(addr: cutlass.Int32, *, loc=None, ip=None) -> cutlass.Int32:
    """4-byte shared load."""
    return asm_i32("ld.shared.b32 $0, [$1];", "=r,r,~{memory}", [ir_i32(addr, loc, ip)], loc, ip)


@dsl_user_op
def lds_u8(addr: cutlass.Int32, *, loc=None, ip=None) -> cutlass.Int32:
    """1-byte shared load, zero extended."""
    return asm_i32("ld.shared.u8 $0, [$1];", "=r,r,~{memory}", [ir_i32(addr, loc, ip)], loc, ip)


@dsl_user_op
def lds_u16(addr: cutlass.Int32, *, loc=None, ip=None) -> cutlass.Int32:
    """2-byte shared load, zero extended."""
    return asm_i32("ld.shared.u16 $0, [$1];", "=r,r,~{memory}", [ir_i32(addr, loc, ip)], loc, ip)


@dsl_user_op
def sts_b32(addr: cutlass.Int32, val: cutlass.Int32, *, loc=None, ip=None) -> None:
    """4-byte shared store."""
    asm("st.shared.b32 [$0], $1;", "r,r", [ir_i32(addr, loc, ip), ir_i32(val, loc, ip)], loc, ip)


# mbarriers -------------------------------------------------------------------------------

# try_wait's last operand is a suspend-time hint; without it a waiting thread may be
# suspended for a system-dependent time before it retries, with 0 it retries at once.
_MBAR_WAIT_PTX = """{{
.reg .pred p;
WAIT:
mbarrier.try_wait.parity.shared::cta.b64 p, [$0], $1{hint};
@!p bra.uni WAIT;
}}"""


@dsl_user_op
def mbar_wait(addr: cutlass.Int32, parity: cutlass.Int32, *, suspend=True, loc=None, ip=None):
    """Wait until the mbarrier at shared ``addr`` has completed the phase of ``parity``;
    ``suspend=False`` retries without being suspended in between."""
    ptx = _MBAR_WAIT_PTX.format(hint="" if suspend else ", 0")
    asm(ptx, "r,r", [ir_i32(addr, loc, ip), ir_i32(parity, loc, ip)], loc, ip)
