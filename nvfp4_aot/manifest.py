"""The typed manifest that describes every baked kernel variant.

``artifacts/manifest.json`` is written by ``build_kernels.py`` (last, after every cubin,
so that its presence marks a complete bake) and read by the runtime. It records versions,
hashes and the full launch description: how the grid is formed, block, cluster, dynamic
shared memory, launch and function attributes, and every kernel parameter as constant
bytes plus the input slots the runtime writes. The runtime packs parameters from it
alone; see :mod:`nvfp4_aot.packing`.
"""

from __future__ import annotations

import json
from dataclasses import MISSING, asdict, dataclass, fields
from pathlib import Path
from typing import Any

from .errors import ArtifactError
from .intmath import round_up

SCHEMA_VERSION = 1
MANIFEST_NAME = "manifest.json"

# The inputs of a kernel family's host launcher, in call order. Pointer inputs are
# 8 bytes, int32 inputs 4 bytes (little endian), exactly as the DSL host code takes them.
# The grouped GEMM families all take these:
INPUT_KINDS: dict[str, str] = {
    "problem_sizes": "pointer",  # int32 [G, 4] rows (m, n, k, l)
    "abc_pointers": "pointer",  # int64 [G, 3] (A, B, C) device addresses
    "scale_pointers": "pointer",  # int64 [G, 2] (SFA, SFB) device addresses
    "cta_prefix": "pointer",  # int32 [G + 1] prefix sum of output tiles per group
    "tensormap_workspace": "pointer",  # Variant.workspace bytes (descriptors, scratch)
    "total_tiles": "int32",
    "persistent_blocks": "int32",
}
INPUT_NAMES = tuple(INPUT_KINDS)
# The MoE routing setup (nvfp4_aot/kernels/moe_routing.py, nvfp4_aot/moe.py):
ROUTING_INPUT_KINDS: dict[str, str] = {
    "plan": "pointer",  # int64 words written once per plan: sizes, strides, chunk tables
    "run": "pointer",  # int64 words per run: the routing array and the operands' bases
    "num_chunks": "int32",  # one CTA per chunk of at most G experts
}
# A grouped GEMM variant with a per-group alpha takes one more input, last:
ALPHA_INPUT_KINDS: dict[str, str] = {
    "alpha_pointers": "pointer",  # int64 [G] device address of each group's FP32 alpha
}
OUT_DTYPES = ("float16", "bfloat16")  # the C dtypes the GEMM epilogues write
# The NVFP4 activation quantizer (nvfp4_aot/kernels/nvfp4_quantize.py, nvfp4_aot/quantizer.py):
QUANTIZE_INPUT_KINDS: dict[str, str] = {
    "plan": "pointer",  # int64 words written once per plan: form, sizes, strides
    "run": "pointer",  # int64 words per run: X, codes, scales, global scale, routing, index
    "num_ctas": "int32",  # the grid: CTAs striding over the plan's units
}
# A routed grouped GEMM (a MoE launch whose CTAs build the group tables from the device
# counts themselves, nvfp4_aot/kernels/routed_groups.py) takes the routing kernel's words
# in place of the tables; alpha is a run word, not an input:
ROUTED_INPUT_KINDS: dict[str, str] = {
    "plan": "pointer",  # the MoE plan's int64 header words (nvfp4_aot/moe_layout.py)
    "run": "pointer",  # int64 words per run: the routing array and the operands' bases
    "tensormap_workspace": "pointer",
    "total_tiles": "int32",
    "persistent_blocks": "int32",
}
ROLE_GEMM = "grouped_gemm"
ROLE_ROUTED_GEMM = "routed_grouped_gemm"
ROLE_ROUTING = "moe_routing"
ROLE_QUANTIZE = "nvfp4_quantize"
ROLE_INPUTS = {
    ROLE_GEMM: INPUT_KINDS,
    ROLE_ROUTED_GEMM: ROUTED_INPUT_KINDS,
    ROLE_ROUTING: ROUTING_INPUT_KINDS,
    ROLE_QUANTIZE: QUANTIZE_INPUT_KINDS,
}
GEMM_ROLES = (ROLE_GEMM, ROLE_ROUTED_GEMM)  # the roles whose variants have an epilogue
ROUTED_SUFFIX = "_routed"  # a routed family's name: its table family's name + this
INPUT_SIZES = {"pointer": 8, "int32": 4}


