"""Damaged artifacts and unsupported devices: refused at plan creation, before any load.

Each case works on a temporary copy of the committed ``artifacts/`` (real manifest, real
cubins) against the fake driver (tests/fake_driver.py) and asserts the exception class,
a message that names the problem, and that the driver never loaded a library or
launched anything. A second test per manifest/cubin defect asks that the message also
names the file and says what to do (rebake with ``build_kernels.py`` or reinstall).

Already covered in test_runtime_cpu.py and not repeated here: a cubin with a wrong
sha256, a truncated cubin and a missing cubin (test_corrupt_cubin_refused_before_loading),
a cubin whose ELF arch disagrees with the manifest
(test_cubin_of_wrong_arch_refused_before_loading), compute capability 8.0 through
GroupedGemmPlan (test_unsupported_capability_names_device_and_baked_archs), sm_100a-only
artifacts on sm_90 (test_sm100_only_artifacts_refuse_hopper), cuFuncGetParamInfo
disagreeing with the manifest (test_param_info_mismatch_refused), too little shared
memory (test_shared_memory_limit), a missing device ordinal (test_missing_device) and
NVFP4_AOT_ARTIFACTS pointing nowhere (test_artifacts_dir_env); in test_cli.py: ``info``
on a corrupt cubin and on a directory without a manifest.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import hashlib
import json
import re
import shutil
import sys
from contextlib import ExitStack
from pathlib import Path

import pytest
from click.testing import CliRunner

from nvfp4_aot import cli, loader, plan
from nvfp4_aot.cubin_pack import PACK_SUFFIX, pack_name, write_packs
from nvfp4_aot.errors import ArtifactError, Nvfp4Error, UnsupportedDeviceError
from nvfp4_aot.kernels import FAMILIES, family_named
from nvfp4_aot.manifest import MANIFEST_NAME, ROLE_GEMM, ROLE_ROUTED_GEMM, input_kinds

sys.path.insert(0, str(Path(__file__).parent))
from fake_driver import FakeDriver, installed  # noqa: E402
from support import kernel_params_of  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
COMMITTED = REPO / "artifacts"
SIZES = [(128, 256, 512)]
FIX = r"(build_kernels\.py|reinstall)"  # what an artifact message must tell the user to do
NEVER = {"cuLibraryLoadData", "cuLaunchKernelEx", "cuLaunchKernel", "cuMemAlloc"}


def _params() -> dict[tuple[str, str], list[tuple[int, int]]]:
    return kernel_params_of(loader.load_manifest(COMMITTED))


@pytest.fixture
def art(tmp_path) -> Path:
    """A private copy of the committed artifacts."""
    directory = tmp_path / "artifacts"
    shutil.copytree(COMMITTED, directory)
    return directory


@pytest.fixture
def install(monkeypatch):
    """``install(capability, **kwargs)`` puts a FakeDriver in place for one test."""
    params = _params()
    monkeypatch.delenv("NVFP4_AOT_ARTIFACTS", raising=False)

    with ExitStack() as stack:

        def make(capability=(9, 0), **kwargs) -> FakeDriver:
            kwargs.setdefault("kernel_params", params)
            return stack.enter_context(installed(FakeDriver(capability=capability, **kwargs)))

        yield make


def _edit(directory: Path, change) -> None:
    path = directory / MANIFEST_NAME
    raw = json.loads(path.read_text())
    change(raw)
    path.write_text(json.dumps(raw, indent=1))


def _sm90_g8(raw: dict) -> dict:
    return next(v for v in raw["variants"] if v["arch"] == "sm_90a" and v["num_groups"] == 8)


def _replace_cubin(directory: Path, data: bytes, *, update_manifest: bool) -> None:
    """Overwrite the sm_90a G=8 cubin; optionally make the manifest agree with it."""

    def change(raw):
        variant = _sm90_g8(raw)
        (directory / variant["cubin"]).write_bytes(data)
        if update_manifest:
            variant["sha256"] = hashlib.sha256(data).hexdigest()
            variant["cubin_bytes"] = len(data)

    _edit(directory, change)


def _set(key, value):
    return lambda raw: raw.__setitem__(key, value)


def _variant_set(key, value):
    return lambda raw: _sm90_g8(raw).__setitem__(key, value)


def _variant_del(key):
    return lambda raw: _sm90_g8(raw).pop(key)


def _write_text(text):
    def damage(directory):
        (directory / MANIFEST_NAME).write_text(text)

    return damage


def _truncate_manifest(directory):
    path = directory / MANIFEST_NAME
    path.write_text(path.read_text()[:700])


def _manifest_is_a_directory(directory):
    path = directory / MANIFEST_NAME
    path.unlink()
    path.mkdir()


def _cubin_is_a_directory(directory):
    variant = _sm90_g8(json.loads((directory / MANIFEST_NAME).read_text()))
    path = directory / variant["cubin"]
    path.unlink()
    path.mkdir()


def _lfs_pointer(directory):
    """What a checkout without git-lfs leaves in place of a binary."""
    pointer = (
        b"version https://git-lfs.github.com/spec/v1\noid sha256:" + b"0" * 64 + b"\nsize 65144\n"
    )
    _replace_cubin(directory, pointer, update_manifest=False)


def _not_elf_but_consistent(directory):
    """A manifest that agrees with a cubin that is not an ELF file (a broken bake)."""
    _replace_cubin(directory, b"\0" * 4096, update_manifest=True)


def _drop_manifest(directory):
    (directory / MANIFEST_NAME).unlink()


# (damage, message): ArtifactError at plan creation, before the driver loads anything
DEFECTS = [
    pytest.param(lambda d: _edit(d, _set("schema_version", 2)),
                 r"manifest schema_version is 2, this nvfp4-aot reads 1", id="schema-from-the-future"),
    pytest.param(lambda d: _edit(d, lambda raw: raw.pop("schema_version")),
                 r"manifest schema_version is None", id="schema-missing"),
    pytest.param(lambda d: _edit(d, _set("schema_version", "1")),
                 r"manifest schema_version is '1'", id="schema-as-string"),
    pytest.param(lambda d: _edit(d, lambda raw: raw.pop("variants")),
                 r"manifest: missing field 'variants'", id="variants-missing"),
    pytest.param(lambda d: _edit(d, _variant_del("sha256")),
                 r"manifest\.variants\[\d+\]: missing field 'sha256'", id="variant-sha256-missing"),
    pytest.param(lambda d: _edit(d, _variant_del("params")),
                 r"manifest\.variants\[\d+\]: missing field 'params'", id="variant-params-missing"),
    pytest.param(lambda d: _edit(d, _variant_set("cubin_bytes", "65144")),
                 r"manifest\.variants\[\d+\]\.cubin_bytes: expected int, got '65144'",
                 id="cubin-bytes-as-string"),
    pytest.param(lambda d: _edit(d, _variant_set("compute_capability", [9])),
                 r"manifest\.variants\[\d+\]\.compute_capability: expected 2 items, got 1",
                 id="capability-one-number"),
    pytest.param(lambda d: _edit(d, _variant_set("launch_hint", 1)),
                 r"manifest\.variants\[\d+\]: unknown field\(s\) \['launch_hint'\]", id="unknown-field"),
    pytest.param(_truncate_manifest, r"manifest is not valid JSON", id="manifest-truncated"),
    pytest.param(_write_text(""), r"manifest is not valid JSON", id="manifest-empty"),
    pytest.param(_write_text("[]"), r"manifest must be a JSON object", id="manifest-a-list"),
    pytest.param(_drop_manifest, r"manifest\.json does not exist; run `python build_kernels\.py`",
                 id="manifest-missing"),
    pytest.param(_manifest_is_a_directory, r"manifest\.json", id="manifest-unreadable"),
    pytest.param(_lfs_pointer, r"holds \d+ bytes, the manifest says \d+", id="cubin-is-a-git-lfs-pointer"),
    pytest.param(_not_elf_but_consistent, r"not a cubin: the ELF magic number is missing",
                 id="cubin-not-elf"),
    pytest.param(_cubin_is_a_directory, r"\.cubin", id="cubin-unreadable"),
]  # fmt: skip


@pytest.mark.parametrize("damage, message", DEFECTS)
def test_defect_refused_before_loading(art, install, damage, message):
    damage(art)
    fake = install()
    with pytest.raises(ArtifactError, match=message):
        plan.GroupedGemmPlan(SIZES, artifacts=art)
    assert not NEVER & set(fake.names())


@pytest.mark.parametrize("damage, message", DEFECTS)
def test_defect_message_names_the_file_and_the_fix(art, install, damage, message):
    damage(art)
    install()
    with pytest.raises(ArtifactError) as info:
        plan.GroupedGemmPlan(SIZES, artifacts=art)
    text = str(info.value)
    assert str(art) in text, f"the message does not name the file: {text}"
    assert re.search(FIX, text), f"the message does not say what to do: {text}"


def test_kernel_symbol_missing_from_cubin(art, install):
    """The manifest names a kernel the cubin lacks: an artifact error, library unloaded."""
    _edit(art, _variant_set("kernel_symbol", "kernel_that_is_not_there"))
    fake = install()
    with pytest.raises(Nvfp4Error) as info:
        plan.GroupedGemmPlan(SIZES, artifacts=art)
    assert fake.names().count("cuLibraryLoadData") == fake.names().count("cuLibraryUnload") == 1
    assert not {"cuLaunchKernelEx", "cuLaunchKernel", "cuMemAlloc"} & set(fake.names())
    assert "kernel_that_is_not_there" in str(info.value) or "NOT_FOUND" in str(info.value)


def test_kernel_symbol_missing_is_an_artifact_error(art, install):
    _edit(art, _variant_set("kernel_symbol", "kernel_that_is_not_there"))
    install()
    with pytest.raises(ArtifactError, match=r"kernel_that_is_not_there.*build_kernels\.py"):
        plan.GroupedGemmPlan(SIZES, artifacts=art)


def test_manifest_without_variants_is_an_artifact_error(art, install):
    _edit(art, _set("variants", []))
    fake = install()
    with pytest.raises(ArtifactError, match=r"no .*variants.*build_kernels\.py"):
        plan.GroupedGemmPlan(SIZES, artifacts=art)
    assert not NEVER & set(fake.names())


# ---------------------------------------------------------------------------------------
# devices without a baked arch

BAKED = r"sm_100a \(compute capability 10\.0\), sm_103a \(compute capability 10\.3\), sm_90a"
ADVICE = r"Use a GPU of one of these architectures or bake a variant for this one"


@pytest.mark.parametrize(
    "capability, entry",
    [pytest.param((12, 0), "GroupedGemmPlan", id="cc12.0-plan"),
     pytest.param((12, 0), "grouped_gemm", id="cc12.0-grouped_gemm"),
     pytest.param((8, 9), "get_plan", id="cc8.9-get_plan"),
     pytest.param((12, 1), "get_plan", id="cc12.1-get_plan")],
)  # fmt: skip
def test_device_without_a_baked_arch(art, install, monkeypatch, capability, entry):
    fake = install(capability)
    monkeypatch.setenv("NVFP4_AOT_ARTIFACTS", str(art))
    cc = rf"{capability[0]}\.{capability[1]}"
    with pytest.raises(
        UnsupportedDeviceError,
        match=rf"compute capability {cc}; the artifacts hold {BAKED}.*{ADVICE}",
    ):
        if entry == "grouped_gemm":
            ptr = 0x7000_0000_0000
            plan.grouped_gemm([ptr], [ptr + 2**24], [ptr + 2**25], [ptr + 2**26],
                              [ptr + 2**27], problem_sizes=SIZES)  # fmt: skip
        elif entry == "get_plan":
            plan.get_plan(SIZES)
        else:
            plan.GroupedGemmPlan(SIZES, artifacts=art)
    assert not NEVER & set(fake.names())


def test_sm103_device_with_sm100a_only_artifacts(art, install):
    """'a' targets run on their exact capability: sm_100a cubins do not serve 10.3."""
    _edit(art, lambda raw: raw.__setitem__(
        "variants", [v for v in raw["variants"] if v["arch"] == "sm_100a"]))  # fmt: skip
    fake = install((10, 3))
    with pytest.raises(
        UnsupportedDeviceError,
        match=r"compute capability 10\.3; the artifacts hold sm_100a \(compute capability 10\.0\)\.",
    ):
        plan.GroupedGemmPlan(SIZES, artifacts=art)
    assert not NEVER & set(fake.names())


def test_cli_verify_on_a_device_without_a_baked_arch(art, install):
    fake = install((12, 0))
    result = CliRunner().invoke(
        cli.main, ["verify", "--shape", "128,256,512", "--artifacts", str(art)]
    )
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    assert "no baked kernel runs on a device of compute capability 12.0" in result.output
    assert not NEVER & set(fake.names())


def test_cli_verify_with_a_corrupt_manifest(art, install):
    _truncate_manifest(art)
    fake = install()
    result = CliRunner().invoke(
        cli.main, ["verify", "--shape", "128,256,512", "--artifacts", str(art)]
    )
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    assert "manifest is not valid JSON" in result.output
    assert not NEVER & set(fake.names())


# ---------------------------------------------------------------------------------------
# failures are not cached; checks are per variant


def test_repaired_artifacts_work_without_restart(art, install):
    """A refused cubin is not remembered: once restored, the next plan loads it."""
    variant = _sm90_g8(json.loads((art / MANIFEST_NAME).read_text()))
    path = art / variant["cubin"]
    good = path.read_bytes()
    path.write_bytes(good[: len(good) // 2])
    fake = install()
    with pytest.raises(ArtifactError, match=r"truncated"):
        plan.GroupedGemmPlan(SIZES, artifacts=art)
    path.write_bytes(good)
    with plan.GroupedGemmPlan(SIZES, artifacts=art) as p:
        assert [v.name for v in p.variants] == [variant["name"]]
    assert fake.names().count("cuLibraryLoadData") == 1


def test_corrupt_cubin_of_another_arch_does_not_block_this_device(art, install):
    """Cubins are verified when loaded: a damaged sm_100a cubin leaves sm_90 working
    (``nvfp4-aot info`` still reports it)."""
    raw = json.loads((art / MANIFEST_NAME).read_text())
    other = next(v for v in raw["variants"] if v["arch"] == "sm_100a")
    (art / other["cubin"]).write_bytes(b"\0" * other["cubin_bytes"])
    install()
    with plan.GroupedGemmPlan(SIZES, artifacts=art) as p:
        assert p.variants[0].arch == "sm_90a"
    with pytest.raises(ArtifactError, match=r"has sha256 [0-9a-f]{64}, the manifest says"):
        loader.read_cubin(art, loader.load_manifest(art).variant(
            other["family"], other["arch"], other["num_groups"]))  # fmt: skip


# ---------------------------------------------------------------------------------------
# which input goes to which kernel parameter, read from the kernel sources
#
# The capture names an input slot after the host launcher argument whose sentinel it
# found there, so a wrong name (inputs passed in another order than INPUT_NAMES, or a
# hand-edited manifest) would still reproduce the DSL's bytes. This pin derives the
# same facts from the kernel sources instead: the host launcher's argument order, the
# @cute.kernel's parameter order and which host argument shapes which tensor.

# The stem each input's arguments carry in every kernel source (host launcher argument,
# kernel parameter, tensor built from it).
ARGUMENT_STEMS = {
    "problem_sizes": "problem_sizes",
    "abc_ptrs": "abc_pointers",
    "sfasfb_ptrs": "scale_pointers",
    "cta_prefix": "cta_prefix",
    "tensormap": "tensormap_workspace",
    "total_num_clusters": "total_tiles",
    "persistent_blocks": "persistent_blocks",
    "alpha_ptrs": "alpha_pointers",  # grouped GEMMs with alpha only
    # the MoE routing setup (and the routed GEMMs: the kernel's plan and run words)
    "ptr_of_plan": "plan",
    "ptr_of_run": "run",
    "plan_words": "plan",
    "run_words": "run",
    "num_chunks": "num_chunks",
    # the activation quantizer (plan and run as above)
    "num_ctas": "num_ctas",
}


def _input_of(node) -> str | None:
    """The input an argument name (or ast.Name) stands for, by its stem."""
    name = node.id if isinstance(node, ast.Name) else node
    if not isinstance(name, str):
        return None
    found = {input_name for stem, input_name in ARGUMENT_STEMS.items() if stem in name}
    assert len(found) <= 1, f"{name} matches several inputs: {found}"
    return found.pop() if found else None


def _decorated(function: ast.FunctionDef, attr: str) -> bool:
    return any(
        isinstance(d, ast.Attribute) and d.attr == attr and getattr(d.value, "id", "") == "cute"
        for d in function.decorator_list
    )


def _compile_time(arg: ast.arg) -> bool:
    """A kernel argument that becomes no kernel parameter (a constant or a static layout)."""
    annotation = ast.unparse(arg.annotation) if arg.annotation else ""
    return "Constexpr" in annotation or annotation.endswith(("Layout", "ComposedLayout"))


def _source_trees(module: str) -> list[ast.Module]:
    """The family module and the kernel modules it imports (shared helpers)."""
    trees, todo, seen = [], [module], set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        path = REPO / (name.replace(".", "/") + ".py")
        if not path.exists():
            path = REPO / name.replace(".", "/") / "__init__.py"
        tree = ast.parse(path.read_text())
        trees.append(tree)
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                todo.append(f"{package}.{node.module}" if node.module else package)
    return trees


def source_launch_inputs(
    module: str, entry: str = "compile", absent: frozenset = frozenset()
) -> tuple[dict[int, list[str]], str | None, list[str]]:
    """From a kernel family's sources: {kernel parameter index: the inputs it carries},
    the input that is the grid's x dimension, and the inputs in host argument order.
    ``absent``: the inputs whose kernel parameters this family's host launcher passes
    as None (no kernel parameter at all)."""
    trees = _source_trees(module)
    defs = [n for t in trees for n in ast.walk(t) if isinstance(n, ast.FunctionDef)]
    functions = {n.name: n for n in defs}
    # the @cute.jit host launcher that the entry function hands to cute.compile (maybe
    # through a shared helper): the first argument of a call in a function of that name
    # naming such a function
    host = next(
        functions[arg.id]
        for f in defs if f.name == entry
        for n in ast.walk(f) if isinstance(n, ast.Call)
        for arg in n.args[:1]
        if isinstance(arg, ast.Name) and arg.id in functions
        and _decorated(functions[arg.id], "jit")
    )  # fmt: skip
    host_order = [_input_of(a.arg) for a in host.args.args if not _compile_time(a)]
    launch = next(
        n for n in ast.walk(host)
        if isinstance(n, ast.Call) and getattr(n.func, "attr", "") == "launch"
    )  # fmt: skip
    # the @cute.kernel it launches: defined beside the host launcher (another module may
    # define a kernel of the same name)
    home = next(t for t in trees if host in ast.walk(t))
    kernel = next(
        n for n in ast.walk(home)
        if isinstance(n, ast.FunctionDef) and n.name == launch.func.value.func.id
    )  # fmt: skip
    assert _decorated(kernel, "kernel"), kernel.name
    parameters = [
        a.arg for a in kernel.args.args if not _compile_time(a) and _input_of(a.arg) not in absent
    ]
    # int32 inputs travel inside the tensors whose dynamic shape they give
    shaped_by: dict[str, list[str]] = {}
    for node in (n for t in trees for n in ast.walk(t)):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "make_tensor":
            pointer, layout = node.args[:2]
            shape = layout.args[0] if isinstance(layout, ast.Call) else None
            elements = shape.elts if isinstance(shape, ast.Tuple) else [shape]
            shaped_by[_input_of(pointer)] = [i for i in map(_input_of, elements) if i]
    carried = {}
    for index, parameter in enumerate(parameters):
        name = _input_of(parameter)
        if name is not None:
            carried[index] = sorted([name, *shaped_by.get(name, [])])
    grid = next(k.value for k in launch.keywords if k.arg == "grid")
    if isinstance(grid, ast.Name):  # grid = (...) earlier in the host function
        grid = next(
            n.value for n in ast.walk(host)
            if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == grid.id
        )  # fmt: skip
    return carried, _input_of(grid.elts[0]), host_order


def launch_input_problems(variant, carried, grid_x) -> list[str]:
    """Where the manifest's input slots (and grid) disagree with the sources, as lines."""
    manifest = {p.index: sorted(s.name for s in p.slots) for p in variant.params if p.slots}
    problems = [
        f"{variant.name}: kernel parameter {index} carries {manifest.get(index, [])} in the "
        f"manifest, {names} in the kernel source"
        for index, names in sorted(carried.items())
        if manifest.get(index) != names
    ]
    problems += [
        f"{variant.name}: kernel parameter {index} carries {names} in the manifest, "
        "nothing in the kernel source"
        for index, names in sorted(manifest.items())
        if index not in carried
    ]
    if variant.grid[0].input != grid_x:
        problems.append(
            f"{variant.name}: grid x is input {variant.grid[0].input!r} in the manifest, "
            f"{grid_x!r} in the kernel source"
        )
    return problems


