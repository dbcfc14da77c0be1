"""nvfp4_aot.safetensors_file: tensors of .safetensors files written here byte by byte
as the format specifies (header size, JSON header padded with spaces to 8 bytes as the
safetensors package pads it, row-major little-endian data) read back exactly, and every
malformed file refused with the file, the tensor and the field named."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from nvfp4_aot.layouts import float_to_bf16_bits
from nvfp4_aot.safetensors_file import (
    EXPERT,
    INDEX_NAME,
    WEIGHT_DTYPES,
    read_experts,
    read_tensor,
)
from support import SAFETENSORS_CODES, write_safetensors


def test_every_weight_dtype_reads_back_exactly(tmp_path):
    rng = np.random.default_rng(0)
    tensors = {
        "model.layers.0.mlp.experts.w1": (
            "BF16",
            float_to_bf16_bits(rng.standard_normal((3, 8, 32))),
        ),
        "w_f16": ("F16", rng.standard_normal((5, 16)).astype(np.float16)),
        "w_f32": ("F32", rng.standard_normal((2, 48)).astype(np.float32)),
        "w_f64": ("F64", rng.standard_normal((1, 16))),
        "w_fp8": ("F8_E4M3", rng.integers(0, 256, (4, 32), dtype=np.uint8)),
        "empty": ("F32", np.zeros((0, 16), dtype=np.float32)),
    }
    path = tmp_path / "w.safetensors"
    write_safetensors(path, tensors, metadata={"format": "pt"})
    assert set(WEIGHT_DTYPES) == {"BF16", "F16", "F32", "F64", "F8_E4M3"}
    for name, (dtype, array) in tensors.items():
        read, read_dtype, read_name = read_tensor(path, name)
        assert (read_dtype, read_name) == (dtype, name)
        assert read.dtype == np.dtype(SAFETENSORS_CODES[dtype]) and read.shape == array.shape
        assert np.array_equal(read, array)
    weight, _, _ = read_tensor(path, "w_f32")
    with pytest.raises(ValueError):  # read-only: the file's bytes, mapped
        weight[0, 0] = 1


@pytest.mark.parametrize("sharded", [False, True])
def test_one_tensor_needs_no_name_and_several_do(tmp_path, sharded):
    """The same whether the tensors are in one file or in two shards of a checkpoint."""
    f32, f16 = ("F32", np.ones((2, 16), np.float32)), ("F16", np.ones((2, 16), np.float16))
    one = tmp_path / "one.safetensors"
    write_safetensors(one, {"weight": f32})
    if sharded:
        two = _sharded(tmp_path, {"a.safetensors": {"a": f32}, "b.safetensors": {"b": f16}})
    else:
        two = tmp_path / "two.safetensors"
        write_safetensors(two, {"a": f32, "b": f16})
    assert read_tensor(one)[2] == "weight"
    with pytest.raises(ValueError, match=rf"{two.name} holds 2 tensors; name one \(a, b\)"):
        read_tensor(two)
    with pytest.raises(ValueError, match=r"has no tensor 'c' \(a, b\)"):
        read_tensor(two, "c")


@pytest.mark.parametrize(
    "entries, cut, message",
    [
        ({"w": {"dtype": "I32"}}, 0, "tensor 'w': dtype 'I32' is not a weight dtype"),
        ({"w": {"dtype": ["F32"]}}, 0, "tensor 'w': dtype ['F32'] is not a weight dtype"),
        ({"w": {"shape": [4, -16]}}, 0, "tensor 'w': shape [4, -16] is not a list of sizes"),
        ({"w": {"shape": "4x16"}}, 0, "tensor 'w': shape '4x16' is not a list of sizes"),
        ({"w": {"data_offsets": [0]}}, 0, "tensor 'w': data_offsets [0] is not [begin, end]"),
        ({"w": {"shape": [4, 32]}}, 0, "[0, 256] hold 256 bytes, its F32 shape (4, 32) needs 512"),
        ({"w": {"data_offsets": [8, 264]}}, 0, "its bytes end at"),
        ({}, 4, "past the file's"),
    ],
)
def test_malformed_entries_are_named(tmp_path, entries, cut, message):
    path = tmp_path / "w.safetensors"
    write_safetensors(path, {"w": ("F32", np.ones((4, 16), np.float32))}, entries=entries, cut=cut)
    with pytest.raises(ValueError) as error:
        read_tensor(path, "w")
    assert str(path) in str(error.value) and message in str(error.value)


@pytest.mark.parametrize(
    "raw, message",
    [
        (b"\x01\x02", "shorter than a safetensors header size"),
        (struct.pack("<Q", 1 << 40) + b"{}", "does not fit a file of"),
        (struct.pack("<Q", 4) + b"{no}", "the header is not JSON"),
        (struct.pack("<Q", 2) + b"[]", "the header is not a JSON object"),
    ],
)
def test_a_file_that_is_not_safetensors_is_refused(tmp_path, raw, message):
    path = tmp_path / "x.safetensors"
    path.write_bytes(raw)
    with pytest.raises(ValueError, match=message):
        read_tensor(path, "w")


def expert_file(path, experts: dict, extra=None) -> None:
    """Tensors layers.0.experts.<e>.w for the given {e: (dtype, array)}, beside others."""
    tensors = {f"layers.0.experts.{e}.w": value for e, value in experts.items()}
    tensors.update(extra or {})
    write_safetensors(path, tensors)


def test_experts_stack_in_index_order(tmp_path):
    rng = np.random.default_rng(1)
    arrays = [float_to_bf16_bits(rng.standard_normal((8, 32))) for _ in range(12)]
    path = tmp_path / "m.safetensors"
    others = {"layers.0.experts.03.w": ("BF16", arrays[0]),  # not an index: a leading zero
              "layers.0.experts.1.w.bias": ("F32", np.ones((8,), np.float32)),
              "layers.1.experts.0.w": ("BF16", arrays[0])}  # fmt: skip
    expert_file(path, {e: ("BF16", a) for e, a in reversed(list(enumerate(arrays)))}, others)
    experts, dtype = read_experts(path, "layers.0.experts.{e}.w")
    assert dtype == "BF16" and len(experts) == 12
    assert all(isinstance(x, np.memmap) and not x.flags.writeable for x in experts)  # mapped
    assert np.array_equal(np.stack(experts), np.stack(arrays))  # 10, 11 after 9, not after 1


@pytest.mark.parametrize(
    "experts, pattern, message",
    [
        (
            {0: "a", 1: "a", 3: "a"},
            "layers.0.experts.{e}.w",
            "up to 3 but not expert 2 ('layers.0.experts.2.w')",
        ),
        (
            {0: "a", 1: "b"},
            "layers.0.experts.{e}.w",
            "'layers.0.experts.1.w' (expert 1) is F32 (4, 32), expert 0's F32 (8, 32)",
        ),
        (
            {0: "a", 1: "h"},
            "layers.0.experts.{e}.w",
            "(expert 1) is F16 (8, 32), expert 0's F32 (8, 32)",
        ),
        ({0: "a"}, "layers.1.experts.{e}.w", "no tensor 'layers.1.experts.{e}.w' for any expert"),
        ({0: "a"}, "layers.0.experts.w", "must hold {e} once"),
        ({0: "a"}, "layers.{e}.experts.{e}.w", "must hold {e} once"),
    ],
)
def test_experts_that_are_missing_or_differ_are_named(tmp_path, experts, pattern, message):
    kinds = {"a": ("F32", np.ones((8, 32), np.float32)), "b": ("F32", np.ones((4, 32), np.float32)),
             "h": ("F16", np.ones((8, 32), np.float16))}  # fmt: skip
    path = tmp_path / "m.safetensors"
    expert_file(path, {e: kinds[kind] for e, kind in experts.items()})
    with pytest.raises(ValueError) as error:
        read_experts(path, pattern)
    assert message in str(error.value)


# ---------------------------------------------------------------------------------------
# sharded checkpoints: a Hugging Face index (weight_map) or a directory of shards


def _sharded(tmp_path, shards: dict[str, dict], index: bool = True):
    """Shards ``file -> {name: (dtype, array)}`` written into tmp_path/ckpt, with the
    index naming every tensor's shard when ``index``; returns the directory."""
    root = tmp_path / "ckpt"
    root.mkdir()
    weight_map = {}
    for file, tensors in shards.items():
        write_safetensors(root / file, tensors)
        weight_map.update(dict.fromkeys(tensors, file))
    if index:
        document = {"metadata": {"total_size": 0}, "weight_map": weight_map}
        (root / INDEX_NAME).write_text(json.dumps(document))
    return root