@dataclass(frozen=True)
class Epilogue:
    """What a grouped GEMM variant writes: C in ``out_dtype``, times a per-group alpha
    read on the device when ``alpha`` (then the host launcher takes ``alpha_pointers``)."""

    out_dtype: str = "float16"
    alpha: bool = False

    def __post_init__(self):
        if self.out_dtype not in OUT_DTYPES:
            raise ValueError(f"out_dtype must be one of {OUT_DTYPES}, got {self.out_dtype!r}")

    @property
    def suffix(self) -> str:
        """The variant name's tail: none for the original FP16 epilogue without alpha."""
        dtype = "" if self.out_dtype == "float16" else ".bf16"
        return dtype + (".alpha" if self.alpha else "")

    def __str__(self) -> str:
        return self.out_dtype + (" x alpha" if self.alpha else "")


ORIGINAL_EPILOGUE = Epilogue()  # the seed kernel's: FP16, no alpha
# Every grouped GEMM family is baked with each of these.
EPILOGUES = tuple(Epilogue(dtype, alpha) for dtype in OUT_DTYPES for alpha in (False, True))


def input_kinds(role: str, alpha: bool = False) -> dict[str, str]:
    """The inputs of a ``role`` kernel's host launcher, in call order, with their kinds."""
    kinds = ROLE_INPUTS[role]
    return {**kinds, **ALPHA_INPUT_KINDS} if alpha and role == ROLE_GEMM else kinds


@dataclass(frozen=True)
class InputSlot:
    """Bytes ``[offset, offset + size)`` of a parameter hold input ``name`` (little endian)."""

    name: str
    offset: int
    size: int


@dataclass(frozen=True)
class KernelParam:
    """One kernel parameter: its place in the parameter buffer and how to fill it.

    ``constant_hex`` holds all ``size`` bytes as the DSL host code writes them, with input
    slots and padding zeroed; the runtime copies it and writes the slots.
    """

    index: int
    offset: int
    size: int
    align: int
    constant_hex: str
    slots: tuple[InputSlot, ...] = ()
    padding: tuple[tuple[int, int], ...] = ()  # [start, stop) ranges never written

    def __post_init__(self):
        if len(self.constant_hex) != 2 * self.size:
            raise ArtifactError(
                f"kernel parameter {self.index}: constant_hex holds "
                f"{len(self.constant_hex) // 2} bytes, expected {self.size}"
            )


@dataclass(frozen=True)
class GridDim:
    """One grid dimension: a constant, or the value of an int32 input."""

    constant: int | None = None
    input: str | None = None


@dataclass(frozen=True)
class LaunchAttribute:
    """A CUlaunchAttribute: id (same numbering in runtime and driver API) and its words."""

    id: int
    name: str
    values: tuple[int, ...]


@dataclass(frozen=True)
class FunctionAttribute:
    """A function attribute to set before launch.

    ``value`` is a constant, or None when the DSL host code sets it to the device attribute
    ``from_device_attribute`` (for instance the opt-in shared-memory maximum).
    """

    id: int
    name: str
    value: int | None = None
    from_device_attribute: int | None = None


