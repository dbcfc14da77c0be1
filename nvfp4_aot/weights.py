"""Weights to NVFP4 files, offline (``nvfp4-aot quantize``): read a weight (a .npy array,
tensors of a .safetensors checkpoint or of a sharded one, FP8 block-scaled weights),
quantize it expert by expert with :func:`nvfp4_aot.quantize.quantize`, each expert with
its own global scale, and write what the GEMM reads as B, SFB and alpha's factor.

Experts are read, converted to float32 and quantized one at a time, on ``workers``
threads, and the outputs written in place, so a layer larger than memory quantizes in
the memory of its output and of one expert per thread.
"""

from __future__ import annotations

import json
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import fp8_blocks, safetensors_file
from .blocked import blocked_scale_bytes
from .layouts import blocked_to_scales
from .quantize import QuantizedTensor, as_float32, quantize


@dataclass(frozen=True, eq=False)
class QuantizedWeight:
    """A weight (n, k) or per-expert weights (E, n, k), each expert with its own ``g``.

    ``packed`` is (n, k/2) or (E, n, k/2); ``scales_blocked`` is one buffer of
    E x blocked_scale_bytes(n, k) bytes, expert after expert, as the MoE plans read SFB;
    ``global_scale`` and ``scale_2`` are 0-dim or (E,) float32.
    """

    packed: np.ndarray
    scales: np.ndarray
    scales_blocked: np.ndarray
    global_scale: np.ndarray
    scale_2: np.ndarray
    experts: int | None
    n: int
    k: int


def quantize_weight(
    weight, experts_axis: int | None = None, workers: int | None = None, on_expert=None
) -> QuantizedWeight:
    """Quantize a weight (n, k) or per-expert weights with one experts axis.

    Parameters
    ----------
    weight : array_like, shape (n, k) or 3-D
        K-major (K is the last axis) float16/bfloat16/float32/float64 values.
    experts_axis : int, optional
        For a 3-D weight, the axis of the experts, 0 (default: (E, n, k)) or 1
        ((n, E, k)). Not allowed for a 2-D weight.
    workers, on_expert : optional
        As :func:`quantize_experts` takes them.

    Experts are converted to float32 and quantized one at a time
    (:func:`quantize_experts`), so a memory-mapped layer costs one expert's float32 copy.
    """
    w = np.asarray(weight)
    if w.ndim == 2:
        if experts_axis is not None:
            raise ValueError(f"a 2-D weight {w.shape} has no experts axis")
        q = quantize(w)
        return QuantizedWeight(
            packed=q.packed,
            scales=q.scales,
            scales_blocked=q.scales_blocked,
            global_scale=np.asarray(q.global_scale, dtype=np.float32),
            scale_2=np.asarray(q.scale_2, dtype=np.float32),
            experts=None,
            n=w.shape[0],
            k=w.shape[1],
        )
    if w.ndim != 3:
        raise ValueError(f"the weight must be 2-D (n, k) or 3-D (E, n, k), got shape {w.shape}")
    axis = 0 if experts_axis is None else experts_axis
    if axis not in (0, 1, -3, -2):
        raise ValueError(
            f"experts axis must be 0 or 1 (K is the last axis), got {experts_axis} "
            f"for shape {w.shape}"
        )
    return quantize_experts(np.moveaxis(w, axis, 0), workers, on_expert)


MAX_WORKERS = 8  # default threads of quantize_experts: each holds one expert's work


