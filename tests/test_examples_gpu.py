"""The examples/ scripts, each run as a user would: a fresh Python process from the repo root.

Each example seeds its data, poisons C, checks every group against the float64 reference
and exits non-zero on a mismatch, so a zero exit status is the test. Skipped where there
is no GPU, no driver or no baked kernel for the GPU (conftest.py's ``device`` fixture; a
failure instead under NVFP4_AOT_REQUIRE_GPU=1), or where the example's array library
cannot be imported or sees no GPU.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("device")]

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
TIMEOUT_S = 600

# what each library needs to count as usable, checked in a child process
_PROBES = {
    "cupy": "import cupy; assert cupy.cuda.runtime.getDeviceCount() > 0",
    "jax": "import jax; assert jax.devices('gpu')",
    "torch": "import torch; assert torch.cuda.is_available()",
}


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # JAX next to CuPy / the runtime
    return env


@functools.cache
def _unusable(library: str) -> str | None:
    """Why ``library`` cannot run the examples here, or None."""
    result = subprocess.run(
        [sys.executable, "-c", _PROBES[library]],
        capture_output=True, text=True, env=_env(), cwd=REPO, timeout=TIMEOUT_S,
    )  # fmt: skip
    if result.returncode == 0:
        return None
    lines = result.stderr.strip().splitlines()
    return f"{library} is not usable here: {lines[-1] if lines else result.returncode}"


def run_example(name: str, *args: str, needs: tuple[str, ...] = ()) -> str:
    for library in needs:
        reason = _unusable(library)
        if reason:
            pytest.skip(reason)
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / name), "--device", "0", *args],
        capture_output=True, text=True, env=_env(), cwd=REPO, timeout=TIMEOUT_S,
    )  # fmt: skip
    print(result.stdout)  # the example's summary, shown with pytest -s or on failure
    assert result.returncode == 0, (
        f"{name} {' '.join(args)} exited {result.returncode}\n"
        f"stdout:\n{result.stdout}\nstderr:\n{result.stderr[-4000:]}"
    )
    assert "MISMATCH" not in result.stdout
    return result.stdout


@pytest.mark.parametrize("seed", ["0", "1"])
def test_raw_pointers(seed):
    out = run_example("raw_pointers.py", "--seed", seed)
    assert "5/5 groups match" in out
    assert "MoE contiguous: 1/1 routings match" in out


def test_cupy_pipeline():
    out = run_example("cupy_pipeline.py", "--seed", "2", needs=("cupy",))
    assert "5/5 groups match" in out
    assert "MoE contiguous: 2/2 routings match" in out


def test_jax_pipeline():
    out = run_example("jax_pipeline.py", "--seed", "3", needs=("jax", "cupy"))
    assert "5/5 groups match" in out
    assert "output zero-copy: True" in out


@pytest.mark.parametrize(
    "args,runs",
    [
        (("--top-k", "2", "--graph", "--compile"), 5),
        (("--top-k", "8", "--tokens", "256", "--experts", "128", "--hidden", "512",
          "--ffn", "256", "--graph"), 4),
        (("--top-k", "1", "--tokens", "300", "--experts", "130", "--hidden", "512"), 1),
    ],
    ids=["top2-16-experts-graph-compile", "top8-128-experts-graph", "top1-130-experts"],
)  # fmt: skip
def test_torch_moe(args, runs):
    """Router -> permute -> one moe_gemm per projection: eager under sync debug mode
    "error", CUDA graph replays with new routings, torch.compile(fullgraph=True)."""
    out = run_example("torch_moe.py", "--seed", "4", *args, needs=("torch",))
    assert f"{runs}/{runs} runs match the float64 reference" in out
    assert "eager, no host sync" in out
