"""nvfp4-aot: the wheel ships the runtime and the baked kernels (artifacts/)."""

import importlib.util
import shutil
from pathlib import Path

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


def _cubin_pack():
    """nvfp4_aot/cubin_pack.py, loaded by path (standard library only): the package's
    __init__ imports the runtime's dependencies, which a build environment may lack."""
    spec = importlib.util.spec_from_file_location("cubin_pack", HERE / "nvfp4_aot/cubin_pack.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class BuildWithArtifacts(build_py):
    """Copy the committed artifacts/ into the package: the manifest as it is, the cubins
    as one xz-compressed tar per kernel family (nvfp4_aot/cubin_pack.py; the loader reads
    either form): about a fifth of one xz file per cubin, which keeps the wheel small."""

    def run(self):
        super().run()
        source = HERE / "artifacts"
        if not (source / "manifest.json").exists():
            raise SystemExit(
                "artifacts/manifest.json is missing; run python build_kernels.py first"
            )
        target = Path(self.build_lib) / "nvfp4_aot" / "artifacts"
        shutil.rmtree(target, ignore_errors=True)  # nothing left from an earlier build
        target.mkdir(parents=True)
        _cubin_pack().write_packs(source, target)
        shutil.copyfile(source / "manifest.json", target / "manifest.json")


def version() -> str:
    for line in (HERE / "nvfp4_aot" / "__init__.py").read_text().splitlines():
        if line.startswith("__version__"):
            return line.split('"')[1]
    raise RuntimeError("no __version__ in nvfp4_aot/__init__.py")


setup(
    name="nvfp4-aot",
    version=version(),
    description="Ahead-of-time compiled NVFP4 block-scaled grouped GEMM kernels (CuTe DSL) "
    "with a small cuda-python runtime",
    long_description=(HERE / "README.md").read_text(),
    long_description_content_type="text/markdown",
    python_requires=">=3.11",
    packages=find_packages(include=["nvfp4_aot", "nvfp4_aot.*"]),
    package_data={"nvfp4_aot.bake": ["recorder.c"]},
    install_requires=["cuda-python>=12.8", "numpy>=1.26", "click>=8.1"],
    extras_require={
        # Pinned: the committed artifacts were baked by exactly this version.
        "build": ["nvidia-cutlass-dsl==4.8.1"],
        "test": ["pytest>=8", "ruff==0.17.6"],  # ruff pinned: CI checks the formatting
        "jax": ["jax>=0.5"],  # nvfp4_aot.jax (plus JAX's CUDA plugin on a GPU machine)
    },
    entry_points={"console_scripts": ["nvfp4-aot=nvfp4_aot.cli:main"]},
    cmdclass={"build_py": BuildWithArtifacts},
)
