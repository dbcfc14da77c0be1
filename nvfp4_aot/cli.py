"""Command line: ``nvfp4-aot info | verify | bench | quantize`` (also ``python -m nvfp4_aot``).

* ``info``    the artifacts (versions, every baked variant, cubin checks) and this
              machine's GPUs with the variants each would run; works without a GPU.
* ``verify``  random problems on the GPU against the float64 reference; exit 1 on any
              mismatch.
* ``bench``   CUDA-event timing of the grouped GEMM: median and p10/p90 per case.
* ``quantize`` a .npy or .safetensors weight -> NVFP4 B / SFB / scale_2 files
              (:mod:`nvfp4_aot.weights`); no GPU.

Shapes come from ``--shapes FILE`` (JSON: ``{"tests": [...], "benchmarks": [...]}`` of
``{"m": [...], "n": [...], "k": [...]}`` cases, as in GPU MODE's task.yml, or a bare
list of such cases), ``--groups-json`` (one case per option) and ``--shape M,N,K``
(repeatable: one group each, together one case). Every subcommand takes ``--json``.

Or a MoE problem, routed on the GPU (:class:`~nvfp4_aot.moe.MoeGemmPlan`): ``--moe E,N,K``
(repeatable) with ``--layout contiguous|masked``, ``--tokens T`` (tokens per step) and
``--top-k`` (experts per token; the contiguous layout holds T * top-k rows, the masked
one max_m = T rows per expert), and the routings: ``--routing KIND`` (repeatable, of
:data:`nvfp4_aot.moe_data.ROUTING_KINDS`) and ``--routings N`` (how many, the kinds in
turn). ``verify`` captures one CUDA graph per plan and checks every routing eagerly and
by a replay; ``bench`` times graph replays (GPU) and eager runs (wall and host) per
routing. This module declares every option; the MoE cases, runs and reports are
:mod:`nvfp4_aot.cli_moe`'s (which builds on the output helpers here).
Errors of the package (:class:`~nvfp4_aot.errors.Nvfp4Error`) become one-line messages
with a non-zero exit, never tracebacks.
"""

from __future__ import annotations

import json
import statistics
import sys
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from pathlib import Path

import click
import numpy as np

from . import __version__, driver, loader, validation
from .device_data import DeviceOperands, random_alpha, scale_codes
from .errors import CudaError, Nvfp4Error, UnsupportedDeviceError
from .layouts import random_problem
from .manifest import OUT_DTYPES, ROLE_GEMM, Epilogue
from .moe_data import ROUTING_KINDS
from .moe_layout import LAYOUTS
from .reference import TOLERANCE, reference_gemm, relative_error

# Built-in cases when no shapes are given. Verify: one group, ragged groups (k not a
# multiple of the 256 K tile included) and 9 groups, which needs the G = 120 variant.
VERIFY_DEFAULT = (
    ("single", ((128, 256, 512),)),
    ("ragged-3", ((80, 384, 256), (128, 256, 512), (256, 128, 128))),
    ("groups-9", tuple((64 + 16 * g, 128, 256) for g in range(9))),
)
# Bench: GPU MODE nvfp4_group_gemm's benchmark shapes (public task.yml).
BENCH_DEFAULT = (
    ("gpumode-1", tuple((m, 4096, 7168) for m in (80, 176, 128, 72, 64, 248, 96, 160))),
    ("gpumode-2", tuple((m, 7168, 2048) for m in (40, 76, 168, 72, 164, 148, 196, 160))),
    ("gpumode-3", ((192, 3072, 4096), (320, 3072, 4096))),
    ("gpumode-4", ((128, 4096, 1536), (384, 4096, 1536))),
)


@dataclass(frozen=True)
class Case:
    """One grouped GEMM: a name and (m, n, k) per group."""

    name: str
    sizes: tuple[tuple[int, int, int], ...]


# errors -------------------------------------------------------------------------------


