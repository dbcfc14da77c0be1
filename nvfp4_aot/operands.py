"""Normalise kernel operands and streams without importing any array library.

An operand is one of

* a raw device pointer (an ``int``): its extent is implied by the problem sizes and
  only its address can be checked;
* an object with ``__cuda_array_interface__`` (CuPy, Numba, PyTorch): the dict gives
  the address, shape, typestr, strides, read-only flag and (version 3) the stream
  the producer last used;
* an object with ``__dlpack__`` / ``__dlpack_device__`` (PyTorch, JAX, CuPy): the
  capsule's ``DLManagedTensor`` (or ``DLManagedTensorVersioned``) is read through ctypes.
  The capsule is not consumed: its own destructor frees it, while the producer's object
  keeps the memory alive.

Dtypes are reduced to short codes: ``u1`` (uint8), ``i1`` (int8), ``i4`` (int32),
``f2`` (float16), ``bf16`` (bfloat16), ``f4`` (float32),
``e4m3`` (float8_e4m3fn), ``e2m1x2`` (two FP4 values per byte), ``e2m1`` (one FP4 value
per element, two per byte in memory) and ``v1`` (an opaque 1-byte type, e.g. an
ml_dtypes float8 in a ``|V1`` typestr).
"""

from __future__ import annotations

import ctypes
import operator
from dataclasses import dataclass

KDL_CUDA = 2
KDL_CUDA_MANAGED = 13
_DEVICE_NAMES = {1: "CPU", 2: "CUDA", 3: "CUDA host", 4: "OpenCL", 7: "Vulkan", 8: "Metal",
                 10: "ROCm", 13: "CUDA managed", 14: "oneAPI"}  # fmt: skip
_DLPACK_FLAG_READ_ONLY = 1
# (DLDataTypeCode, bits, lanes) -> dtype code
_DLPACK_DTYPES = {
    (1, 8, 1): "u1",
    (0, 8, 1): "i1",
    (2, 16, 1): "f2",
    (0, 32, 1): "i4",  # int32: MoE routing counts and offsets
    (2, 32, 1): "f4",  # float32: per-group alpha, the quantizer's global scale
    (4, 16, 1): "bf16",  # kDLBfloat
    (10, 8, 1): "e4m3",  # kDLFloat8_e4m3fn
    (17, 4, 2): "e2m1x2",  # kDLFloat4_e2m1fn, two lanes in a byte
    (17, 4, 1): "e2m1",
    (1, 16, 1): "u2",  # the activation quantizer's input: bfloat16 as uint16 bit patterns
}
_TYPESTRS = {"u1": "u1", "i1": "i1", "f2": "f2", "V1": "v1", "i4": "i4", "u2": "u2", "f4": "f4"}
_BITS = {
    "u1": 8,
    "i1": 8,
    "f2": 16,
    "e4m3": 8,
    "e2m1x2": 8,
    "e2m1": 4,
    "v1": 8,
    "i4": 32,
    "f4": 32,
    "bf16": 16,
    "u2": 16,
}


@dataclass(frozen=True, slots=True)
class DeviceArray:
    """What the runtime needs to know about one operand.

    ``shape`` and ``strides`` (in elements) are None for a raw pointer; ``strides`` is
    None for a C-contiguous array. ``device`` is None where the producer does not say.
    ``stream`` is the producer's stream (``__cuda_array_interface__`` v3), or None.
    """

    pointer: int
    shape: tuple[int, ...] | None = None
    strides: tuple[int, ...] | None = None
    dtype: str | None = None
    readonly: bool = False
    device: int | None = None
    stream: int | None = None

    @property
    def bits(self) -> int:
        return _BITS[self.dtype]


# streams ---------------------------------------------------------------------------------


