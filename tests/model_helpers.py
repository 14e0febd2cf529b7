"""What the model tests share: the real models (fetched, or a failure that says how to fetch
them), a model started in a fresh process, and the compiled-model cache's entries and warnings."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Collection
from pathlib import Path
from typing import Any

import pytest


def real_model(name: str) -> Path:
    """A fetched real model (``ovkit.model.fetch``), or a failure naming the command that fetches
    it: a missing model never passes silently and is never a skip."""
    from ovkit.model.fetch import MissingModelError
    from ovkit.model.fetch import real_model as fetched

    try:
        return fetched(name)
    except MissingModelError as exc:
        missing = str(exc)
    pytest.fail(missing, pytrace=False)


def fresh_start(script: str, path: Path, cache_dir: Path | None) -> tuple[dict[str, Any], str]:
    """``script`` run on ``path`` in a new interpreter with ``cache_dir`` as
    GGML_OPENVINO_COMPILED_MODEL_CACHE_DIR (a first or second start; None: no cache): the JSON of
    its last line of output, and its log."""
    env = dict(os.environ)
    if cache_dir is not None:
        env["GGML_OPENVINO_COMPILED_MODEL_CACHE_DIR"] = str(cache_dir)
    proc = subprocess.run(
        [sys.executable, "-c", script, str(path)], env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.splitlines()[-1]), proc.stderr


def cache_entry(blobs: Path, before: Collection[Path] = ()) -> Path:
    """The one blob of the compiled-model cache written besides ``before``."""
    (blob,) = set(blobs.glob("*.blob")) - set(before)
    return blob


def cache_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The compiled-model cache's warnings logged so far."""
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.WARNING and "model cache" in r.getMessage()
    ]
