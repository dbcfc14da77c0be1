"""Where the artifacts are found (nvfp4_aot.paths)."""

from __future__ import annotations

import pytest

from nvfp4_aot.errors import ArtifactError


def test_artifacts_dir_env(tmp_path, monkeypatch, artifacts):
    from nvfp4_aot import paths

    monkeypatch.setenv("NVFP4_AOT_ARTIFACTS", str(artifacts))
    assert paths.artifacts_dir() == artifacts
    monkeypatch.setenv("NVFP4_AOT_ARTIFACTS", str(tmp_path / "none"))
    with pytest.raises(ArtifactError, match=r"no manifest.json found .*NVFP4_AOT_ARTIFACTS"):
        paths.artifacts_dir()