def stream_handle(stream) -> int:
    """The raw ``CUstream`` handle of ``stream`` as an int.

    Accepts None (the legacy default stream, handle 0), an int handle, a
    ``cuda.bindings.driver.CUstream``, an object with ``__cuda_stream__`` (the CUDA
    stream protocol: a method or attribute giving ``(version, handle)``), a CuPy stream
    (``.ptr``), a PyTorch stream (``.cuda_stream``) or a Numba stream (``.handle``).
    """
    if stream is None:
        return 0
    if isinstance(stream, bool):
        raise TypeError(f"stream must be a stream object or handle, got {stream!r}")
    if isinstance(stream, int):
        if stream < 0:
            raise ValueError(f"stream handle must be >= 0, got {stream}")
        return stream
    protocol = getattr(stream, "__cuda_stream__", None)
    if protocol is not None:
        value = protocol() if callable(protocol) else protocol
        try:
            _version, handle = value
        except (TypeError, ValueError) as exc:
            raise TypeError(
                f"__cuda_stream__ of {type(stream).__name__} must give (version, handle), "
                f"got {value!r}"
            ) from exc
        return int(handle)
    for attribute in ("cuda_stream", "ptr"):
        value = getattr(stream, attribute, None)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    handle = getattr(stream, "handle", None)
    if handle is not None:
        value = getattr(handle, "value", handle)  # ctypes.c_void_p (Numba)
        return int(value or 0)
    if type(stream).__name__ == "CUstream":
        return int(stream)
    raise TypeError(
        f"cannot get a CUDA stream handle from {type(stream).__name__}: pass None, an int "
        "handle, a CUstream or an object with __cuda_stream__, .cuda_stream or .ptr"
    )


def interface_stream(handle: int) -> int:
    """How the array protocols name a launch on stream ``handle``: the ``stream``
    argument of ``__dlpack__`` and the producer stream of ``__cuda_array_interface__``
    v3. Both reserve 0; the legacy default stream is 1 there.
    """
    return 1 if handle == 0 else handle


# arrays ------------------------------------------------------------------------------------


def device_array(obj, stream: int = 0) -> DeviceArray:
    """Describe ``obj`` (pointer, CUDA array interface or DLPack) as a DeviceArray.

    ``stream`` is the launch stream, passed to ``__dlpack__`` so that the producer can
    order its pending work before it.

    Raises
    ------
    TypeError, ValueError
        Without group or field names; :func:`nvfp4_aot.plan` adds them.
    """
    if isinstance(obj, DeviceArray):
        return obj
    if isinstance(obj, int) and not isinstance(obj, bool):
        if obj < 0:
            raise ValueError(f"a device pointer must be >= 0, got {obj}")
        return DeviceArray(obj)
    interface = cuda_array_interface(obj)
    if interface is not None:
        return _from_cuda_array_interface(obj, interface)
    if hasattr(obj, "__dlpack__"):
        return _from_dlpack(obj, stream)
    if hasattr(obj, "__index__") and not isinstance(obj, bool):
        return device_array(operator.index(obj), stream)
    raise TypeError(
        f"expected a device pointer (int), an object with __cuda_array_interface__ or "
        f"with __dlpack__, got {type(obj).__name__}"
    )


def cuda_array_interface(obj) -> dict | None:
    """``obj.__cuda_array_interface__``, or None where DLPack should describe ``obj``.

    DLPack is preferred when the interface names no producer stream (version < 3, as
    JAX's and PyTorch's): ``__dlpack__(stream=...)`` makes the launch stream wait for
    the producer's pending work, which a stream-less interface cannot. PyTorch also
    raises from the property for dtypes it has no typestr for (float8, FP4) and for
    tensors that require grad; DLPack describes those too.
    """
    try:
        interface = getattr(obj, "__cuda_array_interface__", None)
    except Exception:
        if hasattr(obj, "__dlpack__"):
            return None
        raise
    if (
        isinstance(interface, dict)
        and interface.get("stream") is None
        and interface.get("version", 0) < 3
        and hasattr(obj, "__dlpack__")
    ):
        return None
    return interface


