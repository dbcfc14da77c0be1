"""Alpha and BF16 output on the CPU: the baked epilogues, their selection, the alpha
tables of both plan kinds, the checks on alpha and C, and the BF16 rounding the
references use. The GPU checks the numbers (test_runtime_gpu.py, test_moe_gpu.py)."""

from __future__ import annotations

import json
import shutil
import struct
from dataclasses import asdict

import numpy as np
import pytest

from nvfp4_aot import loader, plan
from nvfp4_aot.errors import InvalidProblemError, UnsupportedDeviceError
from nvfp4_aot.kernels import FAMILIES
from nvfp4_aot.layouts import bf16_bits_to_float, decode_output, encode_output, float_to_bf16_bits
from nvfp4_aot.manifest import (
    EPILOGUES,
    GEMM_ROLES,
    MANIFEST_NAME,
    ORIGINAL_EPILOGUE,
    ROLE_GEMM,
    ROLE_ROUTING,
    Epilogue,
    input_kinds,
)
from nvfp4_aot.moe import MoeGemmPlan
from nvfp4_aot.moe_layout import C_ALPHA, C_WORDS, P_HEADER_WORDS, R_ALPHA
from nvfp4_aot.operands import check_alpha, device_array, out_dtype_name
from support import FakeArray, installed_h200, operands_for, write_synthetic

BF16_ALPHA = Epilogue("bfloat16", True)


@pytest.fixture(scope="module")
def epilogue_artifacts(tmp_path_factory):
    """sm_90a at G = 8 and 120 with every epilogue, and the committed routing kernel."""
    directory = tmp_path_factory.mktemp("epilogues")
    write_synthetic(
        directory, [("sm_90a", g, {"epilogue": e}) for g in (8, 120) for e in EPILOGUES]
    )
    add_routing_variant(directory)
    return directory


@pytest.fixture
def fake(epilogue_artifacts):
    with installed_h200(epilogue_artifacts) as f:
        yield f


# ---------------------------------------------------------------------------------------
# the committed artifacts


def test_every_gemm_is_baked_with_every_epilogue():
    manifest = loader.load_manifest()
    gemms = [f for f in FAMILIES if f.role in GEMM_ROLES]
    for family in gemms:
        variants = [v for v in manifest.variants if v.family == family.name]
        combos = {(v.arch, v.num_groups) for v in variants}
        assert {(v.arch, v.num_groups, v.epilogue) for v in variants} == {
            (arch, g, e) for arch, g in combos for e in EPILOGUES
        }
    for v in manifest.variants:
        alpha_slots = v.slots_for("alpha_pointers")
        # a routed GEMM's alpha is a run word, not an input
        assert len(alpha_slots) == (1 if v.alpha and v.role == ROLE_GEMM else 0), v.name
        assert list(v.input_kinds) == list(input_kinds(v.role, v.alpha))
        # the original epilogue keeps the original names and cubin files
        assert v.name.endswith(f".g{v.num_groups}") == (v.epilogue == ORIGINAL_EPILOGUE), v.name


def test_epilogue_names_and_checks():
    assert [e.suffix for e in EPILOGUES] == ["", ".alpha", ".bf16", ".bf16.alpha"]
    assert str(BF16_ALPHA) == "bfloat16 x alpha"
    with pytest.raises(ValueError, match="out_dtype must be one of"):
        Epilogue("float32")
    assert list(input_kinds(ROLE_GEMM, True))[-1] == "alpha_pointers"
    assert "alpha_pointers" not in input_kinds(ROLE_GEMM)


def test_variants_for_picks_the_epilogue(epilogue_artifacts):
    manifest = loader.load_manifest(epilogue_artifacts)
    found = loader.variants_for(manifest, (9, 0), epilogue=BF16_ALPHA)
    assert [v.name for v in found] == [
        "sm90_nvfp4_grouped_gemm.sm_90a.g8.bf16.alpha",
        "sm90_nvfp4_grouped_gemm.sm_90a.g120.bf16.alpha",
    ]
    assert len(loader.variants_for(manifest, (9, 0), epilogue=None)) == 8
    assert all(v.epilogue == ORIGINAL_EPILOGUE for v in loader.variants_for(manifest, (9, 0)))


def test_missing_epilogue_is_a_clear_error(tmp_path):
    write_synthetic(tmp_path, [("sm_90a", 8)])
    manifest = loader.load_manifest(tmp_path)
    with pytest.raises(UnsupportedDeviceError, match="writes bfloat16 x alpha; the artifacts hold"):
        loader.variants_for(manifest, (9, 0), epilogue=BF16_ALPHA)


# ---------------------------------------------------------------------------------------
# per-group plans


def alpha_array(count: int, pointer: int = 0x77_0000_0000) -> FakeArray:
    return FakeArray(pointer, (count,), "<f4")


