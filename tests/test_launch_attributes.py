"""The committed variants' launch attributes against what their kernels do.

A grid launched with programmatic stream serialization (PDL) may start while the kernel
before it still runs; it is only correct if the kernel waits in ``griddepcontrol.wait``
before it touches what that kernel writes. The attribute is captured from the DSL's own
host code, so a kernel that asks for PDL without waiting would bake silently.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import nvfp4_aot.kernels
from nvfp4_aot.driver import LAUNCH_ATTR_PROGRAMMATIC_STREAM_SERIALIZATION
from nvfp4_aot.kernels import family_named
from nvfp4_aot.manifest import read_manifest
from nvfp4_aot.paths import artifacts_dir

KERNELS = Path(nvfp4_aot.kernels.__file__).parent


def kernel_sources(module: str) -> str:
    """The family's module and the kernel modules it imports from, and they from
    (``from .x import``)."""
    names, seen = [module.rsplit(".", 1)[1]], {}
    while names:
        name = names.pop()
        if name in seen:
            continue
        seen[name] = text = (KERNELS / (name + ".py")).read_text()
        names += [
            node.module
            for node in ast.walk(ast.parse(text))
            if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module
        ]
    return "\n".join(seen.values())


def pdl(variant) -> int:
    values = [
        a.values[0]
        for a in variant.launch_attributes
        if a.id == LAUNCH_ATTR_PROGRAMMATIC_STREAM_SERIALIZATION
    ]
    return values[0] if values else 0


VARIANTS = read_manifest(artifacts_dir()).variants


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: v.name)
def test_pdl_only_where_the_kernel_waits(variant):
    if pdl(variant):
        sources = kernel_sources(family_named(variant.family).module)
        assert "griddepcontrol_wait()" in sources, (
            f"{variant.name} is launched with programmatic stream serialization but its "
            "kernel never waits in griddepcontrol.wait"
        )


def test_sm90_gemms_overlap_the_routing_kernel():
    """The per-CTA sm_90a families start under the routing kernel; the sm_100a GEMM (the
    seed's cubin, which has no wait) does not."""
    by_family = {}
    for variant in VARIANTS:
        by_family.setdefault(variant.family, set()).add(pdl(variant))
    assert by_family["sm90_nvfp4_grouped_gemm"] == {1}
    assert by_family["sm90_nvfp4_grouped_gemm_decode"] == {1}
    assert by_family["sm90_nvfp4_grouped_gemm_decode32"] == {1}
    assert by_family["sm100_nvfp4_grouped_gemm"] == {0}
    assert "griddepcontrol_launch_dependents()" in kernel_sources(
        family_named("moe_routing").module
    )


def test_the_quantizer_overlaps_the_kernels_around_it():
    """Every arch's quantizer may start under the kernel before it (it waits before its
    input, global scale, routing and stores) and lets the kernel after it start at once."""
    quantizers = [v for v in VARIANTS if v.family == "nvfp4_quantize"]
    assert {v.arch for v in quantizers} == {"sm_90a", "sm_100a", "sm_103a"}
    assert {pdl(v) for v in quantizers} == {1}
    assert "griddepcontrol_launch_dependents()" in kernel_sources(
        family_named("nvfp4_quantize").module
    )
