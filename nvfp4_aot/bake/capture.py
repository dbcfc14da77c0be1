"""Capture the exact launch a CuTe DSL host launcher makes, with no GPU.

The object written by ``compiled.export_to_c()`` is linked with ``recorder.c`` (recording
stand-ins for the eight CUDA runtime functions it imports) and its entry point is called
several times with a distinct stack poison byte and distinct random values for the
inputs: pointers, and int32 values that alternate between large sentinels and small,
realistic ones (1..200, what the host code sees at run time; a value the host code
clamps or derives from then changes between captures instead of looking constant).
Within a capture no two inputs share a value. Then, for each kernel parameter byte:

* equal in every capture               -> constant,
* the little-endian encoding of exactly one input in every capture -> an input slot,
* equal to that capture's poison byte  -> never written by the host code (padding),
* anything else                        -> the build fails (:class:`CaptureError`).

The result is the :class:`~nvfp4_aot.manifest.Variant` from which the runtime packs, byte
for byte, what the DSL would have passed.
"""

from __future__ import annotations

import ctypes
import hashlib
import random
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ..cubin import fatbin_cubins, fatbin_size, read_cubin
from ..driver import (
    ATTR_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
    FUNC_ATTR_SHARED_SIZE_BYTES,
    FUNCTION_ATTRIBUTES,
    LAUNCH_ATTR_CLUSTER_DIMENSION,
    LAUNCH_ATTRIBUTES,
)
from ..errors import CaptureError
from ..manifest import (
    INPUT_KINDS,
    INPUT_SIZES,
    FunctionAttribute,
    GridDim,
    InputSlot,
    KernelParam,
    LaunchAttribute,
    Variant,
    input_kinds,
)
from .ptx import entry_params

RECORDER_SOURCE = Path(__file__).with_name("recorder.c")

# cudaDeviceGetAttribute answers given to the host code; the opt-in shared memory limit
# is varied between captures so that a function attribute derived from it is detected.
_SMEM_OPTIN_ANSWERS = (232448, 228352, 227328)
_EXPECTED_DEVICE_QUERIES = {ATTR_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN}
_EXPECTED_KERNEL_QUERIES = {FUNC_ATTR_SHARED_SIZE_BYTES}
_POISONS = (0xAB, 0x5C, 0xE7, 0x3D)
# int32 trial values: sentinels (no realistic value, unlikely anywhere by chance) and
# realistic values (tile and CTA counts as the runtime passes them)
SENTINEL_INT32 = range(1 << 16, 1 << 20)
REALISTIC_INT32 = range(1, 201)
DEFAULT_CAPTURES = 4  # alternately sentinel and realistic int32 values
_CALL_DEVICE_GET_ATTR, _CALL_KERNEL_GET_ATTR = 4, 3
_CALL_KERNEL_SET_ATTR, _CALL_FUNC_SET_ATTR = 6, 7


class _Call(ctypes.Structure):
    _fields_ = [
        ("kind", ctypes.c_int),
        ("attr", ctypes.c_int),
        ("value", ctypes.c_longlong),
        ("device", ctypes.c_int),
    ]


@dataclass(frozen=True)
class RawCapture:
    """What one call of the host launcher did."""

    inputs: dict[str, int]
    poison: int
    smem_optin: int
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    dynamic_smem_bytes: int
    launch_attributes: tuple[tuple[int, bytes], ...]
    calls: tuple[tuple[int, int, int], ...]  # (kind, attr, value)
    params: tuple[bytes, ...]
    kernel_name: str
    embedded_cubins: tuple[bytes, ...]


@dataclass(frozen=True)
class ExportedKernel:
    """The files a DSL compile left behind for one variant."""

    object_file: Path
    header: Path
    cubin: Path
    ptx: Path
    prefix: str