def _layer(rng, experts: int, n: int = 8, k: int = 32):
    return [float_to_bf16_bits(rng.standard_normal((n, k))) for _ in range(experts)]


@pytest.mark.parametrize("through", ["index", "directory", "directory without index"])
def test_experts_across_shards_read_as_one_weight(tmp_path, through):
    """A layer's experts split over two shards (as large checkpoints split them) stack as
    from one file, through the index, its directory, or a directory of shards alone."""
    w = _layer(np.random.default_rng(1), 6)
    name = "model.layers.3.mlp.experts.{e}.down_proj.weight"
    shards = {
        "model-00001-of-00002.safetensors": {name.format(e=e): ("BF16", w[e]) for e in range(4)},
        "model-00002-of-00002.safetensors": {
            **{name.format(e=e): ("BF16", w[e]) for e in range(4, 6)},
            "model.norm.weight": ("F32", np.ones((1, 16), np.float32)),
        },
    }
    root = _sharded(tmp_path, shards, index=through != "directory without index")
    path = root / INDEX_NAME if through == "index" else root
    experts, dtype = read_experts(path, name.replace("{e}", EXPERT))
    assert dtype == "BF16" and np.array_equal(np.stack(experts), np.stack(w))
    norm, norm_dtype, _ = read_tensor(path, "model.norm.weight")
    assert norm_dtype == "F32" and np.array_equal(norm, np.ones((1, 16), np.float32))