class _Group(click.Group):
    """Turns package errors into ``click.ClickException`` (message, exit status 1)."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except Nvfp4Error as exc:
            raise click.ClickException(str(exc)) from exc


def _require_device(device: int) -> None:
    """Fail cleanly unless the driver works and ``device`` exists."""
    try:
        count = driver.device_count()
    except ImportError as exc:
        raise click.ClickException(f"no CUDA device: cuda-python is not installed ({exc})") from exc
    except CudaError as exc:
        raise click.ClickException(f"no CUDA device: {exc}") from exc
    if count == 0:
        raise click.ClickException("no CUDA device: the driver reports no GPU")
    if device >= count:
        raise click.ClickException(
            f"--device {device} does not exist; this machine has {count} GPU(s) (0..{count - 1})"
        )


# shapes -------------------------------------------------------------------------------


class _Triple(click.ParamType):
    """Three integers ``"A,B,C"`` (or ``AxBxC``): --shape M,N,K and --moe E,N,K."""

    def __init__(self, name: str, hint: str, meaning: str = ""):
        self.name, self.hint, self.meaning = name, hint, meaning

    def parse(self, text: str) -> tuple[int, int, int]:
        """``text`` -> three integers; raises click.BadParameter naming the text."""
        parts = [p.strip() for p in text.replace("x", ",").split(",")]
        try:
            values = tuple(int(p) for p in parts)
        except ValueError:
            values = ()
        if len(values) != 3:
            raise click.BadParameter(
                f"expected {self.name} ({self.meaning}three integers), got {text!r}",
                param_hint=self.hint,
            )
        return values

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        try:
            return self.parse(value)
        except click.BadParameter as exc:
            self.fail(exc.message, param, ctx)


SHAPE = _Triple("M,N,K", "--shape")
MOE = _Triple("E,N,K", "--moe", "experts, n, k: ")
parse_shape = SHAPE.parse  # "M,N,K" -> (m, n, k)
parse_moe = MOE.parse  # "E,N,K" -> (experts, n, k)


def case_from_json(raw, where: str) -> Case:
    """A case from ``{"m": [...], "n": [...], "k": [...]}`` or ``[[m, n, k], ...]``."""
    name = where
    if isinstance(raw, dict):
        name = str(raw.get("name", where))
        try:
            columns = [list(raw[key]) for key in "mnk"]
        except (KeyError, TypeError) as exc:
            raise ValueError(f"{where}: needs lists 'm', 'n' and 'k' ({exc!r})") from None
        if len({len(c) for c in columns}) != 1:
            raise ValueError(
                f"{where}: 'm', 'n' and 'k' must have one entry per group, got lengths "
                f"{[len(c) for c in columns]}"
            )
        rows = list(zip(*columns))
    elif isinstance(raw, list):
        rows = raw
    else:
        raise ValueError(f"{where}: expected an object with m/n/k lists or a list of [m, n, k]")
    sizes = []
    for g, row in enumerate(rows):
        if (
            not isinstance(row, (list, tuple))
            or len(row) != 3
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in row)
        ):
            raise ValueError(f"{where}: group {g} must be three integers (m, n, k), got {row!r}")
        sizes.append(tuple(row))
    return Case(name, tuple(sizes))


def cases_from_file(path: Path, section: str) -> list[Case]:
    """Cases of ``section`` ("tests" or "benchmarks") in a shapes file, or a bare list."""
    try:
        raw = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"cannot read {path}: {exc}") from exc
    if isinstance(raw, dict):
        if section not in raw:
            raise ValueError(f"{path} has no {section!r} list (keys: {sorted(raw)})")
        raw = raw[section]
    if not isinstance(raw, list) or not raw:
        raise ValueError(f"{path}: expected a non-empty list of cases")
    return [case_from_json(c, f"{Path(path).name}:{section}[{i}]") for i, c in enumerate(raw)]


def collect_cases(shapes_file, section, groups_json, shapes, defaults) -> list[Case]:
    """Every case from the options, in order: file, --groups-json, --shape; else defaults.

    Each case is checked against the kernels' preconditions here, so that a bad shape
    fails before any GPU work.
    """
    cases: list[Case] = []
    try:
        if shapes_file is not None:
            cases += cases_from_file(shapes_file, section)
        for i, text in enumerate(groups_json):
            try:
                raw = json.loads(text)
            except json.JSONDecodeError as exc:
                raise ValueError(f"--groups-json {text!r} is not JSON: {exc}") from None
            cases.append(case_from_json(raw, f"groups-json[{i}]"))
    except ValueError as exc:
        hint = "--groups-json" if "groups-json" in str(exc) else "--shapes"
        raise click.BadParameter(str(exc), param_hint=hint) from None
    if shapes:
        cases.append(Case("shape", tuple(shapes)))
    if not cases:
        cases = [Case(name, sizes) for name, sizes in defaults]
    for case in cases:
        try:
            validation.problem_sizes(case.sizes)
        except Nvfp4Error as exc:
            raise click.BadParameter(f"case {case.name!r}: {exc}", param_hint="shapes") from None
        empty = next((g for g, (m, _n, _k) in enumerate(case.sizes) if m == 0), None)
        if empty is not None:  # the API takes empty groups; there is nothing here to check
            raise click.BadParameter(
                f"case {case.name!r}: group {empty}: m must be >= 1 to verify or time it, got 0",
                param_hint="shapes",
            )
    return cases


# timing inputs --------------------------------------------------------------------------


def _bench_arrays(sizes, rng: np.random.Generator):
    """Timing inputs, cheaply: random bytes are uniform FP4 codes; scales in [0.25, 4]."""
    codes = scale_codes()
    arrays = []
    for m, n, k in sizes:
        a = rng.integers(0, 256, size=m * k // 2, dtype=np.uint8)
        b = rng.integers(0, 256, size=n * k // 2, dtype=np.uint8)
        sfa = rng.choice(codes, size=validation.operand_bytes(m, n, k)["sfa"])
        sfb = rng.choice(codes, size=validation.operand_bytes(m, n, k)["sfb"])
        arrays.append((a, b, sfa, sfb))
    return arrays


# output -------------------------------------------------------------------------------


def table(headers: list[str], rows: list[list]) -> str:
    text = [[str(h) for h in headers]] + [[str(v) for v in row] for row in rows]
    widths = [max(len(r[i]) for r in text) for i in range(len(headers))]
    lines = ["  ".join(v.rjust(w) for v, w in zip(r, widths)) for r in text]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _cc(capability) -> str:
    return f"{capability[0]}.{capability[1]}"


def emit_json(data) -> None:
    click.echo(json.dumps(data, indent=2))


def progress(length: int, label: str):
    return click.progressbar(length=length, label=label, file=sys.stderr)


def document(device: int, seed: int, cases: list[dict], **settings) -> dict:
    """The --json document of verify and bench: device, seed, ``settings``, cases."""
    return {"device": device, "seed": seed, **settings, "cases": cases}


def timing_summary(times_us: list[float]) -> dict:
    """Median, p10, p90 and min of a list of times."""
    median = statistics.median(times_us)
    if len(times_us) > 1:
        deciles = statistics.quantiles(times_us, n=10, method="inclusive")
        p10, p90 = deciles[0], deciles[-1]
    else:
        p10 = p90 = median
    return {"median_us": median, "p10_us": p10, "p90_us": p90, "min_us": min(times_us)}


# common options -------------------------------------------------------------------------

json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
artifacts_option = click.option(
    "--artifacts",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="Artifacts directory (default: $NVFP4_AOT_ARTIFACTS, the package's, the repo's).",
)
device_option = click.option(
    "--device", type=click.IntRange(min=0), default=0, show_default=True, help="CUDA device."
)
seed_option = click.option(
    "--seed", type=int, default=0, show_default=True, help="Seed of the random inputs."
)


def stacked_options(*options):
    """One decorator applying ``options`` so that they show in the given order."""

    def decorate(func):
        for option in reversed(options):
            func = option(func)
        return func

    return decorate


epilogue_option = stacked_options(
    click.option(
        "--out-dtype",
        type=click.Choice(OUT_DTYPES),
        default="float16",
        show_default=True,
        help="C's dtype (each is baked for every kernel).",
    ),
    click.option(
        "--alpha",
        is_flag=True,
        help="Scale each group's (expert's) product by an FP32 alpha read on the GPU: "
        "random values for verify, ones for bench.",
    ),
)


kernel_option = click.option(
    "--kernel",
    "kernels",
    multiple=True,
    metavar="FAMILY",
    help="Kernel family to run (repeatable: each case runs with each; `info` lists them). "
    "Default: the one each plan picks.",
)


def shape_options(default_section: str):
    return stacked_options(
        click.option(
            "--shapes",
            "shapes_file",
            type=click.Path(exists=True, dir_okay=False, path_type=Path),
            help="JSON shapes file (GPU MODE style; see --section).",
        ),
        click.option(
            "--section",
            type=click.Choice(["tests", "benchmarks"]),
            default=default_section,
            show_default=True,
            help="Which list of the shapes file to use.",
        ),
        click.option(
            "--groups-json",
            multiple=True,
            help='One case as JSON: [[m,n,k], ...] or {"m":[..],"n":[..],"k":[..]}.',
        ),
        click.option(
            "--shape",
            "shapes",
            multiple=True,
            type=SHAPE,
            help="M,N,K of one group; repeat for more groups (one case).",
        ),
    )


# --moe, --layout, --tokens, --top-k, --routing, --routings (all unset by default, so that
# a MoE option without --moe is refused)
moe_options = stacked_options(
    click.option(
        "--moe",
        "moe",
        multiple=True,
        type=MOE,
        help="A MoE problem: E experts of N x K weights, routed on the GPU "
        "(repeatable; replaces the shape options).",
    ),
    click.option(
        "--layout",
        "layouts",
        multiple=True,
        type=click.Choice(LAYOUTS),
        help="MoE layout (repeatable; default contiguous).",
    ),
    click.option(
        "--tokens",
        multiple=True,
        type=click.IntRange(min=1),
        help="MoE tokens per step (repeatable; default 64 for verify, 256 for bench). "
        "Contiguous: T * top-k rows; masked: max_m = T rows per expert.",
    ),
    click.option(
        "--top-k",
        "top_k",
        type=click.IntRange(min=1),
        default=None,
        help="Experts each token is routed to (default 1).",
    ),
    click.option(
        "--routing",
        "kinds",
        multiple=True,
        type=click.Choice(ROUTING_KINDS),
        help="Routing distribution (repeatable; default all kinds, in turn).",
    ),
    click.option(
        "--routings",
        type=click.IntRange(min=1),
        default=None,
        help="Random routings per MoE case, the kinds in turn (default: two of each "
        "kind for verify, one for bench).",
    ),
)


# commands ------------------------------------------------------------------------------


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="nvfp4-aot")
def main():
    """Ahead-of-time compiled NVFP4 block-scaled grouped GEMM kernels."""


def case_runs(cases, kernels) -> list[tuple[int, Case, str | None]]:
    """(case index, case, kernel family or None for the plan's pick): each case once per
    --kernel given (the case index seeds its inputs, so every family gets the same ones)."""
    return [
        (index, case, kernel) for index, case in enumerate(cases) for kernel in kernels or [None]
    ]


@main.command()
@artifacts_option
@json_option
def info(artifacts, as_json):
    """Artifacts, baked variants and this machine's GPUs (works without a GPU)."""
    directory = loader.resolve_dir(artifacts)
    manifest = loader.load_manifest(directory)
    variants = []
    for v in manifest.variants:
        try:
            loader.read_cubin(directory, v)
            check = "ok"
        except Nvfp4Error as exc:
            check = str(exc)
        variants.append(
            {
                "name": v.name,
                "family": v.family,
                "arch": v.arch,
                "compute_capability": list(v.compute_capability),
                "num_groups": v.num_groups,
                "role": v.role,
                "writes": str(v.epilogue) if v.role == ROLE_GEMM else None,
                "tile_mnk": list(v.tile_mnk),
                "cubin": v.cubin,
                "cubin_bytes": v.cubin_bytes,
                "sha256": v.sha256,
                "cubin_check": check,
                "registers": v.registers,
                "dynamic_smem_bytes": v.dynamic_smem_bytes,
                "block": list(v.block),
                "workspace": asdict(v.workspace),
            }
        )
    cuda, gpus = _gpus(manifest)
    data = {
        "package_version": __version__,
        "artifacts": str(directory),
        "manifest": {
            "schema_version": manifest.schema_version,
            "package_version": manifest.package_version,
            "dsl_version": manifest.dsl_version,
        },
        "variants": variants,
        "cuda": cuda,
        "gpus": gpus,
    }
    if as_json:
        emit_json(data)
        return
    click.echo(f"nvfp4-aot {__version__}")
    click.echo(f"artifacts: {directory}")
    click.echo(
        f"manifest: schema {manifest.schema_version}, package {manifest.package_version}, "
        f"CuTe DSL {manifest.dsl_version}"
    )
    click.echo()
    headers = [
        "variant",
        "arch",
        "CC",
        "G",
        "C",
        "tile",
        "cubin B",
        "sha256",
        "regs",
        "dyn smem",
        "block",
        "cubin",
    ]
    rows = [
        [
            v["name"],
            v["arch"],
            _cc(v["compute_capability"]),
            v["num_groups"],
            v["writes"] or "-",
            "x".join(map(str, v["tile_mnk"])),
            v["cubin_bytes"],
            v["sha256"][:12],
            v["registers"] if v["registers"] is not None else "?",
            v["dynamic_smem_bytes"],
            "x".join(map(str, v["block"])),
            v["cubin_check"],
        ]
        for v in variants
    ]
    click.echo(table(headers, rows))
    click.echo()
    if not cuda["available"]:
        click.echo(f"CUDA: {cuda['error']}")
        return
    click.echo(f"CUDA driver {cuda['driver_version'] or '?'}: {len(gpus)} GPU(s)")
    if not gpus:
        click.echo("no GPU")
    for gpu in gpus:
        cc = _cc(gpu["compute_capability"])
        click.echo(
            f"  [{gpu['ordinal']}] {gpu['name']}: compute capability {cc}, {gpu['sm_count']} SMs"
        )
        if gpu["variants"]:
            click.echo(f"      runs {', '.join(gpu['variants'])}")
        else:
            click.echo(f"      no variant: {gpu['reason']}")


def _gpus(manifest) -> tuple[dict, list[dict]]:
    """The driver's state and every GPU with the variants it would use (or why none)."""
    cuda = {"available": False, "driver_version": None, "error": None}
    try:
        count = driver.device_count()
    except ImportError as exc:
        cuda["error"] = f"no CUDA driver (cuda-python is not installed: {exc})"
        return cuda, []
    except CudaError as exc:
        missing = isinstance(exc.__cause__, RuntimeError)  # libcuda could not be loaded
        if missing:
            cuda["error"] = f"no CUDA driver ({exc})"
        elif exc.result_name == "CUDA_ERROR_NO_DEVICE":
            cuda["error"] = f"no GPU ({exc})"
        else:
            cuda["error"] = f"CUDA driver unusable ({exc})"
        return cuda, []
    cuda["available"] = True
    try:
        version = int(driver.call("cuDriverGetVersion"))
        cuda["driver_version"] = f"{version // 1000}.{version % 1000 // 10}"
    except (Nvfp4Error, AttributeError):
        pass
    gpus = []
    for ordinal in range(count):
        capability = driver.compute_capability(ordinal)
        smem = driver.device_attribute(driver.ATTR_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, ordinal)
        names, reason = [], None
        try:
            found = loader.variants_for(manifest, capability, role=None, epilogue=None)
        except (UnsupportedDeviceError, Nvfp4Error) as exc:
            found, reason = [], str(exc)
        for v in found:
            if v.dynamic_smem_bytes <= smem:
                names.append(v.name)
            else:
                reason = (
                    f"{v.name} needs {v.dynamic_smem_bytes} B of shared memory per block, "
                    f"the device allows {smem}"
                )
        gpus.append(
            {
                "ordinal": ordinal,
                "name": driver.device_name(ordinal),
                "compute_capability": list(capability),
                "sm_count": driver.sm_count(ordinal),
                "max_smem_per_block_optin": smem,
                "variants": names,
                "reason": None if names else reason,
            }
        )
    return cuda, gpus


@main.command()
@shape_options("tests")
@moe_options
@click.option(
    "--tol",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Largest relative (Frobenius) error per group (default: 1e-3 for float16 output, "
    "4e-3 for bfloat16, about their rounding).",
)
@epilogue_option
@device_option
@seed_option
@kernel_option
@artifacts_option
@json_option
def verify(
    shapes_file, section, groups_json, shapes, moe, layouts, tokens, top_k, kinds, routings,
    tol, out_dtype, alpha, device, seed, kernels, artifacts, as_json,
):  # fmt: skip
    """Run random problems and compare every group with the float64 reference.

    C is filled with NaN before each run, so a group the kernel does not write fails.
    Exits 1 when any group is off by more than --tol or holds a non-finite value. With
    --alpha each group's reference is scaled by its random alpha.

    With --moe: one plan per case; each routing runs eagerly and through one CUDA graph
    captured once, every expert is compared, and every row of C outside the routed
    ranges (and a guard after C) must keep its poison. One line per routing.
    """
    from . import cli_moe  # it builds on this module
    from .plan import GroupedGemmPlan

    shape_given = bool(shapes_file or groups_json or shapes)
    moe_cases, kinds, routings = cli_moe.collect_moe_cases(
        "verify", moe, layouts, tokens, top_k, kinds, routings, shape_given
    )
    epilogue = Epilogue(out_dtype, alpha)
    if tol is None:
        tol = TOLERANCE[out_dtype]
    if moe_cases:
        _require_device(device)
        cli_moe.verify(
            moe_cases, kinds, routings, kernels, tol, epilogue, device, seed, artifacts, as_json
        )
        return
    cases = collect_cases(shapes_file, section, groups_json, shapes, VERIFY_DEFAULT)
    _require_device(device)
    results = []
    runs = case_runs(cases, kernels)
    total = sum(len(case.sizes) for _i, case, _k in runs)
    with progress(total, "verify") as bar:
        for index, case, kernel in runs:
            rng = np.random.default_rng([seed, index])
            problems = [random_problem(m, n, k, rng) for m, n, k in case.sizes]
            arrays = [(p.a, p.b, p.sfa_blocked, p.sfb_blocked) for p in problems]
            alphas = random_alpha(len(problems), rng) if alpha else None
            with GroupedGemmPlan(
                case.sizes, device, artifacts=artifacts, kernel=kernel, out_dtype=out_dtype,
                alpha=alpha,
            ) as plan:  # fmt: skip
                data = DeviceOperands(case.sizes, arrays, alpha=alphas, out_dtype=out_dtype)
                try:
                    data.poison_c()
                    plan.run(*data.columns, alpha=data.alpha or None)
                    plan.synchronize()
                    outputs = [data.c(g) for g in range(len(case.sizes))]
                finally:
                    data.free()
                variants = [v.name for v in plan.variants]
            groups = []
            for g, (problem, out) in enumerate(zip(problems, outputs)):
                ref = reference_gemm(problem) * (1.0 if alphas is None else float(alphas[g]))
                finite = bool(np.isfinite(out).all())
                error = relative_error(out, ref)
                max_abs = float(np.max(np.abs(out - ref))) if finite else None
                groups.append(
                    {
                        "group": g,
                        "m": problem.m,
                        "n": problem.n,
                        "k": problem.k,
                        "relative_error": error,
                        "max_abs_error": max_abs,
                        "finite": finite,
                        "ok": finite and error <= tol,
                    }
                )
                bar.update(1)
            results.append(
                {
                    "case": case.name,
                    "epilogue": str(epilogue),
                    "variants": variants,
                    "groups": groups,
                }
            )
    failed = sum(not g["ok"] for r in results for g in r["groups"])
    if as_json:
        emit_json(
            document(device, seed, results, tol=tol, passed=failed == 0, failed_groups=failed)
        )
    else:
        rows = []
        for r in results:
            for g in r["groups"]:
                rows.append(
                    [
                        r["case"],
                        g["group"],
                        g["m"],
                        g["n"],
                        g["k"],
                        f"{g['relative_error']:.2e}",
                        "-" if g["max_abs_error"] is None else f"{g['max_abs_error']:.3g}",
                        "yes" if g["finite"] else "NO",
                        "ok" if g["ok"] else "FAIL",
                    ]
                )
        headers = ["case", "group", "m", "n", "k", "rel err", "max abs", "finite", "result"]
        click.echo(table(headers, rows))
        click.echo(
            f"{total - failed}/{total} groups within tol {tol:g} ({epilogue}, device {device}, "
            f"seed {seed})"
        )
    if failed:
        raise click.ClickException(f"{failed} of {total} group(s) failed verification")


@main.command()
@shape_options("benchmarks")
@moe_options
@click.option(
    "--repeats",
    type=click.IntRange(min=1),
    default=100,
    show_default=True,
    help="Timed runs per case (per routing with --moe).",
)
@click.option(
    "--warmup",
    type=click.IntRange(min=0),
    default=10,
    show_default=True,
    help="Untimed runs per case first.",
)
@click.option(
    "--sets",
    type=click.IntRange(min=1),
    default=4,
    show_default=True,
    help="Input sets rotated between runs (defeats the L2 cache; not with --moe).",
)
@epilogue_option
@device_option
@seed_option
@kernel_option
@artifacts_option
@json_option
def bench(
    shapes_file,
    section,
    groups_json,
    shapes,
    moe,
    layouts,
    tokens,
    top_k,
    kinds,
    routings,
    repeats,
    warmup,
    sets,
    out_dtype,
    alpha,
    device,
    seed,
    kernels,
    artifacts,
    as_json,
):
    """Time the grouped GEMM with CUDA events: median, p10 and p90 per case.

    Runs are queued back to back on the default stream with an event between each
    two, so each time covers one run (pointer upload and kernel). TFLOP/s counts
    2 m n k per group; GB/s counts A, B, the blocked scales and C once each.

    With --moe, per routing: the GPU time of one captured CUDA graph replayed back to
    back (events between replays), and eager runs queued from Python in batches: wall
    time per run (until the GPU finished, host work included) and host time of the
    run() call alone. TFLOP/s counts the routed rows; GB/s the weights and scales of the
    experts with tokens, the routed rows of A and C.
    """
    from . import cli_moe  # it builds on this module
    from .plan import GroupedGemmPlan

    shape_given = bool(shapes_file or groups_json or shapes)
    moe_cases, kinds, routings = cli_moe.collect_moe_cases(
        "bench", moe, layouts, tokens, top_k, kinds, routings, shape_given
    )
    epilogue = Epilogue(out_dtype, alpha)
    if moe_cases:
        _require_device(device)
        cli_moe.bench(
            moe_cases, kinds, routings, kernels, repeats, warmup, epilogue, device, seed,
            artifacts, as_json,
        )  # fmt: skip
        return
    cases = collect_cases(shapes_file, section, groups_json, shapes, BENCH_DEFAULT)
    _require_device(device)
    results = []
    runs = case_runs(cases, kernels)
    with progress(len(runs) * (sets + 1), "bench") as bar:
        for index, case, kernel in runs:
            rng = np.random.default_rng([seed, index])
            ones = np.ones(len(case.sizes), np.float32) if alpha else None
            with GroupedGemmPlan(
                case.sizes, device, artifacts=artifacts, kernel=kernel, out_dtype=out_dtype,
                alpha=alpha,
            ) as plan:  # fmt: skip
                data = []
                events = []
                try:
                    for _ in range(sets):
                        arrays = _bench_arrays(case.sizes, rng)
                        data.append(
                            DeviceOperands(case.sizes, arrays, alpha=ones, out_dtype=out_dtype)
                        )
                        bar.update(1)
                    for i in range(warmup):
                        plan.run(*data[i % sets].columns, alpha=data[i % sets].alpha or None)
                    events = [driver.timing_event_create() for _ in range(repeats + 1)]
                    plan.synchronize()
                    driver.event_record(events[0], 0)
                    for i in range(warmup, warmup + repeats):  # rotation goes on
                        plan.run(*data[i % sets].columns, alpha=data[i % sets].alpha or None)
                        driver.event_record(events[i + 1 - warmup], 0)
                    driver.event_synchronize(events[-1])
                    times = [
                        driver.event_elapsed_ms(a, b) * 1e3 for a, b in zip(events, events[1:])
                    ]
                finally:
                    for event in events:
                        driver.event_destroy(event)
                    plan.synchronize()
                    for d in data:
                        d.free()
                variants = [v.name for v in plan.variants]
            bar.update(1)
            results.append(_bench_result(case, variants, times))
    if as_json:
        emit_json(document(device, seed, results, repeats=repeats, warmup=warmup, sets=sets))
        return
    headers = ["case", "groups", "median us", "p10 us", "p90 us", "TFLOP/s", "GB/s", "variant"]
    rows = [
        [
            r["case"],
            r["groups"],
            f"{r['median_us']:.2f}",
            f"{r['p10_us']:.2f}",
            f"{r['p90_us']:.2f}",
            f"{r['tflops']:.1f}",
            f"{r['gbps']:.0f}",
            ",".join(r["variants"]),
        ]
        for r in results
    ]
    click.echo(table(headers, rows))


def _bench_result(case: Case, variants: list[str], times_us: list[float]) -> dict:
    flops = sum(2 * m * n * k for m, n, k in case.sizes)
    moved = sum(sum(validation.operand_bytes(m, n, k).values()) for m, n, k in case.sizes)
    timing = timing_summary(times_us)
    median = timing["median_us"]
    return {
        "case": case.name,
        "groups": len(case.sizes),
        "sizes": [list(s) for s in case.sizes],
        "variants": variants,
        **timing,
        "tflops": flops / (median * 1e-6) / 1e12,
        "gbps": moved / (median * 1e-6) / 1e9,
        "flops": flops,
        "bytes": moved,
    }


@main.command()
@click.argument("weight", type=click.Path(exists=True, path_type=Path))
@click.option(
    "--out",
    "out_dir",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Directory for B.npy, SFB.npy, scale_2.npy, global_scale.npy, quantize.json.",
)
@click.option(
    "--experts-axis",
    type=int,
    default=None,
    help="For a 3-D weight: the axis of the experts, 0 ((E, n, k), the default) or 1.",
)
@click.option(
    "--tensor",
    "tensors",
    multiple=True,
    help="For a .safetensors WEIGHT: the tensor to quantize (needed if it holds several); "
    "a name with {e} stacks experts 0, 1, ... into (E, n, k); given again, the tensors are "
    "concatenated along n (gate and up as one fused weight).",
)
@click.option(
    "--k-first",
    is_flag=True,
    help="WEIGHT is stored K first, (k, n) or (E, k, n) (as Llama 4's experts.gate_up_proj): "
    "its transpose is quantized.",
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=None,
    help="Threads quantizing experts side by side (default: this machine's CPUs, at most 8; "
    "each holds one expert's work).",
)
@json_option
def quantize(weight, out_dir, experts_axis, tensors, k_first, workers, as_json):
    """Quantize a .npy or .safetensors weight to NVFP4 files the GEMM reads (no GPU
    needed).

    WEIGHT is (n, k) or per-expert (E, n, k), K last, k a multiple of 16: a .npy array
    (float32, float16, float64, or bfloat16 stored as uint16 bits) or tensors of a
    .safetensors checkpoint (BF16, F16, F32, F64, or F8_E4M3 with DeepSeek's 128 x 128
    block scales <name>_scale_inv, dequantized to BF16 as DeepSeek's conversion does): a
    file, a sharded checkpoint's model.safetensors.index.json, or a directory holding
    either. Each expert gets its own global scale g = 2688 / amax; B.npy holds the packed
    FP4 codes, SFB.npy the E4M3 block scales in the blocked layout (expert after expert),
    scale_2.npy 1 / g per expert (the weight's factor of alpha); nvfp4_aot.weights
    load_weight reads them back. See nvfp4_aot.quantize for the exact formulas. A
    progress bar on stderr counts the experts.
    """
    from . import weights

    with ExitStack() as stack:  # a progress bar on stderr once the experts are counted
        bar = None

        def on_expert(_done: int, total: int) -> None:
            nonlocal bar
            if bar is None:
                bar = stack.enter_context(progress(total, "quantizing experts"))
            bar.update(1)

        try:
            document = weights.save_weight(
                weight, out_dir, experts_axis, tensors, workers, k_first, on_expert
            )
        except (ValueError, TypeError) as exc:  # each names the file
            raise click.ClickException(str(exc)) from None
    if as_json:
        emit_json(document)
        return
    shape = [document["n"], document["k"]]
    if document["experts"] is not None:
        shape.insert(0, document["experts"])
    click.echo(
        f"quantized {document['source']} {tuple(shape)} {document['source_dtype']} -> {out_dir}"
    )
