"""nvfp4-aot: the wheel ships the runtime and the baked kernels (artifacts/)."""

import lzma
import shutil
from pathlib import Path

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


class BuildWithArtifacts(build_py):
    """Copy the committed artifacts/ into the package: the manifest as it is, each cubin
    xz-compressed as ``<name>.cubin.xz`` (nvfp4_aot.loader reads either form). The wheel's
    deflate keeps about a quarter of a cubin, xz about a fifth: with 69 variants that is
    what keeps the wheel under 1 MB."""

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
        for path in sorted(source.glob("*.cubin")):
            packed = lzma.compress(path.read_bytes(), preset=9 | lzma.PRESET_EXTREME)
            (target / (path.name + ".xz")).write_bytes(packed)  # loader.PACKED_SUFFIX
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