# the inputs whose kernel parameters a role's host launchers pass as None: a routed GEMM
# has no tables, a table GEMM no plan and run words
ABSENT_INPUTS = {
    ROLE_ROUTED_GEMM: frozenset(
        {"problem_sizes", "abc_pointers", "scale_pointers", "cta_prefix", "alpha_pointers"}
    ),
    ROLE_GEMM: frozenset({"plan", "run"}),
}


@functools.cache
def family_sources(family: str):
    kernel = family_named(family)
    absent = ABSENT_INPUTS.get(kernel.role, frozenset())
    return source_launch_inputs(kernel.module, kernel.entry, absent)


@pytest.mark.parametrize("family", [f.name for f in FAMILIES])
def test_host_launcher_takes_inputs_in_manifest_order(family):
    """The recorder passes sentinels in the role's input order (INPUT_NAMES for the
    GEMMs, then alpha_pointers in a variant with alpha): the host launcher's arguments."""
    kernel = family_named(family)
    assert family_sources(family)[2] == list(input_kinds(kernel.role, bool(kernel.epilogues)))


def test_manifest_input_slots_match_the_kernel_sources():
    manifest = loader.load_manifest(COMMITTED)
    problems = []
    for variant in manifest.variants:
        carried, grid_x, _ = family_sources(variant.family)
        if not variant.alpha:  # the alpha table is a kernel parameter only with alpha
            carried = {i: names for i, names in carried.items() if names != ["alpha_pointers"]}
        problems += launch_input_problems(variant, carried, grid_x)
    assert problems == []
    assert {v.family for v in manifest.variants} == {f.name for f in FAMILIES}


