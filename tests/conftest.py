"""Shared fixtures: a clean GGML_OPENVINO_* environment for every test, a compiled-model cache."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _clean_ggml_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("GGML_OPENVINO_"):
            monkeypatch.delenv(name)


@pytest.fixture()
def blobs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh GGML_OPENVINO_COMPILED_MODEL_CACHE_DIR (not made yet) for this test."""
    directory = tmp_path / "blobs"
    monkeypatch.setenv("GGML_OPENVINO_COMPILED_MODEL_CACHE_DIR", str(directory))
    return directory
