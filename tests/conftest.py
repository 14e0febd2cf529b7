"""Shared fixtures: a clean GGML_OPENVINO_* environment for every test."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(autouse=True)
def _clean_ggml_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("GGML_OPENVINO_"):
            monkeypatch.delenv(name)