def _swap_names(variant, first: str, second: str):
    rename = {first: second, second: first}
    params = tuple(
        dataclasses.replace(
            p,
            slots=tuple(dataclasses.replace(s, name=rename.get(s.name, s.name)) for s in p.slots),
        )
        for p in variant.params
    )
    grid = tuple(
        dataclasses.replace(g, input=rename.get(g.input, g.input)) if g.input else g
        for g in variant.grid
    )
    return dataclasses.replace(variant, params=params, grid=grid)


@pytest.mark.parametrize(
    "first, second",
    [("abc_pointers", "scale_pointers"), ("problem_sizes", "cta_prefix"),
     ("tensormap_workspace", "abc_pointers"), ("persistent_blocks", "total_tiles"),
     ("plan", "run"), ("num_chunks", "plan")],
)  # fmt: skip
def test_swapped_input_names_are_caught(first, second):
    """A manifest with two inputs' names swapped packs the same bytes; the pin refuses it."""
    for variant in loader.load_manifest(COMMITTED).variants:
        if first not in variant.input_kinds:
            continue
        carried, grid_x, _ = family_sources(variant.family)
        swapped = _swap_names(variant, first, second)
        assert swapped != variant
        problems = launch_input_problems(swapped, carried, grid_x)
        assert problems, f"{variant.name}: swapping {first} and {second} went unnoticed"
        assert all(variant.name in p for p in problems)