@dataclass(frozen=True)
class Workspace:
    """The tensormap workspace one launch needs (the ``tensormap_workspace`` input).

    Bytes for a launch of ``persistent_blocks`` CTAs over groups of sizes (m, n, k):
    ``persistent_blocks x bytes_per_block + sum(m x round_up(k, activation_k_multiple))
    x activation_bytes_per_element``. With ``zero_once`` the
    workspace must be all zero before the kernel's first launch (a grid-barrier
    counter that every launch leaves at zero).
    """

    bytes_per_block: int = 4 * 128  # four 128-byte TMA descriptors per CTA
    activation_bytes_per_element: int = 0
    activation_k_multiple: int = 1
    zero_once: bool = False

    def __post_init__(self):
        for name in ("bytes_per_block", "activation_bytes_per_element"):
            if getattr(self, name) < 0:
                raise ValueError(f"workspace {name} must be >= 0, got {getattr(self, name)}")
        if self.activation_k_multiple < 1:
            raise ValueError(
                f"workspace activation_k_multiple must be >= 1, got {self.activation_k_multiple}"
            )

    def bytes_for(self, problem_sizes, persistent_blocks: int) -> int:
        """Workspace bytes of one launch of ``persistent_blocks`` CTAs over these groups."""
        total = persistent_blocks * self.bytes_per_block
        if self.activation_bytes_per_element:
            multiple = self.activation_k_multiple
            elements = sum(int(s[0]) * round_up(int(s[2]), multiple) for s in problem_sizes)
            total += elements * self.activation_bytes_per_element
        return total


@dataclass(frozen=True)
class Variant:
    """One baked kernel: a (kernel family, arch, group count) combination."""

    name: str
    family: str
    arch: str
    compute_capability: tuple[int, int]
    num_groups: int
    tile_mnk: tuple[int, int, int]
    cubin: str
    sha256: str
    cubin_bytes: int
    kernel_symbol: str
    block: tuple[int, int, int]
    cluster: tuple[int, int, int]
    grid: tuple[GridDim, GridDim, GridDim]
    dynamic_smem_bytes: int
    param_bytes: int
    params: tuple[KernelParam, ...]
    launch_attributes: tuple[LaunchAttribute, ...]
    function_attributes: tuple[FunctionAttribute, ...]
    registers: int | None = None
    workspace: Workspace = Workspace()
    role: str = ROLE_GEMM  # what the kernel does: a key of ROLE_INPUTS
    out_dtype: str = "float16"  # grouped GEMMs: the C dtype the epilogue writes
    alpha: bool = False  # grouped GEMMs: C = alpha[g] * A_g B_g^T, alpha per group
    blocks_per_sm: int = 1  # CTAs per SM of the persistent grid (the family's, compiled in)

    def __post_init__(self):
        if self.role not in ROLE_INPUTS:
            raise ValueError(f"role must be one of {sorted(ROLE_INPUTS)}, got {self.role!r}")
        self.epilogue  # noqa: B018  (checks out_dtype)

    @property
    def epilogue(self) -> Epilogue:
        return Epilogue(self.out_dtype, self.alpha)

    @property
    def input_kinds(self) -> dict[str, str]:
        """The host launcher's inputs, in call order, with their kinds."""
        return input_kinds(self.role, self.alpha)

    def slots_for(self, input_name: str) -> list[tuple[int, int]]:
        """Absolute (offset, size) of every place in the parameter buffer input goes."""
        return [
            (param.offset + slot.offset, slot.size)
            for param in self.params
            for slot in param.slots
            if slot.name == input_name
        ]


@dataclass(frozen=True)
class Manifest:
    """Everything ``artifacts/`` holds."""

    schema_version: int
    package_version: str
    dsl_version: str
    variants: tuple[Variant, ...]

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Manifest:
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ArtifactError(f"manifest is not valid JSON: {exc}") from exc
        if not isinstance(raw, dict):
            raise ArtifactError("manifest must be a JSON object")
        version = raw.get("schema_version")
        if version != SCHEMA_VERSION:
            raise ArtifactError(
                f"manifest schema_version is {version!r}, this nvfp4-aot reads "
                f"{SCHEMA_VERSION}; rebuild the artifacts with build_kernels.py or install "
                "a matching nvfp4-aot"
            )
        return _build(cls, raw, "manifest")

    def variant(self, family: str, arch: str, num_groups: int) -> Variant:
        for v in self.variants:
            if (v.family, v.arch, v.num_groups) == (family, arch, num_groups):
                return v
        raise ArtifactError(f"no variant {family}/{arch}/G={num_groups} in the manifest")