def link_recorder(exported: ExportedKernel, workdir: Path) -> Path:
    """Link the exported object with the recorder into a shared library."""
    header = exported.header.read_text()
    prefix = re.escape(exported.prefix)
    entry = re.search(rf"void (_mlir_{prefix}__mlir_ciface_\w+)\(void \*\*args", header)
    if entry is None:
        raise CaptureError(f"no entry point declaration found in {exported.header}")
    workdir.mkdir(parents=True, exist_ok=True)
    library = workdir / f"{exported.prefix}_recorder.so"
    command = [
        "gcc", "-shared", "-fPIC", "-O1", "-o", str(library), str(RECORDER_SOURCE),
        str(exported.object_file), f"-DNVFP4_ENTRY={entry.group(1)}",
        f"-DNVFP4_INIT=_mlir_{exported.prefix}_cuda_init",
        f"-DNVFP4_LOAD=_mlir_{exported.prefix}_cuda_load_to_device",
    ]  # fmt: skip
    try:
        subprocess.run(command, check=True, capture_output=True, text=True)
    except FileNotFoundError as exc:
        raise CaptureError("gcc is needed to capture the launch ABI; install gcc") from exc
    except subprocess.CalledProcessError as exc:
        raise CaptureError(f"linking the launch recorder failed:\n{exc.stderr}") from exc
    return library


def _embedded_cubins(address: int) -> list[bytes]:
    """The cubins inside the fat binary the host code hands to cudaLibraryLoadData."""
    return fatbin_cubins(ctypes.string_at(address, fatbin_size(ctypes.string_at(address, 16))))


def random_inputs(
    rng: random.Random, realistic: bool, kinds: dict[str, str] = INPUT_KINDS
) -> dict[str, int]:
    """A value for every input of ``kinds``, in their order, no two alike: int32 values
    drawn without replacement from :data:`REALISTIC_INT32` or :data:`SENTINEL_INT32`,
    and random 16-byte aligned pointers (the alignment the DSL assumes)."""
    int32s = [name for name, kind in kinds.items() if kind == "int32"]
    pool = REALISTIC_INT32 if realistic else SENTINEL_INT32
    drawn = dict(zip(int32s, rng.sample(pool, len(int32s))))
    values: dict[str, int] = {}
    for name in kinds:
        while name not in values:
            value = drawn[name] if name in drawn else rng.getrandbits(64) & ~0xF
            if value not in values.values():
                values[name] = value
    return values


def trials(
    seed: int, captures: int = DEFAULT_CAPTURES, kinds: dict[str, str] | None = None
) -> list[tuple[dict[str, int], int, int]]:
    """(inputs, poison byte, opt-in shared memory answer) of every capture.

    The int32 inputs alternate between sentinel and realistic values, so that a slot
    must hold its input in both (a small value alone may occur anywhere by chance) and
    a byte the host code derives from a realistic value cannot pass as a constant.
    """
    if not 2 <= captures <= len(_POISONS):
        raise CaptureError(
            f"{captures} captures asked for: at least two are needed to tell inputs from "
            f"constants, at most {len(_POISONS)} (one poison byte each)"
        )
    rng = random.Random(seed)
    return [
        (
            random_inputs(rng, i % 2 == 1, kinds or INPUT_KINDS),
            _POISONS[i],
            _SMEM_OPTIN_ANSWERS[i % len(_SMEM_OPTIN_ANSWERS)],
        )
        for i in range(captures)
    ]


