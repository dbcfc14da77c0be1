"""Where the baked artifacts (cubins + manifest.json) are found.

In order: the directory named by the environment variable ``NVFP4_AOT_ARTIFACTS``;
``nvfp4_aot/artifacts/`` inside the installed package (the wheel copies the repository's
``artifacts/`` there, each cubin xz-packed); the repository's ``artifacts/`` next to the package (a source
checkout). A directory counts only when it holds ``manifest.json``, which the build
writes last.
"""

from __future__ import annotations

import os
from pathlib import Path

from .errors import ArtifactError
from .manifest import MANIFEST_NAME

ENV_ARTIFACTS = "NVFP4_AOT_ARTIFACTS"

PACKAGE_DIR = Path(__file__).resolve().parent
PACKAGED_ARTIFACTS = PACKAGE_DIR / "artifacts"
REPO_ARTIFACTS = PACKAGE_DIR.parent / "artifacts"


def candidate_dirs() -> list[Path]:
    """Every place looked at, in order (the environment variable alone when set)."""
    override = os.environ.get(ENV_ARTIFACTS)
    if override:
        return [Path(override).expanduser()]
    return [PACKAGED_ARTIFACTS, REPO_ARTIFACTS]


def artifacts_dir() -> Path:
    """The first candidate directory that holds a manifest.

    Raises
    ------
    ArtifactError
        Naming every directory tried and how to fix it.
    """
    candidates = candidate_dirs()
    for directory in candidates:
        if (directory / MANIFEST_NAME).is_file():
            return directory
    tried = ", ".join(str(d) for d in candidates)
    raise ArtifactError(
        f"no {MANIFEST_NAME} found (looked in {tried}); bake the kernels with "
        f"`python build_kernels.py` or point {ENV_ARTIFACTS} at an artifacts directory"
    )
