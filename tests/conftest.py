"""Shared fixtures: a clean GGML_OPENVINO_* environment for every test, a compiled-model cache,
the walkthrough notebooks run once in JupyterLab; bytecode kept for the interpreters the suite
starts."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

#: Where bytecode goes when PYTHONDONTWRITEBYTECODE is set (nothing is written beside the sources).
PYCACHE = Path.home() / ".cache" / "ovkit" / "pycache"


def pytest_configure(config: pytest.Config) -> None:
    """Keep bytecode under PYCACHE instead of not at all: the suite starts hundreds of interpreters
    (CLI runs, llama.cpp children, kernels, workers) that would each compile ovkit from source
    again (measured: a quarter of the wall time of the CLI tests)."""
    if os.environ.pop("PYTHONDONTWRITEBYTECODE", None):
        os.environ.setdefault("PYTHONPYCACHEPREFIX", str(PYCACHE))
        sys.pycache_prefix = os.environ["PYTHONPYCACHEPREFIX"]
        sys.dont_write_bytecode = False


@pytest.hookimpl(tryfirst=True)  # before -m selects
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that reads a notebook run drives JupyterLab in Chromium: ``-m "not browser"``
    leaves it out with the browser tests."""
    for item in items:
        if "notebook_runs" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.browser)


@pytest.fixture(scope="session")
def notebook_runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Each walkthrough notebook run once per install in JupyterLab and saved (``notebook_runs``)."""
    from notebook_runs import NotebookRuns

    runs = NotebookRuns(tmp_path_factory)
    try:
        yield runs
    finally:
        runs.close()


def _reload_engines() -> None:
    """Engines read the environment when made: the process-wide ones read it again (none exist
    before ``ovkit.engine`` is imported)."""
    engine = sys.modules.get("ovkit.engine")
    if engine is not None:
        engine.reload_engines()


@pytest.fixture(autouse=True)
def _clean_ggml_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    removed = [name for name in os.environ if name.startswith("GGML_OPENVINO_")]
    for name in removed:
        monkeypatch.delenv(name)
    if removed:
        _reload_engines()
    before = dict(os.environ)
    yield
    changed = dict(os.environ) != before
    monkeypatch.undo()  # the test's own changes too, before the engines read the environment
    if changed:
        _reload_engines()


@pytest.fixture()
def blobs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh GGML_OPENVINO_COMPILED_MODEL_CACHE_DIR (not made yet) for this test."""
    directory = tmp_path / "blobs"
    monkeypatch.setenv("GGML_OPENVINO_COMPILED_MODEL_CACHE_DIR", str(directory))
    _reload_engines()
    return directory