def capture_once(
    library: Path, param_sizes: list[int], inputs: dict[str, int], poison: int, smem_optin: int
) -> RawCapture:
    """Call the host launcher once in a fresh copy of the recorder library."""
    # A fresh file per call: ctypes would hand back the already-loaded library (and its
    # state) for a path it has seen.
    copy = library.with_name(f"{library.stem}_{poison:02x}_{smem_optin}.so")
    shutil.copyfile(library, copy)
    lib = ctypes.CDLL(str(copy))
    (ctypes.c_uint * 64).in_dll(lib, "rec_param_sizes")[: len(param_sizes)] = param_sizes
    ctypes.c_int.in_dll(lib, "rec_num_params").value = len(param_sizes)
    device_attrs = (ctypes.c_int * 256).in_dll(lib, "rec_device_attr_values")
    device_attrs[ATTR_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN] = smem_optin
    slots = (ctypes.c_uint64 * len(inputs))(*inputs.values())  # in the launcher's order
    status = lib.capture_launch(slots, len(inputs), poison)
    launches = ctypes.c_int.in_dll(lib, "rec_num_launches").value
    if status != 0 or launches != 1:
        raise CaptureError(
            f"the host launcher returned {status} after {launches} launches (expected 0, 1)"
        )
    num_calls = ctypes.c_int.in_dll(lib, "rec_num_calls").value
    calls = tuple(
        (c.kind, c.attr, c.value) for c in (_Call * 256).in_dll(lib, "rec_calls")[:num_calls]
    )
    num_attrs = ctypes.c_uint.in_dll(lib, "rec_num_attrs").value
    raw_attrs = bytes((ctypes.c_ubyte * (72 * 16)).in_dll(lib, "rec_attrs"))
    attrs = tuple(
        (
            int.from_bytes(raw_attrs[i * 72 : i * 72 + 4], "little"),
            raw_attrs[i * 72 + 8 : i * 72 + 72],
        )
        for i in range(num_attrs)
    )
    blob = bytes((ctypes.c_ubyte * sum(param_sizes)).in_dll(lib, "rec_param_bytes"))
    params, offset = [], 0
    for size in param_sizes:
        params.append(blob[offset : offset + size])
        offset += size
    code = ctypes.c_void_p.in_dll(lib, "rec_code").value
    name = ctypes.string_at(ctypes.addressof(ctypes.c_char.in_dll(lib, "rec_kernel_name"))).decode()
    return RawCapture(
        inputs=dict(inputs),
        poison=poison,
        smem_optin=smem_optin,
        grid=tuple((ctypes.c_uint * 3).in_dll(lib, "rec_grid")),
        block=tuple((ctypes.c_uint * 3).in_dll(lib, "rec_block")),
        dynamic_smem_bytes=ctypes.c_ulonglong.in_dll(lib, "rec_smem").value,
        launch_attributes=attrs,
        calls=calls,
        params=tuple(params),
        kernel_name=name,
        embedded_cubins=tuple(_embedded_cubins(code)),
    )


def _classify_param(
    index: int, offset: int, align: int, captures: list[RawCapture],
    kinds: dict[str, str] = INPUT_KINDS,
) -> KernelParam:  # fmt: skip
    """Explain every byte of parameter ``index`` or raise CaptureError."""
    images = [c.params[index] for c in captures]
    size = len(images[0])
    slots: list[InputSlot] = []
    claimed = [False] * size
    for name, kind in kinds.items():
        width = INPUT_SIZES[kind]
        encodings = [c.inputs[name].to_bytes(width, "little") for c in captures]
        for start in range(0, size - width + 1):
            if all(img[start : start + width] == enc for img, enc in zip(images, encodings)):
                if any(claimed[start : start + width]):
                    raise CaptureError(
                        f"parameter {index}: bytes {start}..{start + width - 1} match input "
                        f"{name!r} and another input at once"
                    )
                slots.append(InputSlot(name, start, width))
                claimed[start : start + width] = [True] * width
    constant = bytearray(size)
    padding: list[int] = []
    for i in range(size):
        column = [img[i] for img in images]
        if claimed[i]:
            continue
        if all(b == column[0] for b in column):
            constant[i] = column[0]
        elif all(b == c.poison for b, c in zip(column, captures)):
            padding.append(i)
        else:
            raise CaptureError(
                f"parameter {index} byte {i} changes between captures "
                f"({', '.join(f'0x{b:02x}' for b in column)}) but is explained by no input "
                "and is not unwritten padding; the launch ABI cannot be reproduced"
            )
    return KernelParam(
        index=index,
        offset=offset,
        size=size,
        align=align,
        constant_hex=constant.hex(),
        slots=tuple(slots),
        padding=_ranges(padding),
    )


