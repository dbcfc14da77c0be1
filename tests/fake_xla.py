"""A hand-built XLA FFI call frame (tests/test_jax.py, bench/host_jax_call.py): the
buffers, the API table (entries are Python functions) and the frame XLA would pass a
handler, and the MoE GEMM call's frame with fake device addresses."""

from __future__ import annotations

import ctypes

from nvfp4_aot.blocked import blocked_scale_bytes
from nvfp4_aot.jax import xla_ffi


class FakeFrame:
    """An XLA_FFI_CallFrame with its buffers, attributes and an API table whose entries
    are Python functions (stream 9, device 0, errors recorded)."""

    STREAM = 9
    ERROR = 0xE4404  # what the fake XLA_FFI_Error_Create returns

    def __init__(self, args, rets, metadata: bool = False):
        self.keep, self.errors = [], []
        self.frame = xla_ffi.CallFrame(struct_size=ctypes.sizeof(xla_ffi.CallFrame))
        self.frame.api = ctypes.pointer(self._api())
        self.frame.stage = xla_ffi.STAGE_EXECUTE
        self._table(self.frame.args, [self._buffer(*a) for a in args])
        self._table(self.frame.rets, [self._buffer(*r) for r in rets])
        if metadata:
            self.metadata = xla_ffi.Metadata(struct_size=ctypes.sizeof(xla_ffi.Metadata))
            ext = xla_ffi.MetadataExtension(metadata=ctypes.pointer(self.metadata))
            ext.extension_base.type = xla_ffi.EXTENSION_METADATA
            self.keep.append(ext)
            self.frame.extension_start = ctypes.cast(
                ctypes.pointer(ext), ctypes.POINTER(xla_ffi.ExtensionBase)
            )

    def _api(self):
        def error_create(args):
            self.errors.append((args.contents.errc, args.contents.message.decode()))
            return self.ERROR

        def stream_get(args):
            args.contents.stream = self.STREAM
            return None

        def ordinal_get(args):
            args.contents.device_ordinal = 0
            return None

        api = xla_ffi.Api(struct_size=ctypes.sizeof(xla_ffi.Api))
        api.XLA_FFI_Error_Create = xla_ffi.ErrorCreate(error_create)
        api.XLA_FFI_Stream_Get = xla_ffi.StreamGet(stream_get)
        api.XLA_FFI_DeviceOrdinal_Get = xla_ffi.DeviceOrdinalGet(ordinal_get)
        self.keep.append(api)
        return api

    def _buffer(self, data: int, shape: tuple, dtype: int):
        dims = (ctypes.c_int64 * len(shape))(*shape)
        buffer = xla_ffi.Buffer(ctypes.sizeof(xla_ffi.Buffer), None, dtype, data, len(shape), dims)
        self.keep += [dims, buffer]
        return buffer

    def _table(self, table, buffers) -> None:
        types = (ctypes.c_int * len(buffers))(*[1] * len(buffers))
        pointers = (ctypes.c_void_p * len(buffers))(*[ctypes.addressof(b) for b in buffers])
        self.keep += [types, pointers]
        table.size, table.types, table.args = len(buffers), types, pointers

    def call(self, function) -> int | None:
        return function(ctypes.addressof(self.frame))


BASE = 0x7000_0000_0000
U8, S32, F16, F32, BF16 = 6, 4, 10, 11, 16


def moe_frame(experts=8, n=256, k=512, capacity=100, extra=()) -> tuple[FakeFrame, list[int]]:
    p = [BASE + (i + 1) * (1 << 34) for i in range(6)]  # routing, a, b, c, sfa, sfb
    args = [
        (p[1], (capacity, k // 2), U8), (p[2], (experts, n, k // 2), U8),
        (p[4], (1 << 20,), U8), (p[5], (experts * blocked_scale_bytes(n, k),), U8),
        (p[0], (experts + 1,), S32),
    ]  # fmt: skip
    return FakeFrame(args + list(extra), [(p[3], (capacity, n), F16)]), p
