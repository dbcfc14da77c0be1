"""XLA's typed FFI C API as ctypes structures: what a handler written in Python reads.

Transcribed from ``xla/ffi/api/c_api.h`` (API 0.x; jaxlib ships the header under
``jax.ffi.include_dir()``). Only the parts a handler needs: the call frame, buffers,
the metadata extension XLA sends once to learn the handler's API version
and traits, and the API table entries for errors, the stream and the device ordinal.
Every struct starts with its ``struct_size``; fields are only ever appended, so these
prefixes stay valid for newer XLA versions, and :func:`api_has` checks the table is
long enough before an entry is used. No jax import: this module is plain ctypes.
"""

from __future__ import annotations

import ctypes
import functools
import struct
import sys
import threading
from collections.abc import Callable
from typing import NamedTuple

# handler API version we declare in the metadata (the range XLA accepts starts at 0.1)
API_MAJOR, API_MINOR = 0, 1

EXTENSION_METADATA = 1  # XLA_FFI_Extension_Type
STAGE_EXECUTE = 3  # XLA_FFI_ExecutionStage: INSTANTIATE, PREPARE, INITIALIZE, EXECUTE
TRAIT_COMMAND_BUFFER_COMPATIBLE = 1  # XLA_FFI_Handler_TraitsBits
ARG_BUFFER = RET_BUFFER = 1  # XLA_FFI_ArgType / XLA_FFI_RetType

# XLA_FFI_Error_Code (absl status codes)
ERROR_UNKNOWN, ERROR_INVALID_ARGUMENT, ERROR_FAILED_PRECONDITION = 2, 3, 9
ERROR_RESOURCE_EXHAUSTED, ERROR_INTERNAL = 8, 13

F32 = 11  # XLA_FFI_DataType of float32
# XLA_FFI_DataType (xla::PrimitiveType) -> numpy dtype name
DATA_TYPES = {
    1: "bool", 2: "int8", 3: "int16", 4: "int32", 5: "int64", 6: "uint8", 7: "uint16",
    8: "uint32", 9: "uint64", 10: "float16", 11: "float32", 12: "float64", 16: "bfloat16",
    20: "float8_e4m3fn",
}  # fmt: skip


class ExtensionBase(ctypes.Structure):
    pass


ExtensionBase._fields_ = [
    ("struct_size", ctypes.c_size_t),
    ("type", ctypes.c_int),
    ("next", ctypes.POINTER(ExtensionBase)),
]


class ApiVersion(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("extension_start", ctypes.POINTER(ExtensionBase)),
        ("major_version", ctypes.c_int),
        ("minor_version", ctypes.c_int),
    ]


class Metadata(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("api_version", ApiVersion),
        ("traits", ctypes.c_uint32),
        ("state_type_id", ctypes.c_int64),  # XLA_FFI_TypeId (API >= 0.2)
    ]


class MetadataExtension(ctypes.Structure):
    _fields_ = [("extension_base", ExtensionBase), ("metadata", ctypes.POINTER(Metadata))]


class Buffer(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("extension_start", ctypes.POINTER(ExtensionBase)),
        ("dtype", ctypes.c_int),
        ("data", ctypes.c_void_p),
        ("rank", ctypes.c_int64),
        ("dims", ctypes.POINTER(ctypes.c_int64)),
    ]


class Args(ctypes.Structure):  # XLA_FFI_Args and XLA_FFI_Rets have the same layout
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("extension_start", ctypes.POINTER(ExtensionBase)),
        ("size", ctypes.c_int64),
        ("types", ctypes.POINTER(ctypes.c_int)),
        ("args", ctypes.POINTER(ctypes.c_void_p)),
    ]


class Attrs(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("extension_start", ctypes.POINTER(ExtensionBase)),
        ("size", ctypes.c_int64),
        ("types", ctypes.POINTER(ctypes.c_int)),
        ("names", ctypes.c_void_p),  # XLA_FFI_ByteSpan**
        ("attrs", ctypes.POINTER(ctypes.c_void_p)),
    ]