def _ranges(indices: list[int]) -> tuple[tuple[int, int], ...]:
    ranges: list[list[int]] = []
    for i in indices:
        if ranges and ranges[-1][1] == i:
            ranges[-1][1] = i + 1
        else:
            ranges.append([i, i + 1])
    return tuple((a, b) for a, b in ranges)


def _grid_dim(axis: int, captures: list[RawCapture], kinds: dict[str, str]) -> GridDim:
    values = [c.grid[axis] for c in captures]
    if all(v == values[0] for v in values):
        return GridDim(constant=values[0])
    sources = [
        name
        for name, kind in kinds.items()
        if kind == "int32" and all(c.inputs[name] == v for c, v in zip(captures, values))
    ]
    if len(sources) != 1:
        raise CaptureError(
            f"grid dimension {axis} varies ({values}) and no single input explains it"
        )
    return GridDim(input=sources[0])


def _same(what: str, values: list):
    if any(v != values[0] for v in values):
        raise CaptureError(f"{what} differs between captures: {values}")
    return values[0]


def _launch_attributes(captures: list[RawCapture]) -> tuple[LaunchAttribute, ...]:
    ids = _same(
        "launch attribute ids", [tuple(a for a, _ in c.launch_attributes) for c in captures]
    )
    result = []
    for position, attr_id in enumerate(ids):
        if attr_id not in LAUNCH_ATTRIBUTES:
            raise CaptureError(f"launch attribute id {attr_id} is not known to nvfp4-aot")
        name, words = LAUNCH_ATTRIBUTES[attr_id]
        values = _same(
            f"launch attribute {name}",
            [
                tuple(
                    int.from_bytes(c.launch_attributes[position][1][4 * w : 4 * w + 4], "little")
                    for w in range(words)
                )
                for c in captures
            ],
        )
        result.append(LaunchAttribute(attr_id, name, values))
    return tuple(result)


def _function_attributes(captures: list[RawCapture]) -> tuple[FunctionAttribute, ...]:
    for c in captures:
        for kind, attr, _ in c.calls:
            if kind == _CALL_DEVICE_GET_ATTR and attr not in _EXPECTED_DEVICE_QUERIES:
                raise CaptureError(f"the host code queries device attribute {attr}, not known here")
            if kind == _CALL_KERNEL_GET_ATTR and attr not in _EXPECTED_KERNEL_QUERIES:
                raise CaptureError(f"the host code queries kernel attribute {attr}, not known here")
    sets = [
        [
            (attr, value)
            for kind, attr, value in c.calls
            if kind in (_CALL_KERNEL_SET_ATTR, _CALL_FUNC_SET_ATTR)
        ]
        for c in captures
    ]
    ids = _same("function attributes set", [[a for a, _ in s] for s in sets])
    result = []
    for position, attr_id in enumerate(ids):
        if attr_id not in FUNCTION_ATTRIBUTES:
            raise CaptureError(f"function attribute id {attr_id} is not known to nvfp4-aot")
        values = [s[position][1] for s in sets]
        if all(v == c.smem_optin for v, c in zip(values, captures)):
            attribute = FunctionAttribute(
                attr_id,
                FUNCTION_ATTRIBUTES[attr_id],
                from_device_attribute=ATTR_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
            )
        else:
            value = _same(f"function attribute {FUNCTION_ATTRIBUTES[attr_id]}", values)
            attribute = FunctionAttribute(attr_id, FUNCTION_ATTRIBUTES[attr_id], value=value)
        if attribute not in result:  # the DSL sets some attributes twice (kernel and func)
            result.append(attribute)
    return tuple(result)