# ---------------------------------------------------------------------------------------
# cubins in one xz pack per family (the wheel's form, setup.py, nvfp4_aot/cubin_pack.py)


def _pack_all(directory: Path) -> None:
    write_packs(directory, directory)
    for path in directory.glob("*.cubin"):
        path.unlink()


def test_packed_cubins_read_as_the_plain_ones(art):
    manifest = loader.load_manifest(COMMITTED)
    _pack_all(art)
    assert sorted(p.name for p in art.glob("*" + PACK_SUFFIX)) == sorted(
        {pack_name(v.cubin) for v in manifest.variants}
    )
    for variant in manifest.variants:
        assert loader.read_cubin(art, variant) == (COMMITTED / variant.cubin).read_bytes()


def test_packs_are_reproducible(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir(), second.mkdir()
    assert [p.read_bytes() for p in write_packs(COMMITTED, first)] == [
        p.read_bytes() for p in write_packs(COMMITTED, second)
    ]


def test_packed_cubin_corrupt_or_replaced_is_an_artifact_error(art):
    variant = next(v for v in loader.load_manifest(COMMITTED).variants if v.arch == "sm_90a")
    _pack_all(art)
    pack = art / pack_name(variant.cubin)
    named = re.escape(f"{pack} ({variant.cubin})")
    pack.write_bytes(pack.read_bytes()[:-40])  # truncated: does not decompress
    with pytest.raises(ArtifactError, match=rf"{re.escape(str(pack))} does not decompress.*{FIX}"):
        loader.read_cubin(art, variant)
    # the variant's member replaced by another cubin
    other = next(v for v in loader.load_manifest(COMMITTED).variants if v.cubin != variant.cubin)
    work = art / "work"
    work.mkdir()
    (work / variant.cubin).write_bytes((COMMITTED / other.cubin).read_bytes())
    (packed,) = write_packs(work, art)
    assert packed == pack
    with pytest.raises(ArtifactError, match=rf"^{named} (holds \d+ bytes|has sha256)"):
        loader.read_cubin(art, variant)
    # a pack without the variant's member
    (work / variant.cubin).unlink()
    (work / (variant.cubin.split(".", 1)[0] + ".other.cubin")).write_bytes(b"x")
    write_packs(work, art)
    with pytest.raises(
        ArtifactError, match=rf"^{named} is missing although the manifest names it.*{FIX}"
    ):
        loader.read_cubin(art, variant)
    pack.unlink()
    with pytest.raises(ArtifactError, match=rf"is missing although the manifest names it.*{FIX}"):
        loader.read_cubin(art, variant)
