"""Every walkthrough notebook, run top to bottom in JupyterLab in a real Chromium, twice: with
every optional part this machine has, and as after a plain install (``plain_env``: no real
backend, no ggml-python, no llama.cpp, no fetched model); 05 and 08 with smaller parameters
(``BROWSER_PARAMETERS``).

Each notebook must run with no error output, no widget that failed to render ("Error displaying
widget") and no broken image, and its last cell must print its result.  The whole notebook is
saved as screenshots, one per screen, in ``test-artifacts/`` (git-ignored) for a person to look
at.  The JupyterLab server and the browser come from ``browser_lab``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import papermill.iorw
import papermill.parameterize
import playwright.sync_api as playwright_sync
import pytest
from browser_lab import (
    ARTIFACTS,
    CHROMIUM,
    CHROMIUM_ARGS,
    PANEL,
    ROOT,
    jupyter_lab,
    open_and_run_all,
    page_errors,
    shutdown_kernels,
)
from test_notebooks_plain import plain_env

pytestmark = [pytest.mark.browser, pytest.mark.slow]

NOTEBOOKS = sorted(p.stem for p in (ROOT / "notebooks").glob("0*.ipynb"))
SCROLLER = f"{PANEL} .jp-WindowedPanel-outer"  # the notebook's scrolling element
MAX_SCREENS = 40
#: Smaller parameters for the two heaviest walkthroughs, injected as papermill does: the browser
#: checks how every kind of output draws, which fewer ops and one model show as well.  The
#: defaults run top to bottom (and their results are asserted) in tests/test_notebooks.py and
#: tests/test_notebooks_plain.py.
BROWSER_PARAMETERS: dict[str, dict[str, Any]] = {
    "05-op-coverage": {
        "ops": ["ADD", "MUL_MAT", "GET_ROWS"],
        "upstream_ops": ["ADD", "MUL_MAT"],
        "catalogue_ops": ["ADD", "SOFT_MAX"],
        "catalogue_rows_per_op": 1,
    },
    "08-real-models": {"models": "smollm2-135m", "n_predict": 4, "runtimes": "llama.cpp"},
}
#: Resolves once the browser has drawn two frames: the scrolled-to outputs are painted then.
PAINTED = "() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))"


def _serve(tmp_path_factory: pytest.TempPathFactory, kernel_env: dict[str, str] | None) -> Iterator[str]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium (apt-get install chromium)")
    root = tmp_path_factory.mktemp("lab-notebooks")
    for name in NOTEBOOKS:
        nb = papermill.iorw.load_notebook_node(str(ROOT / "notebooks" / f"{name}.ipynb"))
        if name in BROWSER_PARAMETERS:
            nb = papermill.parameterize.parameterize_notebook(nb, BROWSER_PARAMETERS[name])
        nbformat.write(nb, root / f"{name}.ipynb")
    with jupyter_lab(root, tmp_path_factory.mktemp("jupyter-home"), kernel_env) as url:
        yield url


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """JupyterLab serving a copy of every notebook, with every optional part this machine has."""
    yield from _serve(tmp_path_factory, None)


@pytest.fixture(scope="module")
def plain_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The same after a plain install: no real backend, no ggml-python, no llama.cpp, no real
    model (the kernel environment of tests/test_notebooks_plain.py)."""
    yield from _serve(tmp_path_factory, plain_env(tmp_path_factory.mktemp("plain")))


@pytest.fixture(scope="module")
def page() -> Iterator[Any]:
    with playwright_sync.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            context = browser.new_context(viewport={"width": 1400, "height": 1000})
            pg = context.new_page()
            pg.set_default_timeout(60_000)
            yield pg
        finally:
            browser.close()


def _broken_images(page: Any) -> list[str]:
    """Image outputs the browser could not draw (``naturalWidth`` 0: an empty or broken PNG); an
    image hidden until it has content (the op explorer's chart before a run) is not asked to."""
    images = page.locator(f"{PANEL} .jp-OutputArea-output img")
    drawn = "img => getComputedStyle(img).display === 'none' || (img.complete && img.naturalWidth > 0)"
    return [
        images.nth(i).get_attribute("alt") or f"image {i}"
        for i in range(images.count())
        if not images.nth(i).evaluate(drawn)
    ]


def _save_screens(page: Any, name: str) -> list[Path]:
    """The notebook from top to bottom, one screenshot per screen height."""
    ARTIFACTS.mkdir(exist_ok=True)
    scroller = page.locator(SCROLLER).first
    height = scroller.evaluate("el => el.clientHeight")
    saved: list[Path] = []
    last_top = -1
    for i in range(MAX_SCREENS):
        top = scroller.evaluate(f"el => {{ el.scrollTop = {i * height}; return el.scrollTop; }}")
        if top <= last_top:  # could not scroll further: the end is saved
            break
        last_top = top
        page.evaluate(PAINTED)  # let the outputs scrolled into view paint
        path = ARTIFACTS / f"notebook-{name}-{i + 1:02d}.png"
        page.screenshot(path=str(path))
        saved.append(path)
    return saved


@pytest.mark.parametrize("install", ["full", "plain"])
@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_runs_in_jupyterlab(
    request: pytest.FixtureRequest, page: Any, name: str, install: str
) -> None:
    lab = request.getfixturevalue("lab" if install == "full" else "plain_lab")
    shots = name if install == "full" else f"{name}-plain"
    for old in ARTIFACTS.glob(f"notebook-{shots}-*.png"):
        old.unlink()
    try:
        open_and_run_all(page, f"{lab}/lab/tree/{name}.ipynb")
        errors, broken = page_errors(page), _broken_images(page)
        result = page.locator(f"{PANEL} .jp-CodeCell").last.locator(".jp-OutputArea-output").all_inner_texts()
    finally:
        screens = _save_screens(page, shots)
        shutdown_kernels(lab)
    assert errors == [], f"{name}: {errors}"
    assert broken == [], f"{name}: images that did not draw: {broken}"
    assert "".join(result).strip(), f"{name}: the last cell (its result) printed nothing"
    assert screens, "no screenshot saved"
