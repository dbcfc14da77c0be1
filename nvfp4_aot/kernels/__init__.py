"""Kernel families: CuTe DSL sources, imported only by the build step.

This ``__init__`` imports nothing from the DSL: it only names the families, what each
one does (its role: a grouped GEMM, a routed grouped GEMM that builds a MoE launch's
tables itself, the MoE routing setup that fills a grouped GEMM's tables on the device,
or the NVFP4 activation quantizer), the architectures each one
serves, the epilogues each GEMM is baked with and the workspace each one needs, so that
the build, the kernels and the runtime agree.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..manifest import (
    EPILOGUES,
    ROLE_GEMM,
    ROLE_QUANTIZE,
    ROLE_ROUTED_GEMM,
    ROLE_ROUTING,
    ROUTED_SUFFIX,
    Epilogue,
    Workspace,
)


@dataclass(frozen=True)
class KernelFamily:
    name: str
    module: str  # imported in a child process by nvfp4_aot.bake.compile_one
    archs: tuple[str, ...]
    workspace: Workspace = Workspace()
    role: str = ROLE_GEMM
    groups: tuple[int, ...] | None = None  # group counts to bake; None: the build's list
    # the epilogues each (arch, group count) is baked with; () for a kernel without one
    epilogues: tuple[Epilogue, ...] = EPILOGUES
    # CTAs per SM of a persistent grid: the kernel is compiled to fit this many (its
    # registers and shared memory), and launched with this many per SM
    blocks_per_sm: int = 1
    entry: str = "compile"  # the module's function that compiles a variant

    @property
    def target(self) -> str:
        """``module:function`` for nvfp4_aot.bake.compile_one."""
        return f"{self.module}:{self.entry}"


def _routed(family: KernelFamily) -> KernelFamily:
    """The routed twin of a per-CTA sm_90a GEMM family: the same kernel for MoE plans of up
    to 256 experts whose CTAs build the group tables from the device counts, so the
    routing kernel does not run before it (nvfp4_aot/kernels/routed_groups.py)."""
    return replace(
        family, name=family.name + ROUTED_SUFFIX, role=ROLE_ROUTED_GEMM, groups=(256,),
        entry="compile_routed",
    )  # fmt: skip


# 256 groups: a MoE plan of up to 256 experts is one GEMM launch (E = 128 or 256 in
# decode was two or three serial launches, the last ones mostly idle)
_SM90_GEMM = KernelFamily(
    "sm90_nvfp4_grouped_gemm",
    "nvfp4_aot.kernels.sm90_grouped_gemm",
    ("sm_90a",),
    groups=(8, 120, 256),
)
# The same kernel with 16-row activation tiles: few tokens per group (MoE decode);
# two CTAs per SM keep twice the warps decoding weights while the other CTA waits.
_SM90_DECODE = KernelFamily(
    "sm90_nvfp4_grouped_gemm_decode",
    "nvfp4_aot.kernels.sm90_grouped_gemm_decode",
    ("sm_90a",),
    groups=(8, 120, 256),
    blocks_per_sm=2,
)
# ... and with 32-row tiles: groups of 13-32 rows run one tile per N tile.
_SM90_DECODE32 = KernelFamily(
    "sm90_nvfp4_grouped_gemm_decode32",
    "nvfp4_aot.kernels.sm90_grouped_gemm_decode32",
    ("sm_90a",),
    groups=(8, 120, 256),
    blocks_per_sm=2,
)

FAMILIES = (
    KernelFamily(
        "sm100_nvfp4_grouped_gemm", "nvfp4_aot.kernels.sm100_grouped_gemm", ("sm_100a", "sm_103a")
    ),
    _SM90_GEMM,
    _SM90_DECODE,
    _SM90_DECODE32,
    *(_routed(f) for f in (_SM90_GEMM, _SM90_DECODE, _SM90_DECODE32)),
    # Decodes the activations once per launch into an FP16 scratch after the
    # tensormaps (m x ceil(k / 128) x 128 values per group); its grid-barrier
    # counter lives in an unused descriptor slot and must start zeroed.
    KernelFamily(
        "sm90_nvfp4_grouped_gemm_a16",
        "nvfp4_aot.kernels.sm90_grouped_gemm_a16",
        ("sm_90a",),
        Workspace(
            bytes_per_block=4 * 128,
            activation_bytes_per_element=2,
            activation_k_multiple=128,
            zero_once=True,
        ),
    ),
    # Turns device token counts into the GEMM tables just before a MoE launch; a plan
    # takes the variant for chunks of up to 120 or 256 experts (its GEMM variants' most).
    KernelFamily(
        "moe_routing",
        "nvfp4_aot.kernels.moe_routing",
        ("sm_90a", "sm_100a", "sm_103a"),
        role=ROLE_ROUTING,
        groups=(120, 256),
        epilogues=(),
    ),
    # BF16/FP16 activations -> packed FP4 + blocked E4M3 scales (plain, contiguous and
    # masked MoE forms); one variant, its "group count" 1 a placeholder of the bake's key.
    KernelFamily(
        "nvfp4_quantize",
        "nvfp4_aot.kernels.nvfp4_quantize",
        ("sm_90a", "sm_100a", "sm_103a"),
        role=ROLE_QUANTIZE,
        groups=(1,),
        epilogues=(),
        blocks_per_sm=2,  # each CTA's 64 KB of copy stages (+ 13 KB of tables)
    ),
)

# Compute capability (major, minor) each arch's cubin runs on: 'a' targets run only there.
ARCH_COMPUTE_CAPABILITY = {"sm_90a": (9, 0), "sm_100a": (10, 0), "sm_103a": (10, 3)}


def families_for_arch(arch: str) -> tuple[KernelFamily, ...]:
    """The kernel families that serve ``arch``; ValueError naming the known archs otherwise."""
    found = tuple(family for family in FAMILIES if arch in family.archs)
    if not found:
        known = ", ".join(f"{a} ({f.name})" for f in FAMILIES for a in f.archs)
        raise ValueError(f"no kernel family supports arch {arch!r}; known: {known}")
    return found


def family_named(name: str) -> KernelFamily:
    """The family called ``name``; ValueError naming the known families otherwise."""
    for family in FAMILIES:
        if family.name == name:
            return family
    raise ValueError(f"no kernel family {name!r}; known: {', '.join(f.name for f in FAMILIES)}")