def default_workers() -> int:
    """The CPUs this process may run on, at most :data:`MAX_WORKERS`."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(cpus or 1, MAX_WORKERS))


def quantize_experts(experts, workers: int | None = None, on_expert=None) -> QuantizedWeight:
    """Quantize per-expert weights, each (n, k) with its own ``g``.

    ``experts`` is anything with ``len`` and ``experts[e]`` giving expert e's (n, k)
    array (a 3-D array, a list of memory-mapped tensors, experts concatenated as they are
    asked for). ``workers`` threads (default :func:`default_workers`) quantize experts
    side by side, numpy's array loops running without the GIL; each reads and holds one
    expert as float32 at a time, and the outputs are written in place, so a layer larger
    than memory quantizes in the memory of its output and ``workers`` experts. The
    bytes do not depend on ``workers``. ``on_expert(done, total)`` is called after each
    expert, one call at a time (progress: ``done`` counts 1 .. ``total``). Errors name the expert (the first one, in expert
    order, where several fail): one whose shape differs from expert 0's, or that
    :func:`~nvfp4_aot.quantize.quantize` refuses.
    """
    count = len(experts)
    if count == 0:
        raise ValueError("no experts to quantize")

    def quantize_expert(e: int) -> QuantizedTensor:
        x = experts[e]
        try:
            return quantize(x)
        except (ValueError, TypeError) as exc:  # an expert of hundreds: name it
            raise type(exc)(f"expert {e}: {exc}") from None

    first = quantize_expert(0)
    n, k = first.shape
    packed = np.empty((count, *first.packed.shape), np.uint8)
    scales = np.empty((count, *first.scales.shape), np.uint8)
    blocked = np.empty((count, first.scales_blocked.size), np.uint8)
    global_scale = np.empty(count, np.float32)

    lock, finished = threading.Lock(), 0  # experts stored, for on_expert

    def store(e: int, q: QuantizedTensor) -> None:
        nonlocal finished
        if q.shape != (n, k):
            raise ValueError(f"expert {e} is {q.shape}, expert 0's {(n, k)}")
        packed[e], scales[e], blocked[e] = q.packed, q.scales, q.scales_blocked
        global_scale[e] = q.global_scale
        if on_expert is not None:
            with lock:
                finished += 1
                on_expert(finished, count)

    store(0, first)
    threads = min(default_workers() if workers is None else workers, count - 1)
    if threads <= 1:
        for e in range(1, count):
            store(e, quantize_expert(e))
    else:
        with ThreadPoolExecutor(threads) as pool:
            done = [pool.submit(lambda e: store(e, quantize_expert(e)), e) for e in range(1, count)]
            try:
                for future in done:  # in expert order: the first failing expert is named
                    future.result()
            except BaseException:
                for future in done:
                    future.cancel()
                raise
    return QuantizedWeight(
        packed=packed,
        scales=scales,
        scales_blocked=blocked.reshape(-1),
        global_scale=global_scale,
        scale_2=np.float32(1.0) / global_scale,
        experts=count,
        n=n,
        k=k,
    )


class _ConcatenatedExperts:
    """Per-expert weights of several tensors concatenated along n, an expert at a time
    as :func:`quantize_experts` asks (gate and up as one fused weight, never the whole
    fused layer in memory)."""

    def __init__(self, parts):
        self.parts = parts

    def __len__(self) -> int:
        return len(self.parts[0])

    def __getitem__(self, e: int) -> np.ndarray:
        return np.concatenate([part[e] for part in self.parts], axis=0)


FILES = {
    "B": "B.npy",
    "SFB": "SFB.npy",
    "scale_2": "scale_2.npy",
    "global_scale": "global_scale.npy",
    "description": "quantize.json",
}
"""File names that :func:`save_weight` writes into its directory."""
FORMAT = "nvfp4-aot quantized weight"  # quantize.json's "format"
ARRAYS = tuple(field for field in FILES if field != "description")  # the .npy files


def describe(q: QuantizedWeight, source: str, dtype: str, k_first: bool = False) -> dict:
    """The JSON document written next to the arrays (``k_first``: the source was stored
    K first and was transposed)."""
    experts = q.experts
    lead = [] if experts is None else [experts]
    per_expert = blocked_scale_bytes(q.n, q.k)
    return {
        "format": FORMAT,
        "source": source,
        "source_dtype": dtype,
        "source_k_first": k_first,
        "experts": experts,
        "n": q.n,
        "k": q.k,
        "files": {
            "B": {
                "file": FILES["B"],
                "dtype": "uint8",
                "shape": lead + [q.n, q.k // 2],
                "layout": "packed FP4 E2M1, K-major, the even K index in the low nibble",
            },
            "SFB": {
                "file": FILES["SFB"],
                "dtype": "uint8",
                "shape": [len(q.scales_blocked)],
                "bytes_per_expert": per_expert,
                "layout": "E4M3 block scales (16 K elements each) in the blocked layout "
                "(128 x 4 atoms, zero padded), expert after expert",
            },
            "scale_2": {
                "file": FILES["scale_2"],
                "dtype": "float32",
                "shape": lead,
                "meaning": "1 / g per expert: multiply into the GEMM's alpha "
                "(alpha = scale_2(A) * scale_2(B))",
            },
            "global_scale": {
                "file": FILES["global_scale"],
                "dtype": "float32",
                "shape": lead,
                "meaning": "g = 2688 / amax(|w|) per expert (1 for an all-zero expert)",
            },
        },
        "formulas": {
            "block_scale": "sf = E4M3_rn_sat((g * amax16) / 6), float32",
            "element": "q = E2M1_rne_sat(x * (g / sf)), float32; q = +-0 where sf == 0",
            "dequantized": "x ~= fp4(q) * e4m3(sf) / g",
        },
    }


def read_safetensors_weight(
    path, tensors: tuple[str, ...], experts_axis: int | None = None, k_first: bool = False
):
    """(weight, its safetensors dtype, a source label) from a .safetensors checkpoint (a
    file, a sharded checkpoint's index or its directory): the one tensor it holds, or the
    named ones (BF16 as its bits, :mod:`nvfp4_aot.safetensors_file`).
    A name with ``{e}`` reads the experts e = 0, 1, ... of a MoE layer as one (E, n, k)
    weight (experts on axis 0). Several names are concatenated along n in the order
    given (gate and up projections as one fused weight, one global scale per expert);
    they must agree in dtype and in every other dimension. ``k_first``: the tensors are
    stored (k, n) or (E, k, n) and are read transposed (:func:`_k_last`)."""
    if (len(tensors) > 1 or k_first) and experts_axis not in (None, 0):
        raise ValueError(
            f"{path}: tensors concatenated along n or stored K first take experts on "
            f"axis 0, not {experts_axis}"
        )
    checkpoint = safetensors_file.Checkpoint(path)  # one index read, shard headers once
    parts = []
    for name in tensors or (None,):
        if name is not None and safetensors_file.EXPERT in name:
            if experts_axis not in (None, 0):
                raise ValueError(
                    f"{path}: the experts {name!r} names are stacked on axis 0, not {experts_axis}"
                )
            experts, dtype = safetensors_file.read_experts(checkpoint, name)
            if dtype == FP8:
                experts = fp8_blocks.Experts(experts, _block_scales(checkpoint, name, experts=True))
            parts.append((name, experts, dtype))
        else:
            array, dtype, name = safetensors_file.read_tensor(checkpoint, name)
            if dtype == FP8:
                if array.ndim != 2:
                    raise ValueError(
                        f"{path}: {name!r} is a {array.ndim}-D {FP8} tensor; FP8 weights are "
                        "read as (n, k) tensors, experts as a name with {e}"
                    )
                try:
                    array = fp8_blocks.dequantize(array, _block_scales(checkpoint, name))
                except ValueError as exc:
                    raise ValueError(f"{path}: {name!r}: {exc}") from None
            parts.append((name, array, dtype))
    if k_first:
        parts = [(name, _k_last(part), dtype) for name, part, dtype in parts]
    first, array0, dtype = parts[0]
    shape0 = _part_shape(array0)
    for name, array, part_dtype in parts[1:]:
        shape = _part_shape(array)
        if part_dtype != dtype or shape[:-2] + shape[-1:] != shape0[:-2] + shape0[-1:]:
            raise ValueError(
                f"{path}: {name!r} ({part_dtype} {shape}) cannot be concatenated along "
                f"n with {first!r} ({dtype} {shape0})"
            )
    if len(parts) == 1:
        weight = array0
    elif len(shape0) == 2:
        weight = np.concatenate([a for _, a, _ in parts], axis=0)
    else:
        weight = _ConcatenatedExperts([a for _, a, _ in parts])
    return weight, dtype, f"{Path(path).name}:{'+'.join(name for name, _, _ in parts)}"


def _k_last(part):
    """A tensor stored K first, (k, n) or (E, k, n) (Llama 4's ``experts.gate_up_proj``),
    as its (n, k) / (E, n, k) view; experts read one at a time are transposed as they are
    asked for. Nothing is copied here (the quantizer converts an expert at a time)."""
    if isinstance(part, np.ndarray):
        return np.swapaxes(part, -1, -2)
    return _TransposedExperts(part)


class _TransposedExperts:
    """Experts stored (k, n), each handed out as its (n, k) transpose."""

    def __init__(self, experts):
        self.experts = experts
        count, k, n = _part_shape(experts)
        self.shape = (count, n, k)

    def __len__(self) -> int:
        return len(self.experts)

    def __getitem__(self, e: int) -> np.ndarray:
        return np.asarray(self.experts[e]).T


def _part_shape(part) -> tuple[int, ...]:
    """The shape of a tensor or of experts that know it, or (E, n, k) of a list of E
    (n, k) expert tensors."""
    shape = getattr(part, "shape", None)
    return tuple(shape) if shape is not None else (len(part), *part[0].shape)


FP8 = "F8_E4M3"  # the safetensors dtype of an FP8 block-scaled weight's codes


def _block_scales(checkpoint, name: str, experts: bool = False):
    """The float32 block scales of FP8 weight ``name`` (a pattern with ``{e}``: a list
    of them, expert by expert), from tensor ``name + "_scale_inv"`` (F32 or BF16) of
    ``checkpoint`` (a :class:`~nvfp4_aot.safetensors_file.Checkpoint`)."""
    path, scale_name = checkpoint.path, name + fp8_blocks.SCALE_SUFFIX
    try:
        if experts:
            scales, dtype = safetensors_file.read_experts(checkpoint, scale_name)
        else:
            scale, dtype, _ = safetensors_file.read_tensor(checkpoint, scale_name)
            scales = [scale]
    except ValueError as exc:
        raise ValueError(
            f"{path}: the {FP8} weight {name!r} needs its block scales {scale_name!r} ({exc})"
        ) from None
    if dtype not in ("F32", "BF16"):
        raise ValueError(f"{path}: block scales {scale_name!r} are {dtype}, not F32 or BF16")
    scales = [as_float32(s) for s in scales]  # BF16 bits exactly; F32 as stored
    return scales if experts else scales[0]


def save_weight(
    path,
    out_dir,
    experts_axis: int | None = None,
    tensors=(),
    workers: int | None = None,
    k_first: bool = False,
    on_expert=None,
) -> dict:
    """Quantize the weight in ``path`` and write :data:`FILES` to ``out_dir`` (created if
    missing). Returns the JSON description. ``path`` is a .npy array or a .safetensors
    checkpoint (a file, an index or a directory), whose ``tensors`` are read
    (:func:`read_safetensors_weight`); ``workers`` as :func:`quantize_experts` takes it;
    ``k_first``: the weight is stored (k, n) or (E, k, n), and its transpose is quantized;
    ``on_expert`` as :func:`quantize_experts` takes it.

    Raises ValueError or TypeError naming the file and what is wrong with it or its array.
    """
    path, out_dir = Path(path), Path(out_dir)
    tensors = (tensors,) if isinstance(tensors, str) else tuple(tensors)
    if safetensors_file.is_checkpoint(path):
        weight, dtype, source = read_safetensors_weight(path, tensors, experts_axis, k_first)
    elif tensors:
        raise ValueError(
            f"{path}: tensor names ({', '.join(tensors)}) are for a .safetensors checkpoint"
        )
    else:
        try:
            weight = np.load(path, mmap_mode="r", allow_pickle=False)  # experts as read
        except (OSError, ValueError) as exc:
            raise ValueError(f"cannot read {path} as a .npy array: {exc}") from None
        if not isinstance(weight, np.ndarray):
            raise ValueError(f"{path} is not a single .npy array")
        dtype, source = str(weight.dtype), path.name
        if k_first:
            if experts_axis not in (None, 0):
                raise ValueError(
                    f"{path}: a weight stored K first takes experts on axis 0, not {experts_axis}"
                )
            weight = _k_last(weight)
    try:
        if isinstance(weight, np.ndarray):
            q = quantize_weight(weight, experts_axis, workers, on_expert)
        else:  # experts read from a checkpoint, one at a time
            q = quantize_experts(weight, workers, on_expert)
    except (ValueError, TypeError) as exc:  # the array's messages: name the file too
        raise type(exc)(f"{path}: {exc}") from None
    out_dir.mkdir(parents=True, exist_ok=True)
    np.save(out_dir / FILES["B"], q.packed)
    np.save(out_dir / FILES["SFB"], q.scales_blocked)
    np.save(out_dir / FILES["scale_2"], q.scale_2)
    np.save(out_dir / FILES["global_scale"], q.global_scale)
    document = describe(q, source, dtype, k_first)
    (out_dir / FILES["description"]).write_text(json.dumps(document, indent=2) + "\n")
    return document


def load_weight(out_dir) -> QuantizedWeight:
    """The weight :func:`save_weight` wrote into ``out_dir``, each file checked against
    ``quantize.json`` (dtype and shape, SFB's bytes per expert, scale_2 = 1 / g) before it
    is returned: B is what a plan takes as B, SFB as SFB, scale_2 the weight's factor of
    alpha. ``scales`` (row-major) comes back from the blocked bytes. Raises ValueError
    naming the file and the field that does not match."""
    out_dir = Path(out_dir)
    described = out_dir / FILES["description"]
    try:
        document = json.loads(described.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"cannot read {described}: {exc}") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise ValueError(f"{described} is not a {FORMAT!r} description")
    try:
        experts, n, k = document["experts"], document["n"], document["k"]
        files = document["files"]
        arrays = {field: _described_array(out_dir, files[field]) for field in ARRAYS}
    except (KeyError, TypeError) as exc:
        raise ValueError(f"{described}: missing or malformed field {exc}") from None
    sizes = [n, k] if experts is None else [experts, n, k]
    if not all(type(size) is int and size > 0 for size in sizes) or k % 16:
        raise ValueError(f"{described}: experts {experts!r}, n {n!r}, k {k!r} describe no weight")
    lead = [] if experts is None else [experts]
    expected = {"B": lead + [n, k // 2], "SFB": [(experts or 1) * blocked_scale_bytes(n, k)],
                "scale_2": lead, "global_scale": lead}  # fmt: skip
    for field, shape in expected.items():
        if list(arrays[field].shape) != shape:
            raise ValueError(
                f"{out_dir / FILES[field]}: shape {arrays[field].shape}, the description's "
                f"weight ({experts} experts, n {n}, k {k}) needs {tuple(shape)}"
            )
    global_scale, scale_2 = arrays["global_scale"], arrays["scale_2"]
    if not np.array_equal(scale_2, np.float32(1.0) / global_scale):
        raise ValueError(
            f"{out_dir / FILES['scale_2']} is not 1 / {FILES['global_scale']} (files of "
            "different runs?)"
        )
    per_expert = arrays["SFB"].reshape(experts or 1, -1)
    scales = np.stack([blocked_to_scales(b, n, k // 16) for b in per_expert])
    return QuantizedWeight(
        packed=arrays["B"],
        scales=scales if experts is not None else scales[0],
        scales_blocked=arrays["SFB"],
        global_scale=global_scale,
        scale_2=scale_2,
        experts=experts,
        n=n,
        k=k,
    )


def _described_array(out_dir: Path, entry: dict) -> np.ndarray:
    """The .npy file ``entry`` names in ``out_dir``, of the dtype it states."""
    path = out_dir / entry["file"]
    try:
        array = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read {path}: {exc}") from None
    if array.dtype != np.dtype(entry["dtype"]):
        raise ValueError(f"{path}: dtype {array.dtype}, the description says {entry['dtype']}")
    return array
