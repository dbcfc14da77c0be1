"""Read one tensor of a .safetensors checkpoint with numpy, or a MoE layer's per-expert
tensors (experts 0 .. E - 1, each memory-mapped), for the weight quantizer.

The format (huggingface/safetensors): an 8-byte little-endian header size N, N bytes of
JSON mapping each tensor's name to its ``dtype``, ``shape`` and ``data_offsets`` (begin,
end) in the byte buffer that follows the header (plus an optional ``__metadata__`` of
strings), then that buffer, every tensor little-endian and row-major. A weight is read
by memory-mapping its bytes, so a multi-gigabyte checkpoint costs only the tensor asked
for. numpy has no bfloat16, the dtype checkpoints hold: BF16 comes back as its uint16
bits, which :func:`nvfp4_aot.weights.quantize_weight` takes as bfloat16. Reading a
tensor is a header and an offset, so the safetensors package (a compiled dependency,
whose numpy loader needs a bfloat16 dtype from elsewhere) is not needed.

A checkpoint is one .safetensors file, or a sharded one: the Hugging Face index
(``model.safetensors.index.json``: a ``weight_map`` from tensor name to shard file, next
to the index), or a directory holding that index or only .safetensors files (then every
file's header is read). Through an index only the shards holding the asked tensors are
opened, so a checkpoint of hundreds of shards costs the few it needs, and a layer's
experts spread over two shards read as one weight.

Every check names the file, the tensor and the field, before any of the tensor's
bytes is read.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np

SUFFIX = ".safetensors"
INDEX_SUFFIX = ".safetensors.index.json"
INDEX_NAME = "model" + INDEX_SUFFIX  # what a sharded checkpoint's directory holds
HEADER_LIMIT = 100_000_000  # the format's own cap on the JSON header (bytes)
METADATA = "__metadata__"
EXPERT = "{e}"  # in a tensor name: the expert index (read_experts)

# the weight dtypes the quantizer takes -> the numpy dtype their bytes are read as
WEIGHT_DTYPES = {
    "BF16": np.dtype("<u2"),  # bfloat16 bits
    "F16": np.dtype("<f2"),
    "F32": np.dtype("<f4"),
    "F64": np.dtype("<f8"),
    "F8_E4M3": np.dtype("u1"),  # codes of an FP8 block-scaled weight (fp8_blocks)
}


def header(path) -> tuple[dict, int]:
    """(the tensors' entries by name, the file offset their byte buffer starts at).
    Raises ValueError naming what is wrong with the file's header."""
    path = Path(path)
    size = path.stat().st_size
    with path.open("rb") as f:
        prefix = f.read(8)
        if len(prefix) < 8:
            raise ValueError(f"{path}: {size} bytes, shorter than a safetensors header size")
        length = int.from_bytes(prefix, "little")
        if not 2 <= length <= min(HEADER_LIMIT, size - 8):
            raise ValueError(
                f"{path}: header size {length} does not fit a file of {size} bytes "
                "(not a safetensors file?)"
            )
        text = f.read(length)
    try:
        entries = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: the header is not JSON ({exc})") from None
    if not isinstance(entries, dict):
        raise ValueError(f"{path}: the header is not a JSON object")
    entries.pop(METADATA, None)
    return entries, 8 + length


def is_checkpoint(path) -> bool:
    """Whether ``path`` names what :class:`Checkpoint` reads (by name: a .safetensors
    file, an index, or a directory)."""
    path = Path(path)
    return path.suffix == SUFFIX or path.name.endswith(INDEX_SUFFIX) or path.is_dir()


class Checkpoint:
    """The tensors of a .safetensors file or of a sharded checkpoint (the module
    docstring); a shard's header is read when one of its tensors is first asked for.
    Raises ValueError naming the index or file and what is wrong with it."""

    def __init__(self, path):
        self.path = path = Path(path)
        self._headers: dict[Path, tuple[dict, int]] = {}  # shard -> header()
        if path.is_dir():
            index = path / INDEX_NAME
            files = sorted(path.glob("*" + SUFFIX))
            if index.is_file():
                self._where = self._read_index(index)
            elif files:
                self._where = self._map_files(files)
            else:
                raise ValueError(f"{path} holds neither {INDEX_NAME} nor .safetensors files")
        elif path.name.endswith(INDEX_SUFFIX):
            self._where = self._read_index(path)
        else:
            self._where = self._map_files([path])

    def names(self) -> list[str]:
        return list(self._where)

    def dtype(self, name: str) -> str:
        return self._entry(name)[0][name]["dtype"]

    def read(self, name: str) -> np.ndarray:
        """Tensor ``name`` checked and mapped read-only (BF16 as its uint16 bits)."""
        entries, data_start = self._entry(name)
        return _tensor(self._where[name], entries, data_start, name)

    def _entry(self, name: str) -> tuple[dict, int]:
        if name not in self._where:
            raise ValueError(f"{self.path} has no tensor {name!r} ({_names(self._where)})")
        shard = self._where[name]
        if shard not in self._headers:
            self._headers[shard] = header(shard)
        entries = self._headers[shard][0]
        if name not in entries:
            raise ValueError(
                f"{self.path} places tensor {name!r} in {shard.name}, which has no such "
                f"tensor ({_names(entries)})"
            )
        return self._headers[shard]

    def _map_files(self, files: list[Path]) -> dict[str, Path]:
        where: dict[str, Path] = {}
        for file in files:
            self._headers[file] = header(file)
            for name in self._headers[file][0]:
                if name in where:
                    raise ValueError(
                        f"{self.path}: tensor {name!r} is in both {where[name].name} and "
                        f"{file.name}"
                    )
                where[name] = file
        return where

    @staticmethod
    def _read_index(index: Path) -> dict[str, Path]:
        try:
            document = json.loads(index.read_text())
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"{index}: not JSON ({exc})") from None
        weight_map = document.get("weight_map") if isinstance(document, dict) else None
        if not isinstance(weight_map, dict) or not all(
            isinstance(file, str) for file in weight_map.values()
        ):
            raise ValueError(
                f"{index}: no weight_map of tensor names to shard files (not a safetensors index?)"
            )
        shards: dict[str, Path] = {}  # each file checked once (thousands of names share it)
        where = {}
        for name, file in weight_map.items():
            if file not in shards:
                shard = index.parent / file
                if Path(file).is_absolute() or ".." in Path(file).parts or not shard.is_file():
                    raise ValueError(
                        f"{index}: tensor {name!r} is in {file!r}, which is not a file next "
                        "to the index"
                    )
                shards[file] = shard
            where[name] = shards[file]
        return where


