"""nvfp4_aot.weights: per-expert weights quantized one at a time (the same bytes as the
stacked weight, on any number of threads, in the memory of the output and one expert),
and FP8 block-scaled weights read with their scales. The files and the CLI:
tests/test_cli.py; the readers: tests/test_safetensors_file.py, tests/test_fp8_blocks.py."""

from __future__ import annotations

import json
import threading
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from nvfp4_aot.blocked import blocked_scale_bytes
from nvfp4_aot.layouts import bf16_bits_to_float, float_to_bf16_bits
from nvfp4_aot.quantize import quantize
from nvfp4_aot.weights import (
    load_weight,
    quantize_experts,
    quantize_weight,
    read_safetensors_weight,
    save_weight,
)
from support import write_safetensors


def test_quantize_weight_per_expert():
    rng = np.random.default_rng(2)
    w = rng.standard_normal((3, 40, 48)).astype(np.float32) * np.float32([[[1]], [[5]], [[0]]])
    q = quantize_weight(w)
    assert q.experts == 3 and (q.n, q.k) == (40, 48)
    assert q.packed.shape == (3, 40, 24) and q.scales_blocked.dtype == np.uint8
    per = blocked_scale_bytes(40, 48)
    assert q.scales_blocked.shape == (3 * per,)
    for e in range(3):
        one = quantize(w[e])
        assert np.array_equal(q.packed[e], one.packed)
        assert np.array_equal(q.scales_blocked[e * per : (e + 1) * per], one.scales_blocked)
        assert q.global_scale[e] == one.global_scale and q.scale_2[e] == one.scale_2
    assert q.global_scale[2] == 1.0  # the all-zero expert
    moved = quantize_weight(np.moveaxis(w, 0, 1), experts_axis=1)
    assert np.array_equal(moved.packed, q.packed)
    assert np.array_equal(moved.scales_blocked, q.scales_blocked)


def test_quantize_experts_one_at_a_time_equals_the_stacked_weight():
    """Any sequence of (n, k) experts (here a list of BF16 bits) gives the stacked
    weight's bytes; an expert of another shape, and no experts, are refused."""
    rng = np.random.default_rng(5)
    experts = [float_to_bf16_bits(rng.standard_normal((24, 64)) * (e + 1)) for e in range(4)]
    q, stacked = quantize_experts(experts), quantize_weight(np.stack(experts))
    assert (q.experts, q.n, q.k) == (4, 24, 64)
    for field in ("packed", "scales", "scales_blocked", "global_scale", "scale_2"):
        assert np.array_equal(getattr(q, field), getattr(stacked, field)), field
    assert len(set(q.global_scale.tolist())) == 4
    with pytest.raises(ValueError, match=r"expert 2 is \(24, 48\), expert 0's \(24, 64\)"):
        quantize_experts(experts[:2] + [experts[2][:, :48]])
    with pytest.raises(ValueError, match="no experts to quantize"):
        quantize_experts([])
    bad = [experts[0], experts[1], np.full((24, 64), np.inf, np.float32), experts[3]]
    with pytest.raises(ValueError, match="expert 2: the tensor holds inf or NaN"):
        quantize_experts(bad)
    with pytest.raises(TypeError, match="expert 1: expected float16, bfloat16"):
        quantize_experts([experts[0], experts[1].astype(np.int32)])


class CountingExperts:
    """Experts handed out one at a time, counting how many are out (being quantized)
    at once: what ``workers`` bounds."""

    def __init__(self, arrays):
        self.arrays, self.out, self.most = arrays, 0, 0
        self.lock = threading.Lock()

    def __len__(self):
        return len(self.arrays)

    def __getitem__(self, e):
        with self.lock:
            self.out += 1
            self.most = max(self.most, self.out)
        time.sleep(0.05)  # long enough for the other threads to ask for theirs
        with self.lock:
            self.out -= 1
        return self.arrays[e]


@pytest.mark.parametrize("workers", [1, 3])
def test_on_expert_counts_every_expert_once(workers):
    rng = np.random.default_rng(13)
    arrays = [rng.standard_normal((16, 32)).astype(np.float32) for _ in range(7)]
    calls = []
    quantize_experts(arrays, workers=workers, on_expert=lambda *call: calls.append(call))
    assert calls == [(done, 7) for done in range(1, 8)]