def capture_launch(
    exported: ExportedKernel,
    workdir: Path,
    seed: int = 0,
    captures: int = DEFAULT_CAPTURES,
    **identity,
) -> Variant:
    """Run the differential capture and every cross-check; raise CaptureError on doubt.

    ``identity`` holds the :class:`Variant` fields a capture does not determine (name,
    family, arch, compute_capability, num_groups, tile_mnk, cubin, workspace, role and
    for a grouped GEMM its epilogue's out_dtype and alpha); the
    capture adds the cubin's hash and size and the proven launch ABI.
    """
    cubin = exported.cubin.read_bytes()
    info = read_cubin(cubin)
    major, minor = identity["compute_capability"]
    if info.sm != major * 10 + minor:
        raise CaptureError(f"the cubin for {identity['arch']} says it is for sm_{info.sm}")
    ptx_name, ptx_params = entry_params(exported.ptx.read_text())
    if info.kernel_names != (ptx_name,):
        raise CaptureError(
            f"cubin kernels {info.kernel_names} differ from the PTX entry {ptx_name}"
        )
    records = info.params[ptx_name]
    if [p.size for p in records] != [p.size for p in ptx_params]:
        raise CaptureError(
            f"parameter sizes differ: cubin .nv.info {[p.size for p in records]}, "
            f"PTX {[p.size for p in ptx_params]}"
        )
    # .nv.info offsets are relative to the parameter bank's base, whose alignment is the
    # compiler's business (sm_90 starts at 48 for a 64-aligned first parameter), so only
    # order and overlap are checked here; the runtime checks cuFuncGetParamInfo.
    for prev, rec in zip(records, records[1:]):
        if rec.offset < prev.offset + prev.size:
            raise CaptureError(
                f"kernel parameters {prev.ordinal} and {rec.ordinal} overlap in .nv.info"
            )

    library = link_recorder(exported, workdir)
    sizes = [p.size for p in records]
    kinds = input_kinds(identity["role"], identity.get("alpha", False))
    runs = [capture_once(library, sizes, *trial) for trial in trials(seed, captures, kinds)]
    _same("kernel name", [r.kernel_name for r in runs])
    if runs[0].kernel_name != ptx_name:
        raise CaptureError(
            f"the host code launches {runs[0].kernel_name}, the cubin holds {ptx_name}"
        )
    for run in runs:
        if run.embedded_cubins != (cubin,):
            raise CaptureError(
                "the cubin embedded in the host object differs from the dumped cubin"
            )
    block = _same("block", [r.block for r in runs])
    if ptx_name in info.required_block and info.required_block[ptx_name] != block:
        raise CaptureError(
            f"block {block} differs from the cubin's .reqntid {info.required_block[ptx_name]}"
        )
    params = tuple(
        _classify_param(i, rec.offset, p.align, runs, kinds)
        for i, (rec, p) in enumerate(zip(records, ptx_params))
    )
    launch_attributes = _launch_attributes(runs)
    cluster = next(
        (a.values for a in launch_attributes if a.id == LAUNCH_ATTR_CLUSTER_DIMENSION), (1, 1, 1)
    )
    return Variant(
        **identity,
        sha256=hashlib.sha256(cubin).hexdigest(),
        cubin_bytes=len(cubin),
        kernel_symbol=ptx_name,
        block=block,
        cluster=tuple(cluster),
        grid=tuple(_grid_dim(axis, runs, kinds) for axis in range(3)),
        dynamic_smem_bytes=_same("dynamic shared memory", [r.dynamic_smem_bytes for r in runs]),
        param_bytes=info.param_bytes.get(ptx_name, records[-1].offset + records[-1].size),
        params=params,
        launch_attributes=launch_attributes,
        function_attributes=_function_attributes(runs),
        registers=info.registers.get(ptx_name),
    )