class ErrorCreateArgs(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("extension_start", ctypes.POINTER(ExtensionBase)),
        ("message", ctypes.c_char_p),
        ("errc", ctypes.c_int),
    ]


class StreamGetArgs(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("extension_start", ctypes.POINTER(ExtensionBase)),
        ("ctx", ctypes.c_void_p),
        ("stream", ctypes.c_void_p),  # out: the CUstream
    ]


class DeviceOrdinalGetArgs(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("extension_start", ctypes.POINTER(ExtensionBase)),
        ("ctx", ctypes.c_void_p),
        ("device_ordinal", ctypes.c_int32),  # out
    ]


ErrorCreate = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.POINTER(ErrorCreateArgs))
StreamGet = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.POINTER(StreamGetArgs))
DeviceOrdinalGet = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.POINTER(DeviceOrdinalGetArgs))


class Api(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("extension_start", ctypes.POINTER(ExtensionBase)),
        ("api_version", ApiVersion),
        ("internal_api", ctypes.c_void_p),
        ("XLA_FFI_Error_Create", ErrorCreate),
        ("XLA_FFI_Error_GetMessage", ctypes.c_void_p),
        ("XLA_FFI_Error_Destroy", ctypes.c_void_p),
        ("XLA_FFI_Handler_Register", ctypes.c_void_p),
        ("XLA_FFI_Stream_Get", StreamGet),
        ("XLA_FFI_Type_Register", ctypes.c_void_p),
        ("XLA_FFI_ExecutionContext_Get", ctypes.c_void_p),
        ("XLA_FFI_State_Set", ctypes.c_void_p),
        ("XLA_FFI_State_Get", ctypes.c_void_p),
        ("XLA_FFI_DeviceMemory_Allocate", ctypes.c_void_p),
        ("XLA_FFI_DeviceMemory_Free", ctypes.c_void_p),
        ("XLA_FFI_ThreadPool_Schedule", ctypes.c_void_p),
        ("XLA_FFI_ThreadPool_NumThreads", ctypes.c_void_p),
        ("XLA_FFI_Future_Create", ctypes.c_void_p),
        ("XLA_FFI_Future_SetAvailable", ctypes.c_void_p),
        ("XLA_FFI_Future_SetError", ctypes.c_void_p),
        ("XLA_FFI_RunId_Get", ctypes.c_void_p),
        ("XLA_FFI_DeviceOrdinal_Get", DeviceOrdinalGet),
    ]


class CallFrame(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("extension_start", ctypes.POINTER(ExtensionBase)),
        ("api", ctypes.POINTER(Api)),
        ("ctx", ctypes.c_void_p),
        ("stage", ctypes.c_int),
        ("args", Args),
        ("rets", Args),
        ("attrs", Attrs),
        ("future", ctypes.c_void_p),
    ]


#: the C signature of an FFI handler, XLA_FFI_Error* handler(XLA_FFI_CallFrame*), with the
#: frame passed as a plain address (read by :func:`read_frame`)
Handler = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)

_NULL_EXTENSION = ctypes.POINTER(ExtensionBase)()

# Every address of the process as one buffer: struct.unpack_from(_MEMORY, address) reads
# the frame's raw little-endian bytes without a ctypes call (0.12 µs a read against 0.38
# for unpack(ctypes.string_at(...)); a call reads 11 to 13 times).
_MEMORY = memoryview((ctypes.c_char * sys.maxsize).from_address(0)).cast("B")
_FRAME = struct.Struct("<QQQQi4xQQqQQQQqQQQQqQQQ")
_BUFFER = struct.Struct("<16xi4xQqQ")  # (dtype, data, rank, dims) of an XLA_FFI_Buffer
assert _FRAME.size == CallFrame.future.offset and _BUFFER.size == ctypes.sizeof(Buffer)