def test_only_the_shards_holding_the_asked_tensors_are_opened(tmp_path):
    """A shard the asked tensors are not in is not read (here: one that is not even a
    safetensors file); asking for one of its tensors names it."""
    root = _sharded(tmp_path, {"a.safetensors": {"w": ("F32", np.ones((2, 16), np.float32))},
                               "b.safetensors": {"v": ("F32", np.ones((2, 16), np.float32))}})  # fmt: skip
    (root / "b.safetensors").write_bytes(b"\xff" * 64)
    assert read_tensor(root, "w")[2] == "w"
    with pytest.raises(ValueError, match=r"b.safetensors: header size \d+ does not fit"):
        read_tensor(root, "v")


@pytest.mark.parametrize(
    "index, message",
    [
        ("{not json", "model.safetensors.index.json: not JSON"),
        ('["a.safetensors"]', "no weight_map of tensor names to shard files"),
        ('{"weight_map": {"w": 3}}', "no weight_map of tensor names to shard files"),
        ('{"weight_map": {"w": "gone.safetensors"}}',
         "tensor 'w' is in 'gone.safetensors', which is not a file next to the index"),
        ('{"weight_map": {"w": "../a.safetensors"}}',
         r"tensor 'w' is in '../a.safetensors', which is not a file next to the index"),
        ('{"weight_map": {"w": "a.safetensors", "x": "a.safetensors"}}',
         "places tensor 'x' in a.safetensors, which has no such tensor"),
    ],
)  # fmt: skip
def test_a_broken_index_is_named(tmp_path, index, message):
    root = _sharded(tmp_path, {"a.safetensors": {"w": ("F32", np.ones((2, 16), np.float32))}})
    write_safetensors(tmp_path / "a.safetensors", {"w": ("F32", np.ones((2, 16), np.float32))})
    (root / INDEX_NAME).write_text(index)
    with pytest.raises(ValueError, match=message):
        read_tensor(root, "x" if "'x'" in message else "w")


def test_shards_without_index_must_not_repeat_a_tensor(tmp_path):
    ones = ("F32", np.ones((2, 16), np.float32))
    root = _sharded(tmp_path, {"a.safetensors": {"w": ones}, "b.safetensors": {"w": ones}},
                    index=False)  # fmt: skip
    with pytest.raises(ValueError, match="tensor 'w' is in both a.safetensors and b.safetensors"):
        read_tensor(root, "w")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="holds neither model.safetensors.index.json nor"):
        read_tensor(tmp_path / "empty", "w")


def test_experts_across_shards_that_differ_are_named(tmp_path):
    w = _layer(np.random.default_rng(2), 3)
    shards = {"a.safetensors": {f"e.{e}.w": ("BF16", w[e]) for e in range(2)},
              "b.safetensors": {"e.2.w": ("F32", np.zeros((8, 32), np.float32))}}  # fmt: skip
    root = _sharded(tmp_path, shards)
    with pytest.raises(
        ValueError, match=r"tensor 'e.2.w' \(expert 2\) is F32 \(8, 32\), expert 0's BF16"
    ):
        read_experts(root, "e.{e}.w")
