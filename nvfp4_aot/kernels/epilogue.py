"""What the GEMM families share in their epilogues: the output dtype and alpha.

A variant is compiled for one output dtype and with or without a per-group alpha. With
alpha, the host launcher takes one more input, ``alpha_pointers``: int64[G], group g's
entry the device address of its FP32 alpha, read by the kernel when its tiles reach the
group (so a CUDA graph replay sees the values the array holds then). Without alpha the
epilogue is the original one, instruction for instruction.
"""

import cutlass
import cutlass.cute as cute

from ..manifest import OUT_DTYPES

# The DSL type of each output dtype the manifest names.
C_DTYPES = {"float16": cutlass.Float16, "bfloat16": cutlass.BFloat16}
assert tuple(C_DTYPES) == OUT_DTYPES


def alpha_table(ptr_of_alpha_ptrs, num_groups: int):
    """The alpha pointer table, or None for a variant without alpha (host side)."""
    if ptr_of_alpha_ptrs is None:
        return None
    return cute.make_tensor(ptr_of_alpha_ptrs, cute.make_layout((num_groups,), stride=(1,)))


@cute.jit
def load_alpha(alpha_ptrs: cute.Tensor, group_idx: cutlass.Int32) -> cutlass.Float32:
    """Group ``group_idx``'s FP32 alpha, read through its pointer."""
    pointer = cute.make_ptr(
        cutlass.Float32, alpha_ptrs[group_idx], cute.AddressSpace.gmem, assumed_align=4
    )
    return cute.make_tensor(pointer, cute.make_layout((1,)))[0]


def output_scale(alpha_ptrs, group_idx, rescale=1.0):
    """What the epilogue multiplies group ``group_idx``'s accumulator by: ``rescale``
    (a Python constant, so a variant without alpha keeps its code), times its alpha."""
    if alpha_ptrs is None:
        return rescale
    return load_alpha(alpha_ptrs, group_idx) * rescale