class RawBuffer(NamedTuple):
    """One argument or result of a call: XLA_FFI_DataType, address, rank and the address
    of its dims (read by :func:`shape` only where needed)."""

    dtype: int
    data: int
    rank: int
    dims: int


class Frame(NamedTuple):
    """What an execution's call frame says (attributes are not read: we pass none)."""

    api: int  # address of XLA's XLA_FFI_Api table
    ctx: int  # XLA_FFI_ExecutionContext*
    stage: int
    extension: int  # address of the first extension (the metadata query), or 0
    args: list[RawBuffer]
    rets: list[RawBuffer]


def read_frame(address: int) -> Frame:
    """Decode the call frame at ``address``; its arguments and results must be buffers."""
    (
        _size, extension, api, ctx, stage,
        _a0, _a1, n_args, arg_types, args,
        _r0, _r1, n_rets, ret_types, rets,
        *_attrs,
    ) = _FRAME.unpack_from(_MEMORY, address)  # fmt: skip
    if extension:
        return Frame(api, ctx, stage, extension, [], [])
    return Frame(
        api, ctx, stage, 0,
        _buffers(n_args, arg_types, args, ARG_BUFFER, "argument"),
        _buffers(n_rets, ret_types, rets, RET_BUFFER, "result"),
    )  # fmt: skip


def frame_api(address: int) -> int:
    """The API table's address from the call frame at ``address``."""
    return _WORD.unpack_from(_MEMORY, address + CallFrame.api.offset)[0]


def shape(buffer: RawBuffer) -> tuple[int, ...]:
    return _words(buffer.rank, "q").unpack_from(_MEMORY, buffer.dims) if buffer.rank else ()


@functools.cache
def _words(count: int, code: str) -> struct.Struct:
    """``count`` little-endian words of struct ``code`` (compiled once per count)."""
    return struct.Struct(f"<{count}{code}")


_WORD = _words(1, "Q")  # one pointer-sized word


def _buffers(count: int, types: int, pointers: int, kind: int, what: str) -> list[RawBuffer]:
    if count == 0:
        return []
    kinds = _words(count, "i").unpack_from(_MEMORY, types)
    if kinds.count(kind) != count:
        i = next(i for i, k in enumerate(kinds) if k != kind)
        raise TypeError(f"{what} {i} is not a buffer (FFI type {kinds[i]})")
    unpack, make = _BUFFER.unpack_from, RawBuffer._make
    return [make(unpack(_MEMORY, p)) for p in _words(count, "Q").unpack_from(_MEMORY, pointers)]


_apis: dict[int, Api] = {}  # XLA's API table by address (one per process in practice)


def api_table(address: int) -> Api:
    api = _apis.get(address)
    if api is None:
        api = _apis[address] = Api.from_address(address)
    return api


def api_has(api: Api, field: str) -> bool:
    """Whether XLA's API table is long enough to hold entry ``field``."""
    return _holds(api.struct_size, getattr(Api, field))


def _holds(table_size: int, entry) -> bool:
    """Whether a table of ``table_size`` bytes holds ``entry`` (a field of :class:`Api`)."""
    return table_size >= entry.offset + entry.size


def answer_metadata(frame: Frame, address: int, traits: int) -> bool:
    """Fill in the metadata XLA asks for (at registration) when the frame at
    ``address`` carries the metadata extension; returns whether it did (then the call
    is nothing else)."""
    if not frame.extension:
        return False
    extension = ExtensionBase.from_address(frame.extension)
    if extension.type != EXTENSION_METADATA:
        return False
    metadata = MetadataExtension.from_address(frame.extension).metadata.contents
    metadata.api_version.major_version = API_MAJOR
    metadata.api_version.minor_version = API_MINOR
    metadata.traits = traits
    if metadata.struct_size >= Metadata.state_type_id.offset + 8:
        metadata.state_type_id = 0  # XLA_FFI_UNKNOWN_TYPE_ID: a stateless handler
    return True


