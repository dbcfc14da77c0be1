"""Helpers shared by the test files (fixtures are in conftest.py, the driver fake in
fake_driver.py).

* Synthetic artifacts: a manifest whose "cubins" are minimal CUDA ELF headers (enough for
  ``cubin.cubin_sm``), with the captured seed kernel's parameter layout; no GPU and no
  CuTe DSL needed.
* Operand fakes: ``__cuda_array_interface__`` arrays and real DLPack capsules at fake
  device addresses.
* ``gpu_unavailable``: how a GPU test says the device cannot run it (a skip, or a
  failure under ``NVFP4_AOT_REQUIRE_GPU=1``).
* ``write_safetensors``: .safetensors files written byte by byte (no safetensors package).
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import random
import struct
from pathlib import Path
from typing import NoReturn

import numpy as np
import pytest

from nvfp4_aot import operands
from nvfp4_aot.layouts import blocked_scale_bytes
from nvfp4_aot.manifest import (
    MANIFEST_NAME,
    ORIGINAL_EPILOGUE,
    SCHEMA_VERSION,
    FunctionAttribute,
    GridDim,
    InputSlot,
    KernelParam,
    LaunchAttribute,
    Manifest,
    Variant,
    Workspace,
)

REPO = Path(__file__).resolve().parents[1]

# ---------------------------------------------------------------------------------------
# GPU tests: skip, or fail where a GPU is required

REQUIRE_GPU = "NVFP4_AOT_REQUIRE_GPU"


def gpu_required() -> bool:
    """Whether NVFP4_AOT_REQUIRE_GPU asks for GPU tests to fail rather than skip."""
    return os.environ.get(REQUIRE_GPU, "") not in ("", "0")


def gpu_unavailable(reason: str) -> NoReturn:
    """Skip the GPU test for ``reason`` (no GPU, no usable driver, no baked kernel for
    the GPU, a missing data file), or fail it where NVFP4_AOT_REQUIRE_GPU=1: on the GPU
    machine a broken device fixture must never pass as green."""
    if gpu_required():
        pytest.fail(f"{REQUIRE_GPU}=1, but {reason}", pytrace=False)
    pytest.skip(reason)


# ---------------------------------------------------------------------------------------
# synthetic artifacts

ARCHS = {"sm_90a": ((9, 0), 0x33), "sm_100a": ((10, 0), 0x41), "sm_103a": ((10, 3), 0x41)}
FAMILY = {"sm_90a": "sm90_nvfp4_grouped_gemm", "sm_100a": "sm100_nvfp4_grouped_gemm",
          "sm_103a": "sm100_nvfp4_grouped_gemm"}  # fmt: skip
# (offset, size, align, slots, padding) like the captured seed kernel ABI
LAYOUT = [(0, 12, 4, (), ())]
for i in range(4):
    LAYOUT += [(64 + 192 * i, 128, 64, (), ((64, 128),)), (192 + 192 * i, 12, 4, (), ())]
LAYOUT = LAYOUT[:9] + [
    (784, 8, 8, (("abc_pointers", 0, 8),), ()),
    (792, 8, 8, (("scale_pointers", 0, 8),), ()),
    (800, 16, 8, (("tensormap_workspace", 0, 8), ("persistent_blocks", 8, 4)), ((12, 16),)),
    (816, 8, 8, (("problem_sizes", 0, 8),), ()),
    (824, 8, 8, (("cta_prefix", 0, 8),), ()),
]
PARAM_BYTES = 832
SMEM = 184960


def fake_cubin(arch: str, seed: int) -> bytes:
    """64-byte CUDA ELF header (arch in e_flags as the OS ABI byte says) + filler."""
    (major, minor), osabi = ARCHS[arch]
    sm = major * 10 + minor
    flags = sm if osabi == 0x33 else sm << 8
    header = bytearray(64)
    header[:8] = b"\x7fELF\x02\x01\x01" + bytes([osabi])
    struct.pack_into("<H", header, 18, 190)
    struct.pack_into("<I", header, 48, flags)
    return bytes(header) + random.Random(seed).randbytes(512)


ALPHA_PARAM = (832, 8, 8, (("alpha_pointers", 0, 8),), ())  # a variant with alpha: last


def synthetic_variant(
    arch: str, num_groups: int, cubin: bytes, tile=(128, 128, 256), family=None,
    workspace=None, cooperative=0, epilogue=ORIGINAL_EPILOGUE, blocks_per_sm=1,
) -> Variant:  # fmt: skip
    rng = random.Random(f"{arch}{num_groups}")
    params = []
    layout = LAYOUT + [ALPHA_PARAM] if epilogue.alpha else LAYOUT
    for index, (offset, size, align, slots, padding) in enumerate(layout):
        constant = bytearray(rng.randbytes(size))
        for _name, at, width in slots:
            constant[at : at + width] = bytes(width)
        for start, stop in padding:
            constant[start:stop] = bytes(stop - start)
        params.append(
            KernelParam(index, offset, size, align, constant.hex(),
                        tuple(InputSlot(*s) for s in slots), padding)
        )  # fmt: skip
    family = family or FAMILY[arch]
    name = f"{family}.{arch}.g{num_groups}{epilogue.suffix}"
    return Variant(
        name=name,
        family=family,
        arch=arch,
        compute_capability=ARCHS[arch][0],
        num_groups=num_groups,
        tile_mnk=tile,
        cubin=f"{name}.cubin",
        sha256=hashlib.sha256(cubin).hexdigest(),
        cubin_bytes=len(cubin),
        kernel_symbol=f"kernel_{arch}_g{num_groups}",
        block=(192, 1, 1),
        cluster=(1, 1, 1),
        grid=(GridDim(input="persistent_blocks"), GridDim(constant=1), GridDim(constant=1)),
        dynamic_smem_bytes=SMEM,
        param_bytes=PARAM_BYTES + 8 * epilogue.alpha,
        params=tuple(params),
        launch_attributes=(
            LaunchAttribute(6, "programmatic_stream_serialization", (0,)),
            LaunchAttribute(4, "cluster_dimension", (1, 1, 1)),
            LaunchAttribute(2, "cooperative", (cooperative,)),
        ),
        function_attributes=(
            FunctionAttribute(8, "max_dynamic_shared_size_bytes", from_device_attribute=97),
            FunctionAttribute(14, "non_portable_cluster_size_allowed", value=1),
        ),
        registers=128,
        workspace=workspace or Workspace(),
        out_dtype=epilogue.out_dtype,
        alpha=epilogue.alpha,
        blocks_per_sm=blocks_per_sm,
    )


def write_synthetic(directory: Path, combos) -> Manifest:
    """Combos: (arch, groups) or (arch, groups, {synthetic_variant keyword arguments})."""
    directory.mkdir(parents=True, exist_ok=True)
    variants = []
    for seed, (arch, groups, *extra) in enumerate(combos):
        cubin = fake_cubin(arch, seed)
        variant = synthetic_variant(arch, groups, cubin, **(extra[0] if extra else {}))
        (directory / variant.cubin).write_bytes(cubin)
        variants.append(variant)
    manifest = Manifest(SCHEMA_VERSION, "0.1.0", "synthetic", tuple(variants))
    (directory / MANIFEST_NAME).write_text(manifest.to_json())
    return manifest


ALL_COMBOS = [("sm_90a", 8), ("sm_90a", 120), ("sm_100a", 8), ("sm_100a", 120), ("sm_103a", 8)]


def kernel_params_of(manifest: Manifest) -> dict[tuple[str, str], list[tuple[int, int]]]:
    """What FakeDriver reports per kernel, keyed (cubin sha256, symbol): the epilogues of
    one kernel share its symbol."""
    return {
        (v.sha256, v.kernel_symbol): [(p.offset, p.size) for p in v.params]
        for v in manifest.variants
    }


def installed_h200(artifacts=None):
    """A fake H200 (compute capability 9.0) that knows every kernel of ``artifacts`` (the
    committed ones by default), installed as the runtime's driver for a ``with`` block
    (fake_driver.installed); the block gets the fake."""
    from fake_driver import FakeDriver, installed
    from nvfp4_aot import loader

    manifest = loader.load_manifest(artifacts)
    return installed(FakeDriver(capability=(9, 0), kernel_params=kernel_params_of(manifest)))


# ---------------------------------------------------------------------------------------
# operands at fake device addresses


class FakeArray:
    """Exposes ``__cuda_array_interface__`` like CuPy (version 3)."""

    def __init__(
        self, pointer, shape, typestr, strides=None, readonly=False, stream=None, device=None
    ):
        self.__cuda_array_interface__ = {
            "version": 3, "shape": tuple(shape), "typestr": typestr, "data": (pointer, readonly),
            "strides": strides, "stream": stream,
        }  # fmt: skip
        if device is not None:
            self.device = type("Device", (), {"id": device})()


def group_arrays(m, n, k, base, *, c_typestr="<f2"):
    """FakeArrays for one group, at distinct 256-byte aligned fake addresses (fields 4 GiB
    apart, so that many groups 16 MiB apart never overlap)."""
    return (
        FakeArray(base, (m, k // 2), "|u1"),
        FakeArray(base + 0x1_0000_0000, (n, k // 2), "|u1"),
        FakeArray(base + 0x2_0000_0000, (m, n), c_typestr),
        FakeArray(base + 0x3_0000_0000, (blocked_scale_bytes(m, k),), "|u1"),
        FakeArray(base + 0x4_0000_0000, (blocked_scale_bytes(n, k),), "|u1"),
    )


def operands_for(sizes, base=0x10_0000_0000):
    groups = [group_arrays(m, n, k, base + g * 0x100_0000) for g, (m, n, k) in enumerate(sizes)]
    return [list(column) for column in zip(*groups)]


class DLPackArray:
    """Makes a real DLPack capsule (DLManagedTensor) with ctypes, as PyTorch would."""

    def __init__(
        self, pointer, shape, dtype, strides=None, device=(2, 0), byte_offset=0, versioned=False
    ):
        self.device = device
        self._shape = (ctypes.c_int64 * len(shape))(*shape)
        self._strides = (ctypes.c_int64 * len(shape))(*strides) if strides else None
        tensor = operands._DLTensor()
        tensor.data = pointer
        tensor.device = operands._DLDevice(*device)
        tensor.ndim = len(shape)
        tensor.dtype = operands._DLDataType(*dtype)
        tensor.shape = self._shape
        tensor.strides = self._strides
        tensor.byte_offset = byte_offset
        if versioned:
            self._managed = operands._DLManagedTensorVersioned()
            self._managed.version = operands._DLPackVersion(1, 1)
            self._managed.dl_tensor = tensor
            self._name = b"dltensor_versioned"
        else:
            self._managed = operands._DLManagedTensor()
            self._managed.dl_tensor = tensor
            self._name = b"dltensor"
        self.streams = []

    def __dlpack_device__(self):
        return self.device

    def __dlpack__(self, stream=None, max_version=None):
        self.streams.append(stream)
        new = ctypes.pythonapi.PyCapsule_New
        new.restype = ctypes.py_object
        new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        return new(ctypes.addressof(self._managed), self._name, None)


def address_of(array) -> int:
    return array.__cuda_array_interface__["data"][0]


# ---------------------------------------------------------------------------------------
# kernel families: the decode-once (a16) family next to the per-CTA one on sm_90a

A16 = "sm90_nvfp4_grouped_gemm_a16"
A16_WORKSPACE = Workspace(
    bytes_per_block=512, activation_bytes_per_element=2, activation_k_multiple=128, zero_once=True
)
A16_EXTRA = {"family": A16, "workspace": A16_WORKSPACE, "cooperative": 1}
# ... and the per-CTA kernel with 16- and 32-row activation tiles, two CTAs per SM
DECODE = "sm90_nvfp4_grouped_gemm_decode"
DECODE_EXTRA = {"family": DECODE, "tile": (16, 128, 128), "blocks_per_sm": 2}
DECODE32 = "sm90_nvfp4_grouped_gemm_decode32"
DECODE32_EXTRA = {"family": DECODE32, "tile": (32, 128, 128), "blocks_per_sm": 2}


# .safetensors files -------------------------------------------------------------------

SAFETENSORS_CODES = {
    "BF16": "<u2",
    "F16": "<f2",
    "F32": "<f4",
    "F64": "<f8",
    "F8_E4M3": "u1",
    "I32": "<i4",
    "U8": "u1",
}


def write_safetensors(path, tensors: dict, metadata=None, entries=None, cut: int = 0) -> None:
    """A .safetensors file as the format specifies it (header size, JSON header padded
    with spaces to 8 bytes as the safetensors package pads it, row-major little-endian
    data). ``tensors``: name -> (safetensors dtype, array). ``entries`` replaces header
    fields of named tensors (malformed files); ``cut`` drops bytes from the end."""
    header, blobs, offset = {}, [], 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, (dtype, array) in tensors.items():
        data = np.ascontiguousarray(array, dtype=SAFETENSORS_CODES[dtype]).tobytes()
        header[name] = {"dtype": dtype, "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(data)]}  # fmt: skip
        blobs.append(data)
        offset += len(data)
    for name, fields in (entries or {}).items():
        header[name].update(fields)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    raw = struct.pack("<Q", len(text)) + text + b"".join(blobs)
    path.write_bytes(raw[: len(raw) - cut])