def _build(cls, raw: Any, where: str):
    """Construct dataclass ``cls`` from parsed JSON, naming the path of a bad field."""
    if not isinstance(raw, dict):
        raise ArtifactError(f"{where}: expected an object, got {type(raw).__name__}")
    kwargs = {}
    for f in fields(cls):
        if f.name not in raw:
            if f.default is not MISSING:
                continue
            raise ArtifactError(f"{where}: missing field {f.name!r}")
        kwargs[f.name] = _convert(f.type, raw[f.name], f"{where}.{f.name}")
    unknown = set(raw) - {f.name for f in fields(cls)}
    if unknown:
        raise ArtifactError(f"{where}: unknown field(s) {sorted(unknown)}")
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:
        raise ArtifactError(f"{where}: {exc}") from exc


_DATACLASSES = {
    c.__name__: c
    for c in (
        InputSlot,
        KernelParam,
        GridDim,
        LaunchAttribute,
        FunctionAttribute,
        Workspace,
        Variant,
    )
}


def _convert(type_text: str, value: Any, where: str):
    """Convert JSON ``value`` to the annotated type (annotations are strings here)."""
    t = type_text.replace(" ", "")
    if t.endswith("|None"):
        return None if value is None else _convert(t[: -len("|None")], value, where)
    if t in _DATACLASSES:
        return _build(_DATACLASSES[t], value, where)
    if t.startswith("tuple["):
        if not isinstance(value, list):
            raise ArtifactError(f"{where}: expected a list, got {type(value).__name__}")
        inner = t[len("tuple[") : -1]
        if inner.endswith(",..."):
            item = inner[: -len(",...")]
            return tuple(_convert(item, v, f"{where}[{i}]") for i, v in enumerate(value))
        items = _split_top(inner)
        if len(items) != len(value):
            raise ArtifactError(f"{where}: expected {len(items)} items, got {len(value)}")
        return tuple(
            _convert(it, v, f"{where}[{i}]") for i, (it, v) in enumerate(zip(items, value))
        )
    if t == "bool":
        if not isinstance(value, bool):
            raise ArtifactError(f"{where}: expected bool, got {value!r}")
        return value
    expected = {"int": int, "str": str, "float": (int, float)}[t]
    if isinstance(value, bool) or not isinstance(value, expected):
        raise ArtifactError(f"{where}: expected {t}, got {value!r}")
    return float(value) if t == "float" else value


def _split_top(text: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += ch == "["
        depth -= ch == "]"
        if ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


_REBAKE = "rebake with `python build_kernels.py` or reinstall nvfp4-aot"


def read_manifest(directory: Path) -> Manifest:
    """Read and validate ``directory/manifest.json``; errors name the file and the fix."""
    path = Path(directory) / MANIFEST_NAME
    try:
        text = path.read_text()
    except FileNotFoundError as exc:
        raise ArtifactError(
            f"{path} does not exist; run `python build_kernels.py` to bake the kernels"
        ) from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ArtifactError(f"{path} cannot be read ({exc}); {_REBAKE}") from exc
    try:
        manifest = Manifest.from_json(text)
    except ArtifactError as exc:
        advice = "" if "build_kernels.py" in str(exc) else f"; {_REBAKE}"
        raise ArtifactError(f"{path}: {exc}{advice}") from exc
    if not manifest.variants:
        raise ArtifactError(f"{path} lists no kernel variants; {_REBAKE}")
    return manifest
