"""What the model tests share: the real models, fetched or a failure that says how to fetch them."""

from __future__ import annotations

from pathlib import Path

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