def create_error(frame: Frame, code: int, message: str) -> int:
    """An ``XLA_FFI_Error*`` carrying ``message`` (XLA takes ownership and raises it)."""
    args = ErrorCreateArgs(
        ctypes.sizeof(ErrorCreateArgs), _NULL_EXTENSION, message.encode("utf-8", "replace"), code
    )
    return api_table(frame.api).XLA_FFI_Error_Create(ctypes.byref(args))


class _EntryPoints(NamedTuple):
    """The API table's stream and device-ordinal queries as functions of their argument
    struct's address (None: an API older than the entry)."""

    stream_get: Callable[[int], int | None]
    device_ordinal_get: Callable[[int], int | None] | None


_BY_ADDRESS = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)
_STREAM_GET, _DEVICE_ORDINAL_GET = Api.XLA_FFI_Stream_Get, Api.XLA_FFI_DeviceOrdinal_Get
# by the entries' addresses as the table holds them (not by the table's address: a table
# freed and another made at its address, as tests do, must not reuse the old functions)
_entry_points: dict[tuple[int, int], _EntryPoints] = {}


def entry_points(address: int) -> _EntryPoints:
    """The stream and device-ordinal queries of the API table at ``address``."""
    stream_get = _WORD.unpack_from(_MEMORY, address + _STREAM_GET.offset)[0]
    ordinal_get = 0
    if _holds(_WORD.unpack_from(_MEMORY, address)[0], _DEVICE_ORDINAL_GET):  # its struct_size
        ordinal_get = _WORD.unpack_from(_MEMORY, address + _DEVICE_ORDINAL_GET.offset)[0]
    key = (stream_get, ordinal_get)
    points = _entry_points.get(key)
    if points is None:
        points = _entry_points[key] = _EntryPoints(
            _BY_ADDRESS(stream_get), _BY_ADDRESS(ordinal_get) if ordinal_get else None
        )
    return points


class _QueryArgs(threading.local):
    """The stream and device-ordinal queries' argument structs, made once per thread
    (XLA may run handlers on several threads at once): a call then only sets the
    context and passes an address (about 1 µs less a query than building the struct
    and looking the entry up in the table each call)."""

    def __init__(self):
        self.stream = StreamGetArgs(ctypes.sizeof(StreamGetArgs), _NULL_EXTENSION, None, None)
        self.ordinal = DeviceOrdinalGetArgs(
            ctypes.sizeof(DeviceOrdinalGetArgs), _NULL_EXTENSION, None, 0
        )
        self.stream_address = ctypes.addressof(self.stream)
        self.ordinal_address = ctypes.addressof(self.ordinal)


_query_args = _QueryArgs()


def stream(frame: Frame) -> int:
    """The platform stream XLA runs this call on (a CUstream on CUDA)."""
    query = _query_args
    args = query.stream
    args.ctx, args.stream = frame.ctx, None
    if entry_points(frame.api).stream_get(query.stream_address):
        raise RuntimeError("XLA_FFI_Stream_Get failed")  # (its XLA_FFI_Error is leaked)
    return args.stream or 0


def device_ordinal(frame: Frame) -> int | None:
    """The device ordinal of this call, or None where XLA's API predates the entry."""
    get = entry_points(frame.api).device_ordinal_get
    if get is None:
        return None
    query = _query_args
    args = query.ordinal
    args.ctx, args.device_ordinal = frame.ctx, 0
    if get(query.ordinal_address):
        raise RuntimeError("XLA_FFI_DeviceOrdinal_Get failed")  # (its error is leaked)
    return args.device_ordinal


def dtype_name(buffer: RawBuffer) -> str:
    return DATA_TYPES.get(buffer.dtype, f"XLA type {buffer.dtype}")
