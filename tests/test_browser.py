"""The dashboard in JupyterLab in a real Chromium (Playwright; ``browser_lab`` serves the lab).

A notebook shows the dashboard on the simulated laptop; the test checks the browser-drawn table,
moves the highlight with the selector, sees the live SVG time series change between ticks while
its axis stays put, checks that the tables fit a 1,000 px output area, the log severities and
the op explorer.  Nothing comes from a CDN: the widget JavaScript is ``jupyterlab_widgets`` and
ovkit's ES module bundled in the package.  Screenshots go to ``test-artifacts/`` (git-ignored).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import playwright.sync_api as playwright_sync
import pytest
from browser_lab import (
    ARTIFACTS,
    CHROMIUM,
    CHROMIUM_ARGS,
    PANEL,
    contents,
    jupyter_lab,
    open_and_run_all,
    page_errors,
    save_notebook,
    shutdown_kernels,
)

from ovkit.widgets.op_explorer import ggml_reference_available

pytestmark = [pytest.mark.browser, pytest.mark.slow]

MIB = 2**20
WIDGETS = f"{PANEL} .jupyter-widgets"  # what the widgets drew (their saved pictures are not inside)
DASHBOARD_CELLS = [
    "import ovkit\n"
    "from ovkit import notebook_log\n"
    "notebook_log.install()\n"
    'core = ovkit.SimulatedCore("laptop")\n'
    f'core.allocate("GPU", {512 * MIB})\n'
    "board = ovkit.dashboard(interval=0.5, core=core)\n"
    "board",
    # a slow, small climb on the GPU: the series moves, its axis (0..600 MiB) does not
    "import threading, time\n"
    "def climb():\n"
    "    for _ in range(2000):\n"
    f'        core.allocate("GPU", {MIB // 4}); time.sleep(0.25)\n'
    "threading.Thread(target=climb, daemon=True).start()",
    "ovkit.device_table(core=core)",
    "ovkit.resolve_device(core=core)\n"
    'ovkit.resolve_device({"GGML_OPENVINO_DEVICE": "gpu"}, core=core)\n'
    'print("logged")',
]


# Live views (and a selector) that keep running while the notebook is saved; it is reopened
# after its kernel is gone.
SAVED_CELLS = [
    "import ovkit\n"
    "from ovkit.widgets import DeviceSelector, DeviceTable\n"
    'core = ovkit.SimulatedCore("laptop")\n'
    f'core.allocate("GPU", {300 * MIB})\n'
    "board = ovkit.dashboard(interval=0.5, core=core)\n"
    "board",
    "DeviceTable(interval=0.5, core=core)",
    'DeviceSelector(env={"GGML_OPENVINO_DEVICE": "GPU"}, core=core)',
]


def _notebook(cells: list[str]) -> dict[str, Any]:
    return {
        "cells": [
            {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": src}
            for src in cells
        ],
        "metadata": {
            "kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"},
            "language_info": {"name": "python"},
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium (apt-get install chromium)")
    root = tmp_path_factory.mktemp("lab")
    (root / "dashboard.ipynb").write_text(json.dumps(_notebook(DASHBOARD_CELLS)))
    (root / "saved.ipynb").write_text(json.dumps(_notebook(SAVED_CELLS)))
    with jupyter_lab(root, tmp_path_factory.mktemp("jupyter-home")) as url:
        yield url


@pytest.fixture
def page(lab: str) -> Iterator[Any]:
    with playwright_sync.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            pg = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
            pg.set_default_timeout(60_000)
            yield pg
        finally:
            browser.close()


def _save(page_or_locator: Any, name: str, **kw: Any) -> bytes:
    ARTIFACTS.mkdir(exist_ok=True)
    return bytes(page_or_locator.screenshot(path=str(ARTIFACTS / name), **kw))


def _selected(page: Any) -> list[str]:
    return [
        el.get_attribute("data-device") or ""
        for el in page.locator(f"{WIDGETS} .ovkit-live table.ovkit-devtable tr.ovkit-selected").all()
    ]


def test_dashboard_in_jupyterlab(lab: str, page: Any) -> None:
    try:
        _check_dashboard(lab, page)
    finally:
        _save(page, "dashboard-page.png", full_page=True)
        shutdown_kernels(lab)


def _history_svg(page: Any, device: str) -> tuple[str, str]:
    svg = page.locator(f'{WIDGETS} svg.ovkit-history-svg[data-device="{device}"]')
    return svg.get_attribute("data-top") or "", svg.evaluate("e => e.outerHTML")


def _check_dashboard(lab: str, page: Any) -> None:
    open_and_run_all(page, f"{lab}/lab/tree/dashboard.ipynb")
    assert page_errors(page) == []
    # the table drawn by the browser, one row per simulated device, the simulation named
    rows = page.locator(f"{WIDGETS} .ovkit-live table.ovkit-devtable tr.ovkit-row")
    rows.first.wait_for()
    assert [r.get_attribute("data-device") for r in rows.all()] == ["CPU", "GPU", "NPU"]
    assert page.locator(f"{WIDGETS} .ovkit-live .ovkit-tag-sim").count() == 3
    assert "SIMULATED device set" in page.locator(f"{WIDGETS} .ovkit-sim-banner").first.inner_text()
    assert _selected(page) == ["CPU"]
    # the simulated CPU row says it is simulated, and its free moves with the 512 MiB (and the
    # climb) allocated on the iGPU, which shares host RAM: below the profile's 24,576 MiB
    cpu = page.locator(f'{WIDGETS} .ovkit-live tr.ovkit-row[data-device="CPU"]').inner_text()
    assert "31,623" in cpu and "simulated host RAM − MemAvailable" in cpu and "24,576" not in cpu, cpu
    # both tables fit a 1,000 px output area
    live_table = page.locator(f"{WIDGETS} .ovkit-live table.ovkit-devtable")
    styled = page.locator(f"{PANEL} .jp-OutputArea-output table", has_text="SIMULATED device set 'laptop'")
    for name, table in (("live-table.png", live_table), ("device-table.png", styled)):
        width = table.evaluate("e => e.getBoundingClientRect().width")
        assert width <= 1000, f"{name}: {width} px"
        _save(table, name)
    # log lines: routine ones quiet, the fallback warning and the hint stand out; no stderr block
    logged = page.locator(f"{PANEL} .jp-CodeCell").nth(3).locator(".jp-OutputArea")
    assert logged.locator(".ovkit-log-info", has_text="OpenVINO: using device CPU").count() == 2
    assert logged.locator(".ovkit-log-warning", has_text="fallback to CPU").count() == 1
    assert logged.locator(".ovkit-log-hint", has_text="case-sensitive").count() == 1
    _save(logged, "log-lines.png")
    assert page.locator(f'{PANEL} [data-mime-type="application/vnd.jupyter.stderr"]').count() == 0
    # the live time series: the SVG changes between ticks, its axis range stays put
    page.locator(f'{WIDGETS} svg.ovkit-history-svg[data-device="GPU"] polyline').wait_for()
    top, first = _history_svg(page, "GPU")
    assert float(top) == 600 * MIB  # 512 MiB + headroom, drawn in MiB
    deadline = time.monotonic() + 30
    second = first
    while second == first and time.monotonic() < deadline:
        time.sleep(0.6)
        top2, second = _history_svg(page, "GPU")
        assert top2 == top, "the axis moved for a small change"
    assert second != first, "the time series did not change while the dashboard was live"
    _save(page.locator(f"{WIDGETS} .ovkit-live").first, "dashboard-live.png")
    # choose GPU in the selector: the kernel sets the variable and the highlight moves
    page.locator(f"{WIDGETS} .ovkit-selector select").select_option("GPU")
    page.wait_for_selector(f'{WIDGETS} .ovkit-live tr.ovkit-selected[data-device="GPU"]')
    assert _selected(page) == ["GPU"]
    # a near miss typed into the text box: the fallback warning, a hint, CPU highlighted
    box = page.locator(f"{WIDGETS} .ovkit-selector input[type=text]")
    box.fill("gpu")
    box.press("Enter")
    page.wait_for_selector(f'{WIDGETS} .ovkit-live tr.ovkit-selected[data-device="CPU"]')
    status = page.locator(f"{WIDGETS} .ovkit-selector").inner_text()
    assert "device gpu is not available, fallback to CPU" in status and "case-sensitive" in status
    _save(page.locator(f"{WIDGETS} .ovkit-selector"), "selector-fallback.png")
    # pause: the series stands still; resume: it moves again
    toggle = page.locator(f"{PANEL} .ovkit-dashboard .ovkit-refresh-controls button").first
    toggle.click()
    page.wait_for_selector(f"{PANEL} .ovkit-refresh-controls :text('paused')")
    time.sleep(1.0)  # a refresh that was under way reaches the browser
    _, paused = _history_svg(page, "GPU")
    time.sleep(2.0)  # four intervals
    assert _history_svg(page, "GPU")[1] == paused, "the time series changed while paused"
    toggle.click()
    resumed = paused
    deadline = time.monotonic() + 30
    while resumed == paused and time.monotonic() < deadline:
        time.sleep(0.5)
        resumed = _history_svg(page, "GPU")[1]
    assert resumed != paused, "the time series did not resume"
    # the op explorer: no (broken) image before the first run; one result row per device after
    page.locator(f"{PANEL} .ovkit-dashboard").get_by_text("Op explorer").click()
    chart = page.locator(f"{PANEL} img.ovkit-op-chart")
    assert not chart.is_visible()
    reference = "ggml" if ggml_reference_available() else "numpy"  # ggml whenever it works here
    assert page.locator(f"{WIDGETS} .ovkit-op-explorer select").nth(2).input_value() == reference
    page.locator(f"{WIDGETS} .ovkit-op-explorer button", has_text="Run on every device").click()
    results = page.locator(f"{WIDGETS} .ovkit-op-explorer .ovkit-op-results tbody tr")
    deadline = time.monotonic() + 60
    while results.count() < 3 and time.monotonic() < deadline:
        time.sleep(0.5)
    texts = results.all_inner_texts()
    assert len(texts) == 3 and all("OK" in t for t in texts), texts
    assert "every device ran on this host's CPU" in page.locator(f"{WIDGETS} .ovkit-op-explorer").inner_text()
    chart.wait_for(state="visible")
    _save(page.locator(f"{WIDGETS} .ovkit-op-explorer"), "op-explorer.png")
    assert page_errors(page) == []


def _saved_outputs(lab: str, name: str) -> list[str]:
    """The HTML of every saved picture in the notebook as the server stored it."""
    nb = contents(lab, name)["content"]
    return [
        "".join(out["data"]["text/html"])
        for cell in nb["cells"]
        for out in cell.get("outputs", [])
        if "ovkit-saved" in "".join(out.get("data", {}).get("text/html", ""))
    ]


def test_saved_notebook_reopens_with_the_drawn_state(lab: str, page: Any) -> None:
    """Saved while its live views run, closed, reopened without their kernel: each shows the
    state the browser last drew, and no widget error."""
    try:
        open_and_run_all(page, f"{lab}/lab/tree/saved.ipynb")
        assert page_errors(page) == []
        live_rows = page.locator(f"{WIDGETS} .ovkit-live tr.ovkit-row")
        live_rows.first.wait_for()
        # while the widgets are drawn their saved pictures stay hidden
        saved = page.locator(f"{PANEL} .ovkit-saved")
        assert saved.count() == 3 and not any(s.is_visible() for s in saved.all())
        # what the browser drew goes back to the kernel (every 2 s) and into the saved pictures
        drawn_copies = page.locator(f"{PANEL} .ovkit-saved .ovkit-live")
        deadline = time.monotonic() + 60
        while drawn_copies.count() < 2:
            assert time.monotonic() < deadline, "no drawn copy reached the saved pictures in 60 s"
            time.sleep(0.5)
        save_notebook(page, lab, "saved.ipynb")
        _save(page, "saved-live.png", full_page=True)
    finally:
        shutdown_kernels(lab)
    pictures = _saved_outputs(lab, "saved.ipynb")
    assert len(pictures) == 3, pictures
    board, table, selector = pictures
    for drawn in (board, table):  # what the browser drew: its live table with the three devices
        assert re.search(r'<div class="[^"]*\bovkit-live\b[^"]*" data-seq="\d+"', drawn), drawn[:500]
        assert re.findall(r'<tr class="ovkit-row[^"]*" data-device="(\w+)"', drawn) == ["CPU", "GPU", "NPU"]
    assert "ovkit-history-svg" in board and "300" in board
    assert "GGML_OPENVINO_DEVICE" in selector and "GPU" in selector

    page.goto(f"{lab}/lab/tree/saved.ipynb?reset")
    page.wait_for_selector(f"{PANEL} .jp-Notebook .jp-Cell")
    shown = page.locator(f"{PANEL} .ovkit-saved")
    shown.first.wait_for(state="visible")
    time.sleep(5.0)  # the widget manager asks the new kernel for the models (it has none)
    assert [s.is_visible() for s in shown.all()] == [True, True, True]
    devices = shown.first.locator("tr.ovkit-row")
    assert [r.get_attribute("data-device") for r in devices.all()] == ["CPU", "GPU", "NPU"]
    assert shown.first.locator("svg.ovkit-history-svg").count() >= 1
    assert "its kernel is gone" in shown.first.inner_text()
    assert page_errors(page) == []
    # the widget outputs wait for or miss a model no kernel holds: either way they are hidden
    outputs = page.locator(f"{PANEL} .jp-OutputArea-output").evaluate_all(
        "es => es.map(e => [e.textContent, e.checkVisibility()])"
    )
    widget_outputs = [(text, seen) for text, seen in outputs if "ovkit-saved" not in text]
    assert len(widget_outputs) == 3, outputs
    for text, seen in widget_outputs:
        assert text in ("Loading widget...", "Error displaying widget: model not found") and not seen
    _save(page, "saved-reopened.png", full_page=True)
    shutdown_kernels(lab)