def test_workers_quantize_experts_side_by_side_with_the_same_bytes():
    rng = np.random.default_rng(7)
    arrays = [rng.standard_normal((32, 64)).astype(np.float32) * (e + 1) for e in range(9)]
    one = quantize_experts(arrays, workers=1)
    for workers in (1, 3):
        experts = CountingExperts(arrays)
        q = quantize_experts(experts, workers=workers)
        assert experts.most == workers  # never more experts out than threads
        for field in ("packed", "scales", "scales_blocked", "global_scale", "scale_2"):
            assert np.array_equal(getattr(q, field), getattr(one, field)), (workers, field)
    bad = arrays[:5] + [arrays[5][:, :48]] + arrays[6:7] + [arrays[7][:16]] + arrays[8:]
    with pytest.raises(ValueError, match=r"expert 5 is \(32, 48\), expert 0's \(32, 64\)"):
        quantize_experts(bad, workers=3)  # the first bad expert is named, not the last


@pytest.mark.parametrize("source", ["safetensors", "npy"])
def test_a_layer_quantizes_in_the_memory_of_one_expert(tmp_path, source):
    """A fused gate + up layer read from a .safetensors file, or a (E, n, k) .npy: the
    peak of what numpy allocates is the output and one expert's work, well under the
    layer's own bytes (the whole layer as float32 is twice its BF16 bytes; before
    experts were read and converted one at a time the peak was about five times them).
    One worker: each further one holds one more expert's work."""
    rng = np.random.default_rng(6)
    experts, n, k = 64, 128, 512
    gate, up = ([float_to_bf16_bits(rng.standard_normal((n, k))) for _ in range(experts)]
                for _ in range(2))  # fmt: skip
    if source == "npy":
        path, names = tmp_path / "layer.npy", ()
        np.save(path, np.concatenate([np.stack(gate), np.stack(up)], axis=1))
    else:
        path, names = tmp_path / "layer.safetensors", ("e.{e}.g", "e.{e}.u")
        write_safetensors(path, {f"e.{e}.{p}": ("BF16", w[e]) for e in range(experts)
                                 for p, w in (("g", gate), ("u", up))})  # fmt: skip
    del gate, up
    layer_bytes = experts * 2 * n * k * 2
    tracemalloc.start()
    try:
        described = save_weight(path, tmp_path / "out", tensors=names, workers=1)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (described["experts"], described["n"], described["k"]) == (experts, 2 * n, k)
    assert peak < 0.75 * layer_bytes, (peak, layer_bytes)


def test_fp8_weights_take_f32_or_bf16_block_scales(tmp_path):
    """An FP8 weight's ``_scale_inv`` in BF16 reads as the same float32 values in F32;
    a 3-D FP8 tensor and F16 scales are refused, naming them."""
    rng = np.random.default_rng(8)
    codes = rng.integers(0, 0x7E, (3, 130, 64), dtype=np.uint8)
    scale32 = bf16_bits_to_float(float_to_bf16_bits(rng.random((2, 1)) + 0.5))  # BF16-exact
    tensors = {"w": ("F8_E4M3", codes[0]), "w_scale_inv": ("F32", scale32),
               "v": ("F8_E4M3", codes[0]), "v_scale_inv": ("BF16", float_to_bf16_bits(scale32)),
               "u": ("F8_E4M3", codes[0]), "u_scale_inv": ("F16", scale32.astype(np.float16)),
               "stack": ("F8_E4M3", codes)}  # fmt: skip
    write_safetensors(tmp_path / "m.safetensors", tensors)
    w, dtype, _ = read_safetensors_weight(tmp_path / "m.safetensors", ("w",))
    v, _, _ = read_safetensors_weight(tmp_path / "m.safetensors", ("v",))
    assert dtype == "F8_E4M3" and w.dtype == np.uint16 and np.array_equal(w, v)
    with pytest.raises(ValueError, match="block scales 'u_scale_inv' are F16, not F32 or BF16"):
        read_safetensors_weight(tmp_path / "m.safetensors", ("u",))
    with pytest.raises(ValueError, match="'stack' is a 3-D F8_E4M3 tensor"):
        read_safetensors_weight(tmp_path / "m.safetensors", ("stack",))


def test_quantize_weight_bad_axes():
    with pytest.raises(ValueError, match="no experts axis"):
        quantize_weight(np.ones((4, 16), dtype=np.float32), experts_axis=0)
    with pytest.raises(ValueError, match="K is the last axis"):
        quantize_weight(np.ones((2, 4, 16), dtype=np.float32), experts_axis=2)
    with pytest.raises(ValueError, match="2-D .* or 3-D"):
        quantize_weight(np.ones((1, 2, 4, 16), dtype=np.float32))