def _from_cuda_array_interface(obj, interface: dict) -> DeviceArray:
    if not isinstance(interface, dict):
        raise TypeError(f"__cuda_array_interface__ must be a dict, got {type(interface).__name__}")
    version = interface.get("version")
    if not isinstance(version, int) or version < 0:
        raise ValueError(f"__cuda_array_interface__ version must be an int >= 0, got {version!r}")
    if interface.get("mask") is not None:
        raise ValueError("masked arrays (__cuda_array_interface__ 'mask') are not supported")
    try:
        pointer, readonly = interface["data"]
        shape = tuple(int(s) for s in interface["shape"])
        typestr = interface["typestr"]
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"malformed __cuda_array_interface__: {exc!r}") from exc
    dtype = _TYPESTRS.get(typestr[1:]) if isinstance(typestr, str) else None
    if dtype is None:
        raise ValueError(f"unsupported dtype (typestr {typestr!r})")
    itemsize = _BITS[dtype] // 8
    strides = interface.get("strides")
    if strides is not None:
        raw = tuple(int(s) for s in strides)
        if any(s % itemsize for s in raw):
            raise ValueError(f"strides {raw} bytes are not multiples of the item size {itemsize}")
        strides = tuple(s // itemsize for s in raw)
        if strides == _contiguous_strides(shape):
            strides = None
    stream = interface.get("stream") if version >= 3 else None
    return DeviceArray(
        int(pointer or 0), shape, strides, dtype, bool(readonly), device_of(obj), stream
    )


def device_of(obj) -> int | None:
    """Device ordinal of a CuPy (``.device.id``) or PyTorch (``.device.index``) array."""
    return device_index(getattr(obj, "device", None))


def device_index(device) -> int | None:
    """Ordinal of a CuPy (``.id``) or PyTorch (``.index``) device object, else None."""
    if device is None:
        return None
    for attribute in ("id", "index"):
        value = getattr(device, attribute, None)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def _contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, step = [], 1
    for extent in reversed(shape):
        strides.append(step)
        step *= extent
    return tuple(reversed(strides))


# dtypes each kind of operand may have: packed FP4 data, E4M3 block scales
FP4_DTYPES = ("u1", "i1", "e2m1x2", "e2m1", "v1")
SCALE_DTYPES = ("u1", "i1", "e4m3", "v1")
TORCH_FP4_DTYPES = ("torch.uint8", "torch.int8", "torch.float4_e2m1fn_x2")
TORCH_SCALE_DTYPES = ("torch.uint8", "torch.int8", "torch.float8_e4m3fn")
# C per output dtype (manifest.OUT_DTYPES): the dtype code, the torch dtype name
OUT_DTYPE_CODES = {"float16": "f2", "bfloat16": "bf16"}
TORCH_OUT_DTYPES = {"float16": ("torch.float16",), "bfloat16": ("torch.bfloat16",)}
# the per-group (per-expert) alpha: float32
TORCH_ALPHA_DTYPES = ("torch.float32",)


def out_dtype_name(value) -> str:
    """``"float16"`` or ``"bfloat16"`` from that name or a numpy, ml_dtypes, torch or JAX
    dtype; ValueError otherwise."""
    name = value if isinstance(value, str) else getattr(value, "name", None)
    if not isinstance(name, str):
        name = getattr(value, "__name__", None) or str(value)
    name = name.removeprefix("torch.")
    if name not in OUT_DTYPE_CODES:
        raise ValueError(f"out_dtype must be float16 or bfloat16, got {value!r}")
    return name


def check_alpha(array: DeviceArray, count: int) -> str | None:
    """Why ``array`` cannot hold one float32 alpha per group of ``count``, or None."""
    if array.shape is None:
        return None
    if array.dtype != "f4":
        return f"must have dtype float32, got {array.dtype}"
    if not is_dense(array.shape, array.strides):
        return f"must be dense, got shape {array.shape} strides {array.strides}"
    size = nbytes(array) // 4
    if size < count:
        return f"must hold at least {count} float32 values (one per group), got {size}"
    return None


# PyTorch tensors, duck-typed -------------------------------------------------------------

_torch_dtype_names: dict = {}  # a torch dtype object -> its name, str() once per dtype


def torch_pointer(obj, dtypes, device: int, shapes=None, min_bytes: int = 0) -> int | None:
    """The address of a CUDA ``torch.Tensor`` that plainly fits, read through its
    attributes (the runtime never imports torch; a DLPack capsule or a
    ``__cuda_array_interface__`` dict costs several times more per tensor), else None.

    Fits: dtype named in ``dtypes`` (``"torch.uint8"``...), on ``device``, contiguous, and
    a shape in ``shapes`` (or, without shapes, at least ``min_bytes`` bytes). Anything
    else is left to :func:`device_array`, which accepts it or says what is wrong.
    """
    if not getattr(obj, "is_cuda", False):
        return None
    dtype = obj.dtype
    name = _torch_dtype_names.get(dtype)
    if name is None:
        name = _torch_dtype_names.setdefault(dtype, str(dtype))
    if name not in dtypes or obj.get_device() != device or not obj.is_contiguous():
        return None
    if shapes is not None:
        fits = obj.shape in shapes  # torch.Size compares equal to a tuple
    else:
        fits = obj.numel() * obj.element_size() >= min_bytes
    return obj.data_ptr() if fits else None


class TorchOperands:
    """:func:`torch_pointer` for every operand of a whole-array plan's run in one pass (MoE,
    quantizer): per field, the torch dtype names it takes (each dtype object's verdict
    kept after its first sight), the shapes it takes (or None: at least ``min_bytes[field]``
    bytes). Every tensor is re-read on every call (dtype, device, contiguity, shape,
    address: any of them may change in place), but nothing is hashed or built per
    operand."""

    def __init__(self, device: int, fields, dtypes: dict, shapes: dict, min_bytes: dict):
        self.device = device
        self._rules = tuple(
            ({}, dtypes[field], shapes.get(field), min_bytes.get(field, 0)) for field in fields
        )

    def pointers(self, operands) -> list:
        """Per operand: itself where an int, the address of a tensor that plainly fits,
        else None (for the plan's full description, which accepts it or says why not)."""
        device = self.device
        out = []
        append = out.append
        for obj, (verdicts, names, shapes, least) in zip(operands, self._rules):
            if type(obj) is int:
                append(obj)
                continue
            if getattr(obj, "is_cuda", False):
                dtype = obj.dtype
                ok = verdicts.get(dtype)
                if ok is None:
                    ok = verdicts.setdefault(dtype, str(dtype) in names)
                if ok and obj.get_device() == device and obj.is_contiguous():
                    if shapes is not None:
                        fits = obj.shape in shapes
                    else:
                        try:
                            fits = obj.nbytes >= least  # one read (torch >= 1.11)
                        except AttributeError:
                            fits = obj.numel() * obj.element_size() >= least
                    if fits:
                        append(obj.data_ptr())
                        continue
            append(None)
        return out


# DLPack -------------------------------------------------------------------------------------


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [
        ("dl_tensor", _DLTensor),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
    ]


class _DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class _DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("version", _DLPackVersion),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", _DLTensor),
    ]