def _opened(source) -> Checkpoint:
    """``source`` itself if it is a :class:`Checkpoint` (its headers already read are
    reused), else the checkpoint at that path."""
    return source if isinstance(source, Checkpoint) else Checkpoint(source)


def read_tensor(path, name: str | None = None) -> tuple[np.ndarray, str, str]:
    """(tensor ``name`` of the checkpoint at ``path`` as a read-only array, its
    safetensors dtype, its name); ``name`` may be left out when the checkpoint holds one
    tensor. BF16 comes back as uint16 bits. ``path`` may be an open :class:`Checkpoint`.
    Raises ValueError naming the file, the tensor and the field that is wrong."""
    checkpoint = _opened(path)
    path = checkpoint.path
    if name is None:
        names = checkpoint.names()
        if len(names) != 1:
            raise ValueError(f"{path} holds {len(names)} tensors; name one ({_names(names)})")
        (name,) = names
    array = checkpoint.read(name)
    return array, checkpoint.dtype(name), name


def read_experts(path, pattern: str) -> tuple[list[np.ndarray], str]:
    """(the tensors ``pattern`` names with its one ``{e}`` = 0, 1, ..., E - 1, in that
    order, their safetensors dtype): a MoE layer's per-expert weights, from one file or
    from several shards, each memory-mapped (``np.stack`` makes the (E, n, k) array
    where it fits in memory; the weight quantizer takes them one at a time). Every expert
    from 0 to the last one present must be there, with one dtype and shape. Raises
    ValueError naming the expert that is missing or differs. ``path`` may be an open
    :class:`Checkpoint`."""
    if pattern.count(EXPERT) != 1:
        raise ValueError(f"the pattern {pattern!r} must hold {EXPERT} once")
    checkpoint = _opened(path)
    path = checkpoint.path
    prefix, suffix = pattern.split(EXPERT)
    index = re.compile(re.escape(prefix) + "(0|[1-9][0-9]*)" + re.escape(suffix))
    every = checkpoint.names()
    names = {int(m.group(1)): m.group(0) for m in map(index.fullmatch, every) if m}
    if not names:
        raise ValueError(f"{path} has no tensor {pattern!r} for any expert ({_names(every)})")
    missing = sorted(set(range(max(names) + 1)) - set(names))
    if missing:
        raise ValueError(
            f"{path}: {pattern!r} has experts up to {max(names)} but not expert "
            f"{missing[0]} ({pattern.replace(EXPERT, str(missing[0]))!r})"
        )
    experts = [checkpoint.read(names[e]) for e in range(len(names))]
    dtypes = [checkpoint.dtype(names[e]) for e in range(len(names))]
    for e, array in enumerate(experts):
        if (dtypes[e], array.shape) != (dtypes[0], experts[0].shape):
            raise ValueError(
                f"{path}: tensor {names[e]!r} (expert {e}) is {dtypes[e]} "
                f"{array.shape}, expert 0's {dtypes[0]} {experts[0].shape}"
            )
    return experts, dtypes[0]