def test_a_checkpoint_is_read_once_for_every_tensor_a_weight_needs(tmp_path, monkeypatch):
    """Fused FP8 gate + up experts of a sharded checkpoint (four patterns: codes and
    scales of each): its index is read once and each shard's header once."""
    from nvfp4_aot import safetensors_file
    from nvfp4_aot.fp8_blocks import blocks

    rng = np.random.default_rng(9)
    root = tmp_path / "ckpt"
    root.mkdir()
    weight_map = {}
    for shard, experts in (("a.safetensors", (0, 1)), ("b.safetensors", (2,))):
        tensors = {}
        for e in experts:
            for proj in ("gate", "up"):
                tensors[f"e.{e}.{proj}.weight"] = (
                    "F8_E4M3", rng.integers(0, 0x7E, (32, 128), dtype=np.uint8))  # fmt: skip
                tensors[f"e.{e}.{proj}.weight_scale_inv"] = (
                    "F32", np.full(blocks(32, 128), 0.01, np.float32))  # fmt: skip
        write_safetensors(root / shard, tensors)
        weight_map.update(dict.fromkeys(tensors, shard))
    (root / safetensors_file.INDEX_NAME).write_text(json.dumps({"weight_map": weight_map}))
    reads = []
    monkeypatch.setattr(safetensors_file, "header", _counting(safetensors_file.header, reads))
    read_index = safetensors_file.Checkpoint._read_index
    monkeypatch.setattr(
        safetensors_file.Checkpoint, "_read_index", staticmethod(_counting(read_index, reads))
    )
    weight, dtype, _ = read_safetensors_weight(root, ("e.{e}.gate.weight", "e.{e}.up.weight"))
    assert dtype == "F8_E4M3" and (len(weight), *weight[0].shape) == (3, 64, 128)
    assert sorted(Path(path).name for path in reads) == [
        "a.safetensors", "b.safetensors", "model.safetensors.index.json"]  # fmt: skip


def _counting(function, calls: list):
    def counted(path, *args):
        calls.append(path)
        return function(path, *args)

    return counted


@pytest.mark.parametrize("experts", [None, 3])
def test_load_weight_returns_what_save_weight_wrote(tmp_path, experts):
    rng = np.random.default_rng(11)
    shape = (40, 64) if experts is None else (experts, 40, 64)
    np.save(tmp_path / "w.npy", rng.standard_normal(shape).astype(np.float32))
    save_weight(tmp_path / "w.npy", tmp_path / "out")
    loaded = load_weight(tmp_path / "out")
    direct = quantize_weight(np.load(tmp_path / "w.npy"))
    assert (loaded.experts, loaded.n, loaded.k) == (experts, 40, 64)
    for field in ("packed", "scales", "scales_blocked", "global_scale", "scale_2"):
        assert np.array_equal(getattr(loaded, field), getattr(direct, field)), field


def test_load_weight_refuses_files_that_do_not_match_their_description(tmp_path):
    rng = np.random.default_rng(12)
    for name, shape in (("a", (2, 40, 64)), ("b", (2, 48, 64))):
        np.save(tmp_path / f"{name}.npy", rng.standard_normal(shape).astype(np.float32))
        save_weight(tmp_path / f"{name}.npy", tmp_path / name)
    out = tmp_path / "a"
    (out / "B.npy").write_bytes((tmp_path / "b" / "B.npy").read_bytes())  # another run's
    with pytest.raises(ValueError, match=r"B.npy: shape \(2, 48, 32\), the description's weight"):
        load_weight(out)
    save_weight(tmp_path / "a.npy", out)
    np.save(out / "scale_2.npy", np.load(out / "scale_2.npy") * 2)
    with pytest.raises(ValueError, match="scale_2.npy is not 1 / global_scale.npy"):
        load_weight(out)
    np.save(out / "scale_2.npy", np.load(out / "scale_2.npy").astype(np.float64))
    with pytest.raises(
        ValueError, match="scale_2.npy: dtype float64, the description says float32"
    ):
        load_weight(out)
    (out / "scale_2.npy").unlink()
    with pytest.raises(ValueError, match="cannot read .*scale_2.npy"):
        load_weight(out)
    (out / "quantize.json").write_text('{"format": "something else"}')
    with pytest.raises(ValueError, match="is not a 'nvfp4-aot quantized weight' description"):
        load_weight(out)
    (out / "quantize.json").write_text('{"format": "nvfp4-aot quantized weight", "n": 40}')
    with pytest.raises(ValueError, match="missing or malformed field 'experts'"):
        load_weight(out)
    save_weight(tmp_path / "a.npy", out)
    document = json.loads((out / "quantize.json").read_text())
    (out / "quantize.json").write_text(json.dumps({**document, "k": 40}))
    with pytest.raises(ValueError, match="experts 2, n 40, k 40 describe no weight"):
        load_weight(out)