def test_alpha_table_points_at_each_groups_value(fake, epilogue_artifacts):
    """Empty groups take no place in a launch; each launched group's alpha pointer is
    the array's address plus 4 x its own group index."""
    sizes = [(96, 128, 128), (0, 256, 256), (72, 384, 256)]
    with plan.GroupedGemmPlan(
        sizes, artifacts=epilogue_artifacts, out_dtype="bfloat16", alpha=True
    ) as p:
        assert [v.name for v in p.variants] == ["sm90_nvfp4_grouped_gemm.sm_90a.g8.bf16.alpha"]
        columns = operands_for([(m or 1, n, k) for m, n, k in sizes])
        bf16_c = [FakeArray(c.__cuda_array_interface__["data"][0], (m or 1, n), "<f2")
                  for c, (m, n, _k) in zip(columns[2], sizes)]  # fmt: skip
        columns[2] = [device_array_bf16(c) for c in bf16_c]
        alpha = alpha_array(3)
        p.run(*columns, stream=5, alpha=alpha)
        inputs = p.kernel_inputs(0)[0]
        (launched,) = fake.launches
        variant = p.variants[0]
        ((at, _size),) = variant.slots_for("alpha_pointers")
        flat = bytearray(variant.param_bytes)
        for q, data in zip(variant.params, launched.params):
            flat[q.offset : q.offset + q.size] = data
        assert struct.unpack_from("<Q", flat, at)[0] == inputs["alpha_pointers"]
        dst, data, _stream = fake.copies[-1]
        table = np.frombuffer(data, np.uint64)
        start = (inputs["alpha_pointers"] - dst) // 8
        base = alpha.__cuda_array_interface__["data"][0]
        assert table[start : start + 8].tolist() == [base, base + 8] + [0] * 6


def device_array_bf16(fake_f2: FakeArray):
    """A bfloat16 operand through DLPack's kDLBfloat (no typestr exists for it)."""
    from support import DLPackArray

    interface = fake_f2.__cuda_array_interface__
    return DLPackArray(interface["data"][0], interface["shape"], (4, 16, 1))


@pytest.mark.parametrize(
    "alpha, plan_alpha, message",
    [(None, True, r"alpha is missing: the plan was made with alpha=True"),
     (0x1000, False, r"alpha was given but the plan was made without it"),
     (0x1002, True, r"alpha must be a 4-byte aligned device address, got 0x1002"),
     (alpha_array(1), True, r"alpha must hold at least 2 float32 values \(one per group\), got 1"),
     (FakeArray(0x1000, (2,), "<f2"), True, r"alpha must have dtype float32, got f2")],
)  # fmt: skip
def test_bad_alpha_is_refused_before_any_launch(
    fake, epilogue_artifacts, alpha, plan_alpha, message
):
    sizes = [(96, 128, 128), (72, 384, 256)]
    with plan.GroupedGemmPlan(sizes, artifacts=epilogue_artifacts, alpha=plan_alpha) as p:
        with pytest.raises(InvalidProblemError, match=message):
            p.run(*operands_for(sizes), alpha=alpha)
    assert not fake.launches


def test_alpha_overlapping_c_is_refused(fake, epilogue_artifacts):
    sizes = [(96, 128, 128), (72, 384, 256)]
    columns = operands_for(sizes)
    c1 = columns[2][1].__cuda_array_interface__["data"][0]
    with plan.GroupedGemmPlan(sizes, artifacts=epilogue_artifacts, alpha=True) as p:
        with pytest.raises(InvalidProblemError, match="group 1: c overlaps alpha"):
            p.run(*columns, alpha=c1 + 64)
    assert not fake.launches


def test_c_must_have_the_plans_dtype(fake, epilogue_artifacts):
    sizes = [(96, 128, 128)]
    with plan.GroupedGemmPlan(sizes, artifacts=epilogue_artifacts, out_dtype="bfloat16") as p:
        with pytest.raises(InvalidProblemError, match="group 0: c must have dtype bf16, got f2"):
            p.run(*operands_for(sizes))
    with pytest.raises(ValueError, match="out_dtype must be float16 or bfloat16"):
        plan.GroupedGemmPlan(sizes, artifacts=epilogue_artifacts, out_dtype="float32")
    assert not fake.launches


def test_grouped_gemm_picks_the_epilogue_from_c_and_alpha(fake, epilogue_artifacts, monkeypatch):
    monkeypatch.setenv("NVFP4_AOT_ARTIFACTS", str(epilogue_artifacts))
    plan.clear_plan_cache()
    sizes = [(96, 128, 128), (72, 384, 256)]
    a, b, c, sfa, sfb = operands_for(sizes)
    c = [device_array_bf16(x) for x in c]
    plan.grouped_gemm(a, b, c, sfa, sfb, alpha=alpha_array(2))
    (cached,) = plan._plans.values()
    assert [v.epilogue for v in cached.variants] == [BF16_ALPHA]
    plan.clear_plan_cache()


