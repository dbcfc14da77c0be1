"""Read what we need from a CUDA cubin (an ELF file) without any CUDA library.

Used by the build step (to cross-check the captured launch ABI against the compiler's
own records) and by the runtime (to refuse a cubin built for another architecture
before the driver is asked to load it: the driver accepts an sm_100a cubin on an
sm_90 GPU and only later reports that it holds no kernels).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from .errors import ArtifactError

_ELF_MAGIC = b"\x7fELF"
_ELFCLASS64 = 2
_EM_CUDA = 190
# The cubin's EI_OSABI byte says where e_flags keeps the SM number.
_OSABI_CUDA_LEGACY = 0x33  # sm_90a and older: SM number in bits 0-7
_OSABI_CUDA_V2 = 0x41  # sm_100a and newer: SM number in bits 8-15

_SHT_SYMTAB = 2
# .nv.info record formats (each record: u8 format, u8 attribute, then the value)
_EIFMT_SVAL = 4  # u16 size followed by that many bytes; other formats are 4 bytes long
_EIATTR_KPARAM_INFO = 0x17
_EIATTR_CBANK_PARAM_SIZE = 0x19
_EIATTR_REQNTID = 0x10
_EIATTR_REGCOUNT = 0x2F


@dataclass(frozen=True)
class KernelParamInfo:
    """One kernel parameter as the compiler recorded it (KPARAM_INFO)."""

    ordinal: int
    offset: int
    size: int


@dataclass(frozen=True)
class CubinInfo:
    """The facts about a cubin that the build and the runtime check."""

    sm: int  # e.g. 90, 100, 103
    kernel_names: tuple[str, ...]
    params: dict[str, tuple[KernelParamInfo, ...]]  # by kernel name, sorted by ordinal
    param_bytes: dict[str, int]  # total parameter space by kernel name
    required_block: dict[str, tuple[int, int, int]]  # .reqntid, where recorded
    registers: dict[str, int]  # registers per thread, where recorded


def _section_headers(data: bytes):
    e_shoff = struct.unpack_from("<Q", data, 0x28)[0]
    e_shentsize, e_shnum, e_shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    if e_shoff + e_shnum * e_shentsize > len(data):
        raise ArtifactError("cubin is truncated: its section table lies past the end of the file")
    headers = []
    for i in range(e_shnum):
        name, typ, _flags, _addr, off, size, link, info, _align, _entsize = struct.unpack_from(
            "<IIQQQQIIQQ", data, e_shoff + i * e_shentsize
        )
        headers.append((name, typ, off, size, link, info))
    names_off = headers[e_shstrndx][2]

    def name_of(offset: int) -> str:
        end = data.index(b"\0", names_off + offset)
        return data[names_off + offset : end].decode()

    return [(name_of(h[0]),) + h[1:] for h in headers]


def elf_size(data: bytes) -> int:
    """Length of the ELF image that starts at ``data[0]`` (sections and tables)."""
    check_elf_header(data)
    e_phoff = struct.unpack_from("<Q", data, 0x20)[0]
    e_shoff = struct.unpack_from("<Q", data, 0x28)[0]
    e_phentsize, e_phnum, e_shentsize, e_shnum = struct.unpack_from("<HHHH", data, 0x36)
    end = max(e_phoff + e_phentsize * e_phnum, e_shoff + e_shentsize * e_shnum)
    for i in range(e_shnum):
        typ, _f, _a, off, size = struct.unpack_from("<IQQQQ", data, e_shoff + i * e_shentsize + 4)
        if typ != 8:  # SHT_NOBITS occupies no file bytes
            end = max(end, off + size)
    for i in range(e_phnum):
        off, _va, _pa, filesz = struct.unpack_from("<QQQQ", data, e_phoff + i * e_phentsize + 8)
        end = max(end, off + filesz)
    return end


_FATBIN_MAGIC = 0xBA55ED50
_FATBIN_KIND_ELF = 2


def fatbin_cubins(fatbin: bytes) -> list[bytes]:
    """The uncompressed ELF (cubin) entries of a fat binary.

    Layout: a 16-byte header (u32 magic, u16 version, u16 header size, u64 body size), then
    entries of (u16 kind, u16 version, u32 header size, u64 payload size, ...) + payload.
    """
    magic, _version, header_size, body_size = struct.unpack_from("<IHHQ", fatbin, 0)
    if magic != _FATBIN_MAGIC:
        raise ArtifactError(f"not a fat binary: magic 0x{magic:08x}")
    cubins, pos, end = [], header_size, header_size + body_size
    while pos < end:
        kind, _v, entry_header, payload_size = struct.unpack_from("<HHIQ", fatbin, pos)
        payload = fatbin[pos + entry_header : pos + entry_header + payload_size]
        if kind == _FATBIN_KIND_ELF:
            if payload[:4] != _ELF_MAGIC:
                raise ArtifactError("fat binary holds a compressed cubin, which is not supported")
            cubins.append(payload[: elf_size(payload)])
        pos += entry_header + payload_size
    return cubins


def fatbin_size(header: bytes) -> int:
    """Total size of a fat binary from its first 16 bytes."""
    magic, _version, header_size, body_size = struct.unpack_from("<IHHQ", header, 0)
    if magic != _FATBIN_MAGIC:
        raise ArtifactError(f"not a fat binary: magic 0x{magic:08x}")
    return header_size + body_size


def check_elf_header(data: bytes) -> None:
    """Raise ArtifactError unless ``data`` starts with a 64-bit CUDA ELF header."""
    if len(data) < 64 or data[:4] != _ELF_MAGIC:
        raise ArtifactError("not a cubin: the ELF magic number is missing")
    if data[4] != _ELFCLASS64 or struct.unpack_from("<H", data, 18)[0] != _EM_CUDA:
        raise ArtifactError("not a cubin: the ELF file is not a 64-bit CUDA object")


def cubin_sm(data: bytes) -> int:
    """The SM number (90, 100, ...) the cubin was compiled for."""
    check_elf_header(data)
    osabi = data[7]
    flags = struct.unpack_from("<I", data, 48)[0]
    if osabi == _OSABI_CUDA_LEGACY:
        return flags & 0xFF
    if osabi == _OSABI_CUDA_V2:
        return (flags >> 8) & 0xFF
    raise ArtifactError(f"cubin has an unknown ELF OS ABI byte 0x{osabi:02x}")


def _parse_nv_info(blob: bytes):
    i = 0
    while i + 2 <= len(blob):
        fmt, attr = blob[i], blob[i + 1]
        if fmt == _EIFMT_SVAL:
            (size,) = struct.unpack_from("<H", blob, i + 2)
            yield attr, blob[i + 4 : i + 4 + size]
            i += 4 + size
        else:
            yield attr, blob[i + 2 : i + 4]
            i += 4


def read_cubin(data: bytes) -> CubinInfo:
    """Parse arch, kernels and their parameter records from a cubin."""
    sm = cubin_sm(data)
    sections = _section_headers(data)
    kernels = tuple(name[len(".text.") :] for name, *_ in sections if name.startswith(".text."))
    params: dict[str, tuple[KernelParamInfo, ...]] = {}
    param_bytes: dict[str, int] = {}
    required_block: dict[str, tuple[int, int, int]] = {}
    registers: dict[str, int] = {}
    symbols = _symbol_names(data, sections)
    for name, _typ, off, size, _link, _info in sections:
        if not name.startswith(".nv.info."):
            continue
        kernel = name[len(".nv.info.") :]
        found = []
        for attr, value in _parse_nv_info(data[off : off + size]):
            if attr == _EIATTR_KPARAM_INFO:
                _index, ordinal, offset, flags = struct.unpack("<IHHI", value)
                found.append(KernelParamInfo(ordinal, offset, (flags >> 18) & 0x3FFF))
            elif attr == _EIATTR_CBANK_PARAM_SIZE:
                param_bytes[kernel] = struct.unpack("<H", value)[0]
            elif attr == _EIATTR_REQNTID:
                required_block[kernel] = struct.unpack("<III", value)
        params[kernel] = tuple(sorted(found, key=lambda p: p.ordinal))
    # REGCOUNT records live in the global .nv.info and name the kernel by symbol index.
    for name, _typ, off, size, _link, _info in sections:
        if name == ".nv.info":
            for attr, value in _parse_nv_info(data[off : off + size]):
                if attr == _EIATTR_REGCOUNT:
                    symbol, count = struct.unpack("<II", value)
                    if symbols.get(symbol) in kernels:
                        registers[symbols[symbol]] = count
    return CubinInfo(sm, kernels, params, param_bytes, required_block, registers)


def _symbol_names(data: bytes, sections) -> dict[int, str]:
    for _name, typ, off, size, link, _info in sections:
        if typ == _SHT_SYMTAB:
            strtab_off = sections[link][2]
            names = {}
            for index in range(size // 24):
                (name_off,) = struct.unpack_from("<I", data, off + index * 24)
                end = data.index(b"\0", strtab_off + name_off)
                names[index] = data[strtab_off + name_off : end].decode()
            return names
    return {}
