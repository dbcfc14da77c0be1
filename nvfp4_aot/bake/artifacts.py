"""Bake variants into an artifacts directory, atomically, and compare two bakes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from .. import __version__
from ..errors import CaptureError
from ..kernels import ARCH_COMPUTE_CAPABILITY, family_named
from ..manifest import (
    MANIFEST_NAME,
    SCHEMA_VERSION,
    Epilogue,
    Manifest,
    Variant,
    read_manifest,
)
from .capture import ExportedKernel, capture_launch

# The group search reads the CTA prefix with int32 indices and every group costs a
# row in three device tables staged per launch; beyond this the runtime splits a
# list into several launches instead of baking ever larger variants.
MAX_BAKED_GROUPS = 1024


@dataclass(frozen=True)
class BakedVariant:
    variant: Variant
    cubin: bytes
    compile_seconds: float


def dsl_version() -> str:
    try:
        return metadata.version("nvidia-cutlass-dsl")
    except metadata.PackageNotFoundError as exc:
        raise CaptureError(
            "nvidia-cutlass-dsl is not installed; install the build extra: "
            "pip install -e '.[build]'"
        ) from exc


def variant_name(family: str, arch: str, num_groups: int, epilogue: Epilogue | None) -> str:
    """``family.arch.gG`` plus the epilogue's suffix (none for FP16 without alpha)."""
    return f"{family}.{arch}.g{num_groups}{epilogue.suffix if epilogue else ''}"


def variant_key(variant: Variant) -> tuple[str, str, int, Epilogue | None]:
    """What :func:`compile_variant` takes to rebuild ``variant``: family, arch, group
    count and epilogue (None for a family without one)."""
    epilogue = variant.epilogue if family_named(variant.family).epilogues else None
    return (variant.family, variant.arch, variant.num_groups, epilogue)


@dataclass(frozen=True)
class CompiledVariant:
    """A variant compiled by the DSL: the exported host object, cubin and PTX."""

    family: str
    arch: str
    num_groups: int
    epilogue: Epilogue | None  # None: a kernel without one (the routing setup)
    exported: ExportedKernel
    tile_mnk: tuple[int, int, int]
    compile_seconds: float

    @property
    def name(self) -> str:
        return variant_name(self.family, self.arch, self.num_groups, self.epilogue)


def compile_variant(
    family_name: str, arch: str, num_groups: int, epilogue: Epilogue | None, workdir: Path
) -> CompiledVariant:
    """Compile one variant in a child process (the DSL reads its target from the environment)."""
    family = family_named(family_name)
    if arch not in family.archs:  # the registry is the one declaration of a family's archs
        raise CaptureError(f"kernel family {family.name} does not serve {arch} ({family.archs})")
    if (epilogue is None) != (not family.epilogues) or (
        epilogue is not None and epilogue not in family.epilogues
    ):
        raise CaptureError(f"kernel family {family.name} has no epilogue {epilogue}")
    name = variant_name(family.name, arch, num_groups, epilogue)
    prefix = "nvfp4_" + name.replace(".", "_")
    out = workdir / prefix
    epilogue_args = [epilogue.out_dtype, str(int(epilogue.alpha))] if epilogue else []
    run = subprocess.run(
        [sys.executable, "-m", "nvfp4_aot.bake.compile_one", family.target, arch,
         str(num_groups), str(out), prefix, *epilogue_args],
        capture_output=True, text=True,
    )  # fmt: skip
    if run.returncode != 0:
        tail = "\n".join((run.stderr or run.stdout).strip().splitlines()[-25:])
        raise CaptureError(f"compiling {name} failed:\n{tail}")
    result = json.loads((out / "result.json").read_text())
    cubins = sorted((out / "dump").glob("*.cubin"))
    ptxs = sorted((out / "dump").glob("*.ptx"))
    if len(cubins) != 1 or len(ptxs) != 1:
        raise CaptureError(
            f"expected one cubin and one PTX from the compile, found {cubins} {ptxs}"
        )
    exported = ExportedKernel(
        object_file=out / "export" / f"{prefix}.o",
        header=out / "export" / f"{prefix}.h",
        cubin=cubins[0],
        ptx=ptxs[0],
        prefix=prefix,
    )
    return CompiledVariant(
        family.name,
        arch,
        num_groups,
        epilogue,
        exported,
        tuple(result["tile_mnk"]),
        result["compile_seconds"],
    )


