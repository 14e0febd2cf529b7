"""Every walkthrough notebook, run top to bottom in JupyterLab in a real Chromium, twice: with
every optional part this machine has, and as after a plain install (no real backend, no
ggml-python, no llama.cpp, no fetched model), each with its default parameters.

Each notebook must run with no error output, no widget that failed to render ("Error displaying
widget") and no broken image, and its last cell must print its result.  The whole notebook is
saved as screenshots, one per screen, in ``test-artifacts/`` (git-ignored) for a person to look
at.  The runs come from ``notebook_runs`` (the ``notebook_runs`` fixture), which the kernel-side
tests of ``tests/test_notebooks*.py`` read as JupyterLab saved them.
"""

from __future__ import annotations

import pytest
from notebook_runs import INSTALLS, NOTEBOOKS, NotebookRuns

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.mark.parametrize("install", INSTALLS)
@pytest.mark.parametrize("name", [p.stem for p in NOTEBOOKS])
def test_notebook_runs_in_jupyterlab(notebook_runs: NotebookRuns, name: str, install: str) -> None:
    run = notebook_runs.run(name, install)
    assert run.errors == [], f"{name}: {run.errors}"
    assert run.broken == [], f"{name}: images that did not draw: {run.broken}"
    assert run.last_output.strip(), f"{name}: the last cell (its result) printed nothing"
    assert run.screens, "no screenshot saved"