# ---------------------------------------------------------------------------------------
# MoE plans


def test_moe_plan_words_carry_the_alpha_table(fake, epilogue_artifacts):
    """Each chunk's record names its alpha table (the GEMM launch's alpha_pointers); the
    run words end with the alpha array's address."""
    with MoeGemmPlan(130, 256, 512, capacity=64, artifacts=epilogue_artifacts, alpha=True) as p:
        layout, base = p.layout, p._launcher._resources.device_ptr
        chunks = layout.chunks
        assert len(chunks) == 2 and all(c.alpha_offset is not None for c in chunks)
        assert layout.run_fields[-1] == "alpha"
        plan_words = layout.kernel_inputs(layout.routing, base, 0)["plan"]
        size = 8 * (P_HEADER_WORDS + C_WORDS * len(chunks))
        words = np.frombuffer(fake.read(plan_words, size), np.int64)
        for i, chunk in enumerate(chunks):
            inputs = layout.kernel_inputs(chunk, base, 0)
            assert words[P_HEADER_WORDS + C_WORDS * i + C_ALPHA] == inputs["alpha_pointers"]
        table = layout.run_table(list(range(1, 8)))
        assert struct.unpack_from("<Q", table, 8 * R_ALPHA)[0] == 7
        with pytest.raises(InvalidProblemError, match="alpha is missing"):
            p.run(*[0x1000 * (i + 1) for i in range(6)])
    with MoeGemmPlan(8, 256, 512, capacity=64, artifacts=epilogue_artifacts) as p:
        assert all(c.alpha_offset is None for c in p.layout.chunks)
        assert "alpha" not in p.layout.run_fields


def add_routing_variant(directory) -> None:
    """The committed sm_90a routing kernel (manifest entry and cubin) into ``directory``."""
    committed = loader.load_manifest()
    routing = next(v for v in committed.variants if v.role == ROLE_ROUTING and v.arch == "sm_90a")
    raw = json.loads((directory / MANIFEST_NAME).read_text())
    raw["variants"].append(asdict(routing))
    (directory / MANIFEST_NAME).write_text(json.dumps(raw))
    shutil.copy(loader.resolve_dir() / routing.cubin, directory / routing.cubin)


# ---------------------------------------------------------------------------------------
# ---------------------------------------------------------------------------------------
# dtypes


def test_out_dtype_names():
    class TorchLike:
        def __str__(self):
            return "torch.bfloat16"

    assert out_dtype_name("float16") == "float16"
    assert out_dtype_name(np.dtype(np.float16)) == "float16"
    assert out_dtype_name(TorchLike()) == "bfloat16"
    with pytest.raises(ValueError, match="out_dtype must be float16 or bfloat16"):
        out_dtype_name("float32")


def test_check_alpha():
    assert check_alpha(device_array(alpha_array(4)), 4) is None
    assert "at least 5" in check_alpha(device_array(alpha_array(4)), 5)


def test_bf16_rounding_is_nearest_even():
    values = np.array(
        [1.0, 1 + 2**-8, 1 + 3 * 2**-8, -3.5, 3.4e38, -np.inf, 2**-133, np.nan], np.float32
    )
    bits = float_to_bf16_bits(values)
    assert [hex(b) for b in bits] == [
        "0x3f80", "0x3f80", "0x3f82", "0xc060", "0x7f80", "0xff80", "0x1", "0x7fc0"
    ]  # fmt: skip
    back = bf16_bits_to_float(bits)
    assert back[2] == 1 + 2**-6 and np.isnan(back[-1])
    stored = encode_output(values[:4], "bfloat16")
    assert decode_output(stored, "bfloat16").tolist() == [1.0, 1.0, 1.015625, -3.5]
    assert decode_output(encode_output([70000.0], "float16"), "float16")[0] == np.inf


def test_run_stacked_takes_alpha(fake, epilogue_artifacts):
    """The stacked API checks and appends alpha as the per-group one does."""
    sizes = [(96, 128, 128), (0, 256, 256), (72, 384, 256)]
    with plan.GroupedGemmPlan(sizes, artifacts=epilogue_artifacts, alpha=True) as p:
        bases = [0x10_0000_0000 + (f << 32) for f in range(5)]
        with pytest.raises(InvalidProblemError, match=r"alpha is missing"):
            p.run_stacked(*bases)
        with pytest.raises(InvalidProblemError, match=r"alpha must have dtype float32"):
            p.run_stacked(*bases, alpha=FakeArray(0x77_0000_0000, (3,), "<f2"))
        assert not fake.launches
        p.run_stacked(*bases, alpha=alpha_array(3))
        inputs = p.kernel_inputs(0)[0]
        dst, data, _stream = fake.copies[-1]
        table = np.frombuffer(data, np.uint64)
        start = (inputs["alpha_pointers"] - dst) // 8
        assert table[start] == 0x77_0000_0000
