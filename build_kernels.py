#!/usr/bin/env python3
"""Bake the NVFP4 grouped GEMM kernels: compile, capture the launch ABI, write artifacts/.

Needs the build extra (nvidia-cutlass-dsl) and gcc; no GPU. Examples:

    python build_kernels.py                    # every arch and group count into artifacts/
    python build_kernels.py --arch sm_90a --groups 8
    python build_kernels.py --check            # rebuild into a temp dir, compare with artifacts/
"""

from __future__ import annotations

import contextlib
import importlib.util
import shutil
import sys
import tempfile
import time
from pathlib import Path

import click

from nvfp4_aot.bake.artifacts import (
    MAX_BAKED_GROUPS,
    bake_variant,
    compare_artifacts,
    variant_key,
    write_artifacts,
)
from nvfp4_aot.errors import Nvfp4Error
from nvfp4_aot.kernels import FAMILIES, families_for_arch
from nvfp4_aot.manifest import read_manifest

DEFAULT_ARCHS = tuple(dict.fromkeys(arch for family in FAMILIES for arch in family.archs))
DEFAULT_GROUPS = (8, 120)
DEFAULT_OUT = Path(__file__).resolve().parent / "artifacts"


def _check_arch(_ctx, _param, values):
    for arch in values:
        try:
            families_for_arch(arch)
        except ValueError as exc:
            raise click.BadParameter(str(exc)) from exc
    return tuple(dict.fromkeys(values))


def _check_groups(_ctx, _param, values):
    for g in values:
        if not 1 <= g <= MAX_BAKED_GROUPS:
            raise click.BadParameter(
                f"group count {g} is outside 1..{MAX_BAKED_GROUPS}; the runtime splits longer "
                "lists into several launches"
            )
    return tuple(sorted(set(values)))


def _require_dsl() -> None:
    if importlib.util.find_spec("cutlass") is None:
        raise click.ClickException(
            "the CuTe DSL (nvidia-cutlass-dsl) is not installed; install the build extra: "
            "pip install -e '.[build]'"
        )
    if shutil.which("gcc") is None:
        raise click.ClickException("gcc is needed to capture the launch ABI; install gcc")


def _bake(combos, workdir: Path, quiet: bool):
    """Bake every (family, arch, group count, epilogue or None) of ``combos``."""
    baked = []
    with click.progressbar(
        combos,
        label="baking",
        item_show_func=lambda c: c and f"{c[0]} {c[1]} G={c[2]} {c[3] or ''}",
        file=sys.stderr if not quiet else open("/dev/null", "w"),
    ) as bar:
        for family, arch, g, epilogue in bar:
            baked.append(bake_variant(family, arch, g, epilogue, workdir))
    return baked


def _summary(baked) -> str:
    rows = [("variant", "compile s", "cubin bytes", "regs", "dyn smem", "block", "params")]
    for b in baked:
        v = b.variant
        rows.append(
            (v.name, f"{b.compile_seconds:.2f}", str(v.cubin_bytes), str(v.registers),
             str(v.dynamic_smem_bytes), "x".join(map(str, v.block)), str(len(v.params)))
        )  # fmt: skip
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--arch",
    "archs",
    multiple=True,
    default=DEFAULT_ARCHS,
    show_default=True,
    callback=_check_arch,
    help="Target architecture (repeatable).",
)
@click.option(
    "--groups",
    "groups",
    multiple=True,
    type=int,
    default=DEFAULT_GROUPS,
    show_default=True,
    callback=_check_groups,
    help="Group count to bake (repeatable).",
)
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    default=DEFAULT_OUT,
    show_default=True,
    help="Artifacts directory.",
)
@click.option(
    "--check",
    is_flag=True,
    help="Rebuild what --out holds into a temporary directory and compare; exit 1 on any difference.",
)
@click.option("--quiet", is_flag=True, help="No progress bar.")
def main(archs, groups, out: Path, check: bool, quiet: bool):
    """Compile the kernels with the CuTe DSL and write cubins + manifest.json."""
    _require_dsl()
    started = time.perf_counter()
    try:
        if check:
            combos = [variant_key(v) for v in read_manifest(out).variants]
        else:
            combos = [
                (family.name, arch, g, epilogue)
                for arch in archs
                for family in families_for_arch(arch)
                for g in family.groups or groups
                for epilogue in family.epilogues or (None,)
            ]
        if not check:
            _check_writable(out)  # before minutes of compiling, not after
        with tempfile.TemporaryDirectory(prefix="nvfp4-bake-") as tmp:
            baked = _bake(combos, Path(tmp) / "work", quiet)
            if check:
                write_artifacts(Path(tmp) / "rebuilt", baked)
                problems = compare_artifacts(out, Path(tmp) / "rebuilt")
                click.echo(_summary(baked))
                if problems:
                    click.echo(
                        f"{len(problems)} difference(s) between {out} and a fresh build:", err=True
                    )
                    for line in problems:
                        click.echo(f"  {line}", err=True)
                    sys.exit(1)
                click.echo(
                    f"--check: a fresh build reproduces {out} exactly ({len(baked)} variants)"
                )
                return
            write_artifacts(out, baked)
    except Nvfp4Error as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(_summary(baked))
    click.echo(f"wrote {len(baked)} variants to {out} in {time.perf_counter() - started:.1f} s")


def _check_writable(out: Path) -> None:
    """Refuse an output directory that cannot be created or written; leave nothing behind."""
    existing = out
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out, prefix=".write-test-"):
            pass
    except OSError as exc:
        raise click.ClickException(
            f"cannot write to the output directory {out}: {exc.strerror}"
        ) from exc
    finally:
        created = out
        while created != existing:  # the directories made here, innermost first
            with contextlib.suppress(OSError):
                created.rmdir()
            created = created.parent


if __name__ == "__main__":
    main()