def describe_variant(compiled: CompiledVariant, workdir: Path, seed: int = 0) -> Variant:
    """Capture the launch ABI of a compiled variant and describe it for the manifest."""
    family = family_named(compiled.family)
    epilogue = compiled.epilogue or Epilogue()
    return capture_launch(
        compiled.exported,
        workdir,
        seed=seed,
        name=compiled.name,
        family=family.name,
        arch=compiled.arch,
        compute_capability=ARCH_COMPUTE_CAPABILITY[compiled.arch],
        num_groups=compiled.num_groups,
        tile_mnk=compiled.tile_mnk,
        cubin=f"{compiled.name}.cubin",
        workspace=family.workspace,
        role=family.role,
        blocks_per_sm=family.blocks_per_sm,
        out_dtype=epilogue.out_dtype,
        alpha=epilogue.alpha,
    )


def bake_variant(
    family_name: str, arch: str, num_groups: int, epilogue: Epilogue | None, workdir: Path
) -> BakedVariant:
    """Compile, capture and describe one variant (epilogue None: a family without one)."""
    return bake_compiled(compile_variant(family_name, arch, num_groups, epilogue, workdir))


def bake_compiled(compiled: CompiledVariant) -> BakedVariant:
    """Capture and describe a compiled variant."""
    variant = describe_variant(compiled, compiled.exported.object_file.parent.parent)
    return BakedVariant(variant, compiled.exported.cubin.read_bytes(), compiled.compile_seconds)


def write_artifacts(out_dir: Path, baked: list[BakedVariant]) -> Manifest:
    """Write cubins then the manifest into ``out_dir``, each via a temporary file + rename.

    The manifest goes last: a reader that finds it finds every cubin it names. Cubins of
    earlier bakes that the new manifest does not name are removed after it is in place.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    manifest = Manifest(
        schema_version=SCHEMA_VERSION,
        package_version=__version__,
        dsl_version=dsl_version(),
        variants=tuple(b.variant for b in baked),
    )
    for b in baked:
        _atomic_write(out_dir / b.variant.cubin, b.cubin)
    _atomic_write(out_dir / MANIFEST_NAME, manifest.to_json().encode())
    named = {b.variant.cubin for b in baked}
    for stale in out_dir.glob("*.cubin"):
        if stale.name not in named:
            stale.unlink()
    return manifest


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; artifacts are meant to be shared
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def compare_artifacts(expected_dir: Path, actual_dir: Path) -> list[str]:
    """Every difference between two artifact directories, as readable lines."""
    expected = read_manifest(expected_dir)
    actual = read_manifest(actual_dir)
    problems = []
    for field in ("schema_version", "package_version", "dsl_version"):
        if getattr(expected, field) != getattr(actual, field):
            problems.append(
                f"{field}: committed {getattr(expected, field)!r}, rebuilt {getattr(actual, field)!r}"
            )
    old = {v.name: v for v in expected.variants}
    new = {v.name: v for v in actual.variants}
    for name in sorted(old.keys() - new.keys()):
        problems.append(f"{name}: committed but not rebuilt")
    for name in sorted(new.keys() - old.keys()):
        problems.append(f"{name}: rebuilt but not committed")
    for name in sorted(old.keys() & new.keys()):
        a, b = old[name], new[name]
        for field in a.__dataclass_fields__:
            if getattr(a, field) != getattr(b, field):
                problems.append(
                    f"{name}: {field} differs (committed {_short(getattr(a, field))}, rebuilt {_short(getattr(b, field))})"
                )
        committed = expected_dir / a.cubin
        if committed.exists() and committed.read_bytes() != (actual_dir / b.cubin).read_bytes():
            problems.append(f"{name}: cubin file {a.cubin} differs")
        elif not committed.exists():
            problems.append(f"{name}: cubin file {a.cubin} is missing")
    return problems


def _short(value) -> str:
    text = repr(value)
    return text if len(text) < 80 else text[:77] + "..."
