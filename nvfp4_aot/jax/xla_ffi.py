"""XLA's typed FFI C API as ctypes structures: what a handler written in Python reads.

Transcribed from ``xla/ffi/api/c_api.h`` (API 0.x; jaxlib ships the header under
``jax.ffi.include_dir()``). Only the parts a handler needs: the call frame, buffers,
attributes, the metadata extension XLA sends once to learn the handler's API version
and traits, and the API table entries for errors, the stream and the device ordinal.
Every struct starts with its ``struct_size``; fields are only ever appended, so these
prefixes stay valid for newer XLA versions, and :func:`api_has` checks the table is
long enough before an entry is used. No jax import: this module is plain ctypes.
"""

from __future__ import annotations

import ctypes

# handler API version we declare in the metadata (the range XLA accepts starts at 0.1)
API_MAJOR, API_MINOR = 0, 1

EXTENSION_METADATA = 1  # XLA_FFI_Extension_Type
STAGE_EXECUTE = 3  # XLA_FFI_ExecutionStage: INSTANTIATE, PREPARE, INITIALIZE, EXECUTE
TRAIT_COMMAND_BUFFER_COMPATIBLE = 1  # XLA_FFI_Handler_TraitsBits
ARG_BUFFER = RET_BUFFER = 1  # XLA_FFI_ArgType / XLA_FFI_RetType
ATTR_STRING = 4  # XLA_FFI_AttrType (ARRAY 1, DICTIONARY 2, SCALAR 3)

# XLA_FFI_Error_Code (absl status codes)
ERROR_UNKNOWN, ERROR_INVALID_ARGUMENT, ERROR_FAILED_PRECONDITION = 2, 3, 9
ERROR_RESOURCE_EXHAUSTED, ERROR_INTERNAL = 8, 13

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


class ByteSpan(ctypes.Structure):
    _fields_ = [("ptr", ctypes.c_void_p), ("len", ctypes.c_size_t)]


class Attrs(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("extension_start", ctypes.POINTER(ExtensionBase)),
        ("size", ctypes.c_int64),
        ("types", ctypes.POINTER(ctypes.c_int)),
        ("names", ctypes.POINTER(ctypes.POINTER(ByteSpan))),
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


#: the C signature of an FFI handler: XLA_FFI_Error* handler(XLA_FFI_CallFrame*)
Handler = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.POINTER(CallFrame))

_NULL_EXTENSION = ctypes.POINTER(ExtensionBase)()


def api_has(api: Api, field: str) -> bool:
    """Whether XLA's API table is long enough to hold entry ``field``."""
    entry = getattr(Api, field)
    return api.struct_size >= entry.offset + entry.size


def answer_metadata(frame: CallFrame, traits: int) -> bool:
    """Fill in the metadata XLA asks for (once, at registration) when ``frame`` carries
    the metadata extension; returns whether it did (then the call is nothing else)."""
    extension = frame.extension_start
    if not extension or extension.contents.type != EXTENSION_METADATA:
        return False
    metadata = ctypes.cast(extension, ctypes.POINTER(MetadataExtension)).contents.metadata
    metadata.contents.api_version.major_version = API_MAJOR
    metadata.contents.api_version.minor_version = API_MINOR
    metadata.contents.traits = traits
    if metadata.contents.struct_size >= Metadata.state_type_id.offset + 8:
        metadata.contents.state_type_id = 0  # XLA_FFI_UNKNOWN_TYPE_ID: a stateless handler
    return True


def create_error(frame: CallFrame, code: int, message: str) -> int:
    """An ``XLA_FFI_Error*`` carrying ``message`` (XLA takes ownership and raises it)."""
    args = ErrorCreateArgs(
        ctypes.sizeof(ErrorCreateArgs), _NULL_EXTENSION, message.encode("utf-8", "replace"), code
    )
    return frame.api.contents.XLA_FFI_Error_Create(ctypes.byref(args))


def stream(frame: CallFrame) -> int:
    """The platform stream XLA runs this call on (a CUstream on CUDA)."""
    args = StreamGetArgs(ctypes.sizeof(StreamGetArgs), _NULL_EXTENSION, frame.ctx, None)
    error = frame.api.contents.XLA_FFI_Stream_Get(ctypes.byref(args))
    if error:
        raise RuntimeError("XLA_FFI_Stream_Get failed") from _Passed(error)
    return args.stream or 0


def device_ordinal(frame: CallFrame) -> int | None:
    """The device ordinal of this call, or None where XLA's API predates the entry."""
    api = frame.api.contents
    if not api_has(api, "XLA_FFI_DeviceOrdinal_Get"):
        return None
    args = DeviceOrdinalGetArgs(ctypes.sizeof(DeviceOrdinalGetArgs), _NULL_EXTENSION, frame.ctx, 0)
    error = api.XLA_FFI_DeviceOrdinal_Get(ctypes.byref(args))
    if error:
        raise RuntimeError("XLA_FFI_DeviceOrdinal_Get failed") from _Passed(error)
    return int(args.device_ordinal)


class _Passed(Exception):
    """An XLA_FFI_Error an API call returned (its message is not read: it is leaked,
    as reading it needs Error_GetMessage/Destroy, which only failures would reach)."""


def buffers(table: Args, kind: int, what: str) -> list[Buffer]:
    """The buffers of the call's arguments or results (every one must be a buffer)."""
    out = []
    for i in range(table.size):
        if table.types[i] != kind:
            raise TypeError(f"{what} {i} is not a buffer (FFI type {table.types[i]})")
        out.append(ctypes.cast(table.args[i], ctypes.POINTER(Buffer)).contents)
    return out


def shape(buffer: Buffer) -> tuple[int, ...]:
    return tuple(buffer.dims[i] for i in range(buffer.rank))


def dtype_name(buffer: Buffer) -> str:
    return DATA_TYPES.get(buffer.dtype, f"XLA type {buffer.dtype}")


def string_attributes(attrs: Attrs) -> dict[str, str]:
    """The call's attributes, all of which must be strings (the only kind we pass)."""
    out = {}
    for i in range(attrs.size):
        span = attrs.names[i].contents
        name = ctypes.string_at(span.ptr, span.len).decode()
        if attrs.types[i] != ATTR_STRING:
            raise TypeError(f"attribute {name}: FFI attribute type {attrs.types[i]}, not a string")
        value = ctypes.cast(attrs.attrs[i], ctypes.POINTER(ByteSpan)).contents
        out[name] = ctypes.string_at(value.ptr, value.len).decode()
    return out