_capsule_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_get_pointer.restype = ctypes.c_void_p
_capsule_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_get_name = ctypes.pythonapi.PyCapsule_GetName
_capsule_get_name.restype = ctypes.c_char_p
_capsule_get_name.argtypes = [ctypes.py_object]


def _from_dlpack(obj, stream: int) -> DeviceArray:
    device_type, device_id = obj.__dlpack_device__()
    if int(device_type) not in (KDL_CUDA, KDL_CUDA_MANAGED):
        name = _DEVICE_NAMES.get(int(device_type), f"type {int(device_type)}")
        raise ValueError(f"the array lives on a {name} device, expected a CUDA device")
    argument = interface_stream(stream)
    try:
        capsule = obj.__dlpack__(stream=argument, max_version=(1, 1))
    except TypeError:  # producers that predate DLPack 1.0
        capsule = obj.__dlpack__(stream=argument)
    name = _capsule_get_name(capsule)
    pointer = _capsule_get_pointer(capsule, name)
    readonly = False
    if name == b"dltensor_versioned":
        managed = _DLManagedTensorVersioned.from_address(pointer)
        if managed.version.major != 1:
            raise ValueError(f"DLPack version {managed.version.major}.x is not supported")
        readonly = bool(managed.flags & _DLPACK_FLAG_READ_ONLY)
        tensor = managed.dl_tensor
    elif name == b"dltensor":
        tensor = _DLManagedTensor.from_address(pointer).dl_tensor
    else:
        raise ValueError(f"__dlpack__ returned a capsule named {name!r}")
    key = (tensor.dtype.code, tensor.dtype.bits, tensor.dtype.lanes)
    dtype = _DLPACK_DTYPES.get(key)
    if dtype is None:
        raise ValueError(f"unsupported DLPack dtype (code, bits, lanes) = {key}")
    shape = tuple(tensor.shape[i] for i in range(tensor.ndim))
    strides = None
    if tensor.strides:
        strides = tuple(tensor.strides[i] for i in range(tensor.ndim))
        if strides == _contiguous_strides(shape):
            strides = None
    address = (tensor.data or 0) + tensor.byte_offset
    del capsule  # not consumed: its destructor calls the producer's deleter
    return DeviceArray(address, shape, strides, dtype, readonly, int(device_id))


