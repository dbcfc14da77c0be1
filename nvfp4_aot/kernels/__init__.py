"""Kernel families: CuTe DSL sources, imported only by the build step.

This ``__init__`` imports nothing from the DSL: it only names the families so that the
build and the runtime agree on which architectures each one serves.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KernelFamily:
    name: str
    module: str  # imported in a child process by nvfp4_aot.bake.compile_one
    archs: tuple[str, ...]


FAMILIES = (
    KernelFamily(
        "sm100_nvfp4_grouped_gemm", "nvfp4_aot.kernels.sm100_grouped_gemm", ("sm_100a", "sm_103a")
    ),
    KernelFamily("sm90_nvfp4_grouped_gemm", "nvfp4_aot.kernels.sm90_grouped_gemm", ("sm_90a",)),
)

# Compute capability (major, minor) each arch's cubin runs on: 'a' targets run only there.
ARCH_COMPUTE_CAPABILITY = {"sm_90a": (9, 0), "sm_100a": (10, 0), "sm_103a": (10, 3)}


def family_for_arch(arch: str) -> KernelFamily:
    """The kernel family that serves ``arch``; ValueError naming the known archs otherwise."""
    for family in FAMILIES:
        if arch in family.archs:
            return family
    known = ", ".join(f"{a} ({f.name})" for f in FAMILIES for a in f.archs)
    raise ValueError(f"no kernel family supports arch {arch!r}; known: {known}")