def _tensor(path: Path, entries: dict, data_start: int, name: str) -> np.ndarray:
    """Tensor ``name`` (in ``entries``) checked and mapped read-only."""
    entry = entries[name]
    where = f"{path}: tensor {name!r}"
    if not isinstance(entry, dict):
        raise ValueError(f"{where}: its header entry is not an object")
    dtype = entry.get("dtype")
    if not isinstance(dtype, str) or dtype not in WEIGHT_DTYPES:
        raise ValueError(
            f"{where}: dtype {dtype!r} is not a weight dtype the quantizer takes "
            f"({', '.join(WEIGHT_DTYPES)})"
        )
    shape = entry.get("shape")
    if not isinstance(shape, list) or not all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
    ):
        raise ValueError(f"{where}: shape {shape!r} is not a list of sizes")
    offsets = entry.get("data_offsets")
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
    ):
        raise ValueError(f"{where}: data_offsets {offsets!r} is not [begin, end]")
    begin, end = offsets
    numpy_dtype = WEIGHT_DTYPES[dtype]
    expected = math.prod(shape) * numpy_dtype.itemsize
    if not 0 <= begin <= end or end - begin != expected:
        raise ValueError(
            f"{where}: data_offsets [{begin}, {end}] hold {end - begin} bytes, its "
            f"{dtype} shape {tuple(shape)} needs {expected}"
        )
    size = path.stat().st_size
    if data_start + end > size:
        raise ValueError(
            f"{where}: its bytes end at {data_start + end}, past the file's {size} "
            "(a truncated file?)"
        )
    if expected == 0:  # memmap cannot map nothing
        return np.zeros(shape, dtype=numpy_dtype)
    count = expected // numpy_dtype.itemsize
    flat = np.memmap(path, dtype=numpy_dtype, mode="r", offset=data_start + begin, shape=(count,))
    return flat.reshape(shape)


def _names(names, most: int = 8) -> str:
    names = sorted(names)
    shown = ", ".join(names[:most])
    return shown + (f", ... {len(names) - most} more" if len(names) > most else "")