# checks ---------------------------------------------------------------------------------------


def _squeeze_trailing(shape, strides):
    """Drop trailing extent-1 axes (GPU MODE passes (m, k // 2, l) with l == 1)."""
    shape = list(shape)
    strides = list(strides) if strides is not None else None
    while len(shape) > 2 and shape[-1] == 1:
        shape.pop()
        if strides is not None:
            strides.pop()
    return tuple(shape), tuple(strides) if strides is not None else None


def is_c_contiguous(shape, strides) -> bool:
    if strides is None:
        return True
    step = 1
    for extent, stride in zip(reversed(shape), reversed(strides)):
        if extent != 1 and stride != step:
            return False
        step *= extent
    return True


def is_dense(shape, strides) -> bool:
    """The elements fill one block of memory without gaps, in any axis order."""
    if strides is None:
        return True
    if any(s < 0 for s in strides):
        return False
    step = 1
    for extent, stride in sorted(
        ((e, s) for e, s in zip(shape, strides) if e != 1), key=lambda t: t[1]
    ):
        if stride != step:
            return False
        step *= extent
    return True


def nbytes(array: DeviceArray) -> int:
    count = 1
    for extent in array.shape:
        count *= extent
    return count * array.bits // 8


def check_matrix(
    array: DeviceArray,
    dtypes: tuple[str, ...],
    rows: int,
    row_bytes: int,
    *,
    writable: bool = False,
) -> str | None:
    """Why ``array`` is not a packed row-major (rows, row_bytes) matrix, or None."""
    if writable and array.readonly:
        return "is read-only"
    if array.shape is None:
        return None
    if array.dtype not in dtypes:
        return f"must have dtype {' or '.join(dtypes)}, got {array.dtype}"
    shape, strides = _squeeze_trailing(array.shape, array.strides)
    per_byte = 8 // array.bits if array.bits < 8 else 1
    item = max(array.bits // 8, 1)
    expected = (rows, row_bytes * per_byte // item)
    if shape != expected:
        return f"must have shape {expected}, got {array.shape}"
    if not is_c_contiguous(shape, strides):
        return f"must be C-contiguous (rows packed), got strides {array.strides} (elements)"
    return None


def check_scales(array: DeviceArray, dtypes: tuple[str, ...], min_bytes: int) -> str | None:
    """Why ``array`` is not a dense blocked-scale buffer of >= ``min_bytes`` bytes, or None."""
    if array.shape is None:
        return None
    if array.dtype not in dtypes:
        return f"must have dtype {' or '.join(dtypes)}, got {array.dtype}"
    if not is_dense(array.shape, array.strides):
        return f"must be dense (blocked layout), got shape {array.shape} strides {array.strides}"
    size = nbytes(array)
    if size < min_bytes:
        return f"must hold at least {min_bytes} bytes (blocked layout), got {size} (shape {array.shape})"
    return None
