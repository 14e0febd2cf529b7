"""Every walkthrough notebook run once per install, in JupyterLab in a real Chromium, and saved.

One run serves two sets of tests: ``tests/test_browser_notebooks.py`` checks what the browser
drew (no error output, no "Error displaying widget", no broken image, the last cell printed),
and ``tests/test_notebooks.py`` / ``tests/test_notebooks_plain.py`` assert on the notebook as
JupyterLab saved it, widget state included (the device lines, op results, PNGs, widget models).
A notebook runs once per install instead of once in a kernel alone and once more in the browser.

"full" is this machine with every optional part; "plain" is as after ``pip install -e .`` alone:
the kernel runs with a ``sitecustomize`` shim first on ``PYTHONPATH`` that marks ``ggml`` and
``llama_cpp`` as absent, and with ``OVKIT_LLAMA_OPENVINO`` and ``OVKIT_MODEL_CACHE`` pointing
nowhere, so the plain runs mean the same on a machine where ``scripts/install-upstream`` has run.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nbformat
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
    save_notebook,
    shutdown_kernels,
)

NB_DIR = ROOT / "notebooks"
NOTEBOOKS = sorted(NB_DIR.glob("0*.ipynb"))
INSTALLS = ("full", "plain")
#: The whole notebook, every cell (08 compares four runtimes on two real models).
RUN_ALL_S = 900
SCROLLER = f"{PANEL} .jp-WindowedPanel-outer"  # the notebook's scrolling element
MAX_SCREENS = 40
#: Resolves once the browser has drawn two frames: the scrolled-to outputs are painted then.
PAINTED = "() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))"
#: The saved notebook keeps the widget models (JupyterLab's default does not), as a reader's would.
SAVE_WIDGET_STATE = {"@jupyter-widgets/jupyterlab-manager/plugin.jupyterlab-settings": {"saveState": True}}

SHIM = '''"""A plain install: ggml-python and llama-cpp-python are not there (tests/notebook_runs.py)."""
import sys

for _name in ("ggml", "llama_cpp"):
    sys.modules[_name] = None  # import raises ModuleNotFoundError; find_spec returns None
'''


def kernel_env() -> dict[str, str]:
    """This process's environment without any GGML_OPENVINO_* setting, and no forced backend."""
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("GGML_OPENVINO_") and k not in ("MPLBACKEND", "JPY_PARENT_PID")
    }


def plain_env(root: Path) -> dict[str, str]:
    """The kernel environment of a plain install (see the module docstring)."""
    shim = root / "plain-install-shim"
    shim.mkdir(exist_ok=True)
    (shim / "sitecustomize.py").write_text(SHIM)
    env = kernel_env()
    env["PYTHONPATH"] = os.pathsep.join([str(shim), *filter(None, [env.get("PYTHONPATH")])])
    env["OVKIT_LLAMA_OPENVINO"] = str(shim / "no-llama-openvino-build")
    env["OVKIT_MODEL_CACHE"] = str(shim / "no-fetched-models")
    return env


@dataclass(frozen=True, slots=True)
class LabRun:
    """One notebook run top to bottom in JupyterLab: what the browser showed and what it saved."""

    notebook: Any  # the .ipynb as JupyterLab saved it (nbformat v4)
    errors: list[str]  # error outputs and "Error displaying widget" on screen
    broken: list[str]  # images the browser could not draw
    last_output: str  # what the last cell (the notebook's result) printed on screen
    screens: list[Path]  # the notebook, one screenshot per screen, in test-artifacts/


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
    for old in ARTIFACTS.glob(f"notebook-{name}-*.png"):
        old.unlink()
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


class NotebookRuns:
    """Runs each (notebook, install) once when first asked for, and keeps the result for the
    session.  A JupyterLab server per install is started on first use and stopped by ``close``;
    the browser is launched per run, so no Playwright loop outlives a test."""

    def __init__(self, tmp_path_factory: pytest.TempPathFactory) -> None:
        self._tmp = tmp_path_factory
        self._labs: dict[str, tuple[str, Path]] = {}
        self._runs: dict[tuple[str, str], LabRun | BaseException] = {}
        self._servers = contextlib.ExitStack()

    def close(self) -> None:
        self._servers.close()

    def run(self, name: str, install: str) -> LabRun:
        """Notebook ``name`` (``"01-devices"``) run under ``install`` (``"full"`` or ``"plain"``)."""
        if install not in INSTALLS:
            raise ValueError(f"unknown install {install!r}; expected one of {', '.join(INSTALLS)}")
        key = (name, install)
        if key not in self._runs:
            try:
                self._runs[key] = self._run(name, install)
            except Exception as exc:  # a failed run fails every test of it, without running again
                self._runs[key] = exc
        found = self._runs[key]
        if isinstance(found, BaseException):
            raise found
        return found

    def notebook(self, name: str, install: str) -> Any:
        """The saved notebook; an error output in it fails the caller with its message, as a
        kernel run that stops at the first traceback would."""
        nb = self.run(name, install).notebook
        errors = [
            f"{o.ename}: {o.evalue}"
            for c in nb.cells
            if c.cell_type == "code"
            for o in c.outputs
            if o.output_type == "error"
        ]
        if errors:
            raise AssertionError(f"{name} ({install}) raised in JupyterLab: {errors}")
        return nb

    def _lab(self, install: str) -> tuple[str, Path]:
        if install not in self._labs:
            if not Path(CHROMIUM).exists():
                pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium (apt-get install chromium)")
            root = self._tmp.mktemp(f"lab-notebooks-{install}")
            for path in NOTEBOOKS:
                shutil.copy(path, root / path.name)
            env = None if install == "full" else plain_env(self._tmp.mktemp("plain"))
            home = self._tmp.mktemp("jupyter-home")
            url = self._servers.enter_context(jupyter_lab(root, home, env, settings=SAVE_WIDGET_STATE))
            self._labs[install] = (url, root)
        return self._labs[install]

    def _run(self, name: str, install: str) -> LabRun:
        import playwright.sync_api as playwright_sync

        lab, root = self._lab(install)
        shots = name if install == "full" else f"{name}-plain"
        with playwright_sync.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
            try:
                page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
                page.set_default_timeout(60_000)
                try:
                    open_and_run_all(page, f"{lab}/lab/tree/{name}.ipynb", RUN_ALL_S)
                    errors, broken = page_errors(page), _broken_images(page)
                    last = page.locator(f"{PANEL} .jp-CodeCell").last.locator(".jp-OutputArea-output")
                    result = "".join(last.all_inner_texts())
                    save_notebook(page, lab, f"{name}.ipynb")
                finally:
                    screens = _save_screens(page, shots)
                    shutdown_kernels(lab)
            finally:
                browser.close()
        notebook = nbformat.read(root / f"{name}.ipynb", as_version=4)
        return LabRun(notebook, errors, broken, result, screens)
