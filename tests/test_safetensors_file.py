"""nvfp4_aot.safetensors_file: tensors of .safetensors files written here byte by byte
as the format specifies (header size, JSON header padded with spaces to 8 bytes as the
safetensors package pads it, row-major little-endian data) read back exactly, and every
malformed file refused with the file, the tensor and the field named."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from nvfp4_aot.safetensors_file import WEIGHT_DTYPES, read_tensor
from support import SAFETENSORS_CODES, bf16_bits, write_safetensors


def test_every_weight_dtype_reads_back_exactly(tmp_path):
    rng = np.random.default_rng(0)
    tensors = {
        "model.layers.0.mlp.experts.w1": ("BF16", bf16_bits(rng.standard_normal((3, 8, 32)))),
        "w_f16": ("F16", rng.standard_normal((5, 16)).astype(np.float16)),
        "w_f32": ("F32", rng.standard_normal((2, 48)).astype(np.float32)),
        "w_f64": ("F64", rng.standard_normal((1, 16))),
        "empty": ("F32", np.zeros((0, 16), dtype=np.float32)),
    }
    path = tmp_path / "w.safetensors"
    write_safetensors(path, tensors, metadata={"format": "pt"})
    assert set(WEIGHT_DTYPES) == {"BF16", "F16", "F32", "F64"}
    for name, (dtype, array) in tensors.items():
        read, read_dtype, read_name = read_tensor(path, name)
        assert (read_dtype, read_name) == (dtype, name)
        assert read.dtype == np.dtype(SAFETENSORS_CODES[dtype]) and read.shape == array.shape
        assert np.array_equal(read, array)
    weight, _, _ = read_tensor(path, "w_f32")
    with pytest.raises(ValueError):  # read-only: the file's bytes, mapped
        weight[0, 0] = 1


def test_one_tensor_needs_no_name_and_several_do(tmp_path):
    one, two = tmp_path / "one.safetensors", tmp_path / "two.safetensors"
    write_safetensors(one, {"weight": ("F32", np.ones((2, 16), np.float32))})
    write_safetensors(two, {"a": ("F32", np.ones((2, 16), np.float32)),
                            "b": ("F16", np.ones((2, 16), np.float16))})  # fmt: skip
    assert read_tensor(one)[2] == "weight"
    with pytest.raises(ValueError, match=r"two.safetensors holds 2 tensors; name one \(a, b\)"):
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
