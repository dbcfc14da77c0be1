"""Import hygiene: the runtime imports no CuTe DSL and no torch, and the launch path
no numpy (each run in a fresh interpreter with those imports blocked)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from support import (
    REPO,
)


def assert_script_prints_ok(script: str) -> None:
    """Run ``script`` in a fresh interpreter (the repo on its path); it must print ok."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=REPO
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_runtime_needs_no_dsl_and_no_torch(artifacts):
    """Import and build/run a plan with cutlass and torch made unimportable."""
    script = textwrap.dedent(
        f"""
        import sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("cutlass", "torch", "cupy", "jax"):
                    raise ImportError(f"{{name}} is blocked in this test")
        sys.meta_path.insert(0, Block())
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        import nvfp4_aot
        assert "cuda.bindings.driver" not in sys.modules, "import nvfp4_aot loaded the driver"
        from nvfp4_aot import driver
        from fake_driver import FakeDriver
        from support import kernel_params_of, operands_for
        manifest = nvfp4_aot.load_manifest({str(artifacts)!r})
        fake = FakeDriver(capability=(9, 0), kernel_params=kernel_params_of(manifest))
        driver.use_backend(fake)
        with nvfp4_aot.GroupedGemmPlan([(128, 256, 512)], artifacts={str(artifacts)!r}) as plan:
            plan.run(*operands_for([(128, 256, 512)]))
        assert len(fake.launches) == 1
        bad = [m for m in sys.modules if m.split(".")[0] in ("cutlass", "torch")]
        assert not bad, bad
        print("ok")
        """
    )
    assert_script_prints_ok(script)


def test_launch_path_imports_no_numpy(artifacts):
    """Plan creation and runs (direct calls, raw pointers) with numpy made unimportable:
    the cold start and the steady state pay no numpy import."""
    script = textwrap.dedent(
        f"""
        import sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("numpy", "cutlass", "torch"):
                    raise ImportError(f"{{name}} is blocked in this test")
        sys.meta_path.insert(0, Block())
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        import nvfp4_aot
        from nvfp4_aot import driver
        from fake_driver import DirectFakeDriver
        manifest = nvfp4_aot.load_manifest({str(artifacts)!r})
        params = {{(v.sha256, v.kernel_symbol): [(p.offset, p.size) for p in v.params]
                   for v in manifest.variants}}
        fake = DirectFakeDriver(capability=(9, 0), kernel_params=params)
        driver.use_backend(fake)
        sizes = [(128, 256, 512)] * 3
        with nvfp4_aot.GroupedGemmPlan(sizes, artifacts={str(artifacts)!r}) as plan:
            for i in range(4):
                ops = [[(i + 1 << 40) + (f << 32) + (g << 24) for g in range(3)]
                       for f in range(5)]
                plan.run(*ops, stream=7)
        assert fake.entry_calls.count("cuLaunchKernelEx") == 4
        print("ok")
        """
    )
    assert_script_prints_ok(script)
