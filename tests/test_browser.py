"""Real browser: JupyterLab on 127.0.0.1 driven through Debian's Chromium by Playwright.

No browser is downloaded: Playwright launches ``/usr/bin/chromium`` (``apt-get install chromium``;
``.ci/test`` does it).  The widget JavaScript comes from ``jupyterlab_widgets`` and ovkit's own
ES module (bundled in the package, served by anywidget), so nothing is fetched from a CDN.  A
notebook shows the dashboard on the simulated laptop; the test checks the browser-drawn table,
moves the highlight with the selector, sees the live SVG time series change between ticks while
its axis stays put, checks the widths, log severities and the op explorer.  Screenshots go to
``test-artifacts/`` (git-ignored).  Every wait is bounded; the server (and its kernels) and the
browser are always shut down.

Hook for notebook tests: every ``notebooks/*.ipynb`` is copied into the lab's root, and
``open_and_run_all(page, f"{lab}/lab/tree/<name>.ipynb")`` + ``page_errors(page)`` run one and
collect its error outputs and widget render failures.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

playwright_sync = pytest.importorskip("playwright.sync_api")

from ovkit.widgets.op_explorer import ggml_reference_available  # noqa: E402

pytestmark = [pytest.mark.browser, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = os.environ.get("OVKIT_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
SERVER_START_S = 90
CELL_RUN_S = 240
WAIT_MS = 60_000

# Render every cell (no virtual scrolling: off-screen cells would have empty prompts) and do not
# ask about fetching news (no network, no popup over the outputs).
LAB_SETTINGS: dict[str, dict[str, Any]] = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false"},
}

MIB = 2**20
DASHBOARD_CELLS = [
    "import ovkit\n"
    'core = ovkit.SimulatedCore("laptop")\n'
    f'core.allocate("GPU", {512 * MIB})\n'
    "board = ovkit.dashboard(core, interval=0.5)\n"
    "board",
    # a slow, small climb on the GPU: the series moves, its axis (0..600 MiB) does not
    "import threading, time\n"
    "def climb():\n"
    "    for _ in range(2000):\n"
    f'        core.allocate("GPU", {MIB // 4}); time.sleep(0.25)\n'
    "threading.Thread(target=climb, daemon=True).start()",
    "ovkit.device_table(core)",
    "ovkit.resolve_device(core)\n"
    'ovkit.resolve_device(core, {"GGML_OPENVINO_DEVICE": "gpu"})\n'
    'print("logged")',
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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_http(url: str, proc: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"jupyter lab exited with {proc.returncode} before serving {url}")
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    raise TimeoutError(f"jupyter lab did not serve {url} within {timeout} s")


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A JupyterLab server on a free loopback port (no token), rooted in a temp dir; killed after."""
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium (apt-get install chromium)")
    root = tmp_path_factory.mktemp("lab")
    (root / "dashboard.ipynb").write_text(json.dumps(_notebook(DASHBOARD_CELLS)))
    for nb in (ROOT / "notebooks").glob("*.ipynb"):
        shutil.copy(nb, root / nb.name)
    home = tmp_path_factory.mktemp("jupyter-home")
    for rel, value in LAB_SETTINGS.items():
        (home / "settings" / rel).parent.mkdir(parents=True, exist_ok=True)
        (home / "settings" / rel).write_text(json.dumps(value))
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GGML_OPENVINO_") and k != "MPLBACKEND"}
    env |= {
        "JUPYTER_CONFIG_DIR": str(home / "config"),
        "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
        "JUPYTERLAB_SETTINGS_DIR": str(home / "settings"),
        "JUPYTERLAB_WORKSPACES_DIR": str(home / "workspaces"),
        "PYTHONPATH": os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
    }
    cmd = [
        sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root",
        "--ip=127.0.0.1", f"--port={port}", "--ServerApp.port_retries=0",
        "--IdentityProvider.token=", "--ServerApp.password=",
        f"--ServerApp.root_dir={root}", "--LabApp.news_url=",
    ]  # fmt: skip
    log = open(home / "server.log", "wb")  # noqa: SIM115 (closed in the finally below)
    children: list[psutil.Process] = []
    proc = subprocess.Popen(
        cmd, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        _wait_http(f"http://127.0.0.1:{port}/api/status", proc, SERVER_START_S)
        yield f"http://127.0.0.1:{port}"
    finally:
        # Kernels run in sessions of their own: note them, stop the server, then end any left over.
        with contextlib.suppress(psutil.Error):
            children = psutil.Process(proc.pid).children(recursive=True)
        for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 5)):
            if proc.poll() is not None:
                break
            os.killpg(proc.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(wait)
        _, alive = psutil.wait_procs(children, timeout=10)
        for child in alive:
            with contextlib.suppress(psutil.Error):
                child.kill()
        log.close()


@pytest.fixture(scope="module")
def browser(lab: str) -> Iterator[Any]:
    with playwright_sync.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    pg = context.new_page()
    pg.set_default_timeout(WAIT_MS)
    try:
        yield pg
    finally:
        context.close()


PANEL = ".jp-NotebookPanel:not(.lm-mod-hidden)"  # the visible notebook (a workspace may restore others)


def open_and_run_all(page: Any, url: str) -> None:
    """Open a notebook, wait for its kernel, run every cell and wait until all have run."""
    page.goto(url + "?reset")  # a fresh workspace: no tab restored from the previous test
    page.wait_for_selector(f"{PANEL} .jp-Notebook .jp-Cell")
    prompts: list[str] = []
    deadline = time.monotonic() + CELL_RUN_S
    clicked_at = -1e9
    while time.monotonic() < deadline:
        dialog = page.locator(".jp-Dialog")
        if dialog.count():  # e.g. "Select Kernel" when the session starts late: take the default
            dialog.locator(".jp-mod-accept").first.click()
            continue
        prompts = [p.strip() for p in page.locator(f"{PANEL} .jp-CodeCell .jp-InputPrompt").all_inner_texts()]
        if prompts and all(p not in ("[*]:", "[ ]:", "") for p in prompts):
            return
        idle = page.locator(".jp-StatusBar-Widget", has_text="Idle").count() > 0
        if idle and all(p in ("[ ]:", "") for p in prompts) and time.monotonic() - clicked_at > 15:
            page.locator(f"{PANEL} .jp-Cell").first.click()  # focus: the Run menu acts on this notebook
            page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
            page.locator('li.lm-Menu-item[data-command="runmenu:run-all"]').click()
            clicked_at = time.monotonic()
        time.sleep(0.5)
    raise TimeoutError(f"cells still running after {CELL_RUN_S} s: {prompts}")


def _shutdown_kernels(lab: str) -> None:
    """Stop every kernel of the server (the live dashboard keeps its kernel busy otherwise)."""
    with urllib.request.urlopen(f"{lab}/api/kernels", timeout=10) as resp:
        kernels = json.load(resp)
    for k in kernels:
        req = urllib.request.Request(f"{lab}/api/kernels/{k['id']}", method="DELETE")
        with contextlib.suppress(OSError):
            urllib.request.urlopen(req, timeout=30).close()


def page_errors(page: Any) -> list[str]:
    """Error outputs and widgets that failed to render, in the visible notebook."""
    errors = page.locator(
        f'{PANEL} .jp-OutputArea-output[data-mime-type="application/vnd.jupyter.error"]'
    ).all_inner_texts()
    text = page.locator(PANEL).inner_text()
    return errors + (["Error displaying widget"] if "Error displaying widget" in text else [])


def _save(page_or_locator: Any, name: str, **kw: Any) -> bytes:
    ARTIFACTS.mkdir(exist_ok=True)
    return bytes(page_or_locator.screenshot(path=str(ARTIFACTS / name), **kw))


def _selected(page: Any) -> list[str]:
    return [
        el.get_attribute("data-device") or ""
        for el in page.locator(f"{PANEL} .ovkit-live table.ovkit-devtable tr.ovkit-selected").all()
    ]


def test_dashboard_in_jupyterlab(lab: str, page: Any) -> None:
    try:
        _check_dashboard(lab, page)
    finally:
        _save(page, "dashboard-page.png", full_page=True)
        _shutdown_kernels(lab)


def _history_svg(page: Any, device: str) -> tuple[str, str]:
    svg = page.locator(f'{PANEL} svg.ovkit-history-svg[data-device="{device}"]')
    return svg.get_attribute("data-top") or "", svg.evaluate("e => e.outerHTML")


def _check_dashboard(lab: str, page: Any) -> None:
    open_and_run_all(page, f"{lab}/lab/tree/dashboard.ipynb")
    assert page_errors(page) == []
    # the table drawn by the browser, one row per simulated device, the simulation named
    rows = page.locator(f"{PANEL} .ovkit-live table.ovkit-devtable tr.ovkit-row")
    rows.first.wait_for()
    assert [r.get_attribute("data-device") for r in rows.all()] == ["CPU", "GPU", "NPU"]
    assert page.locator(f"{PANEL} .ovkit-live .ovkit-tag-sim").count() == 3
    assert "SIMULATED device set" in page.locator(f"{PANEL} .ovkit-sim-banner").first.inner_text()
    assert _selected(page) == ["CPU"]
    # every memory figure of the CPU row is the same one the bars show (host RAM − MemAvailable)
    cpu = page.locator(f'{PANEL} .ovkit-live tr.ovkit-row[data-device="CPU"]').inner_text()
    assert "7,047" in cpu and "24,576" in cpu and "host RAM − MemAvailable" in cpu
    # both tables fit a 1,000 px output area
    live_table = page.locator(f"{PANEL} .ovkit-live table.ovkit-devtable")
    styled = page.locator(f"{PANEL} .jp-OutputArea-output table", has_text="SIMULATED device set 'laptop'")
    for name, table in (("live-table.png", live_table), ("device-table.png", styled)):
        width = table.evaluate("e => e.getBoundingClientRect().width")
        assert width <= 1000, f"{name}: {width} px"
        _save(table, name)
    # log lines: routine ones quiet, the fallback warning and the hint stand out; no stderr block
    assert page.locator(f"{PANEL} .ovkit-log-info", has_text="OpenVINO: using device CPU").count() == 2
    assert page.locator(f"{PANEL} .ovkit-log-warning", has_text="fallback to CPU").count() == 1
    assert page.locator(f"{PANEL} .ovkit-log-hint", has_text="case-sensitive").count() == 1
    assert page.locator(f'{PANEL} [data-mime-type="application/vnd.jupyter.stderr"]').count() == 0
    # the live time series: the SVG changes between ticks, its axis range stays put
    page.locator(f'{PANEL} svg.ovkit-history-svg[data-device="GPU"] polyline').wait_for()
    top, first = _history_svg(page, "GPU")
    assert float(top) == 600 * MIB  # 512 MiB + headroom, drawn in MiB
    deadline = time.monotonic() + 30
    second = first
    while second == first and time.monotonic() < deadline:
        time.sleep(0.6)
        top2, second = _history_svg(page, "GPU")
        assert top2 == top, "the axis moved for a small change"
    assert second != first, "the time series did not change while the dashboard was live"
    _save(page.locator(f"{PANEL} .ovkit-live").first, "dashboard-live.png")
    # choose GPU in the selector: the kernel sets the variable and the highlight moves
    page.locator(f"{PANEL} .ovkit-selector select").select_option("GPU")
    page.wait_for_selector(f'{PANEL} .ovkit-live tr.ovkit-selected[data-device="GPU"]')
    assert _selected(page) == ["GPU"]
    # a near miss typed into the text box: the fallback warning, a hint, CPU highlighted
    box = page.locator(f"{PANEL} .ovkit-selector input[type=text]")
    box.fill("gpu")
    box.press("Enter")
    page.wait_for_selector(f'{PANEL} .ovkit-live tr.ovkit-selected[data-device="CPU"]')
    status = page.locator(f"{PANEL} .ovkit-selector").inner_text()
    assert "device gpu is not available, fallback to CPU" in status and "case-sensitive" in status
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
    assert page.locator(f"{PANEL} .ovkit-op-explorer select").nth(2).input_value() == reference
    page.locator(f"{PANEL} .ovkit-op-explorer button", has_text="Run on every device").click()
    results = page.locator(f"{PANEL} .ovkit-op-explorer table.ovkit-op-results tbody tr")
    deadline = time.monotonic() + 60
    while results.count() < 3 and time.monotonic() < deadline:
        time.sleep(0.5)
    texts = results.all_inner_texts()
    assert len(texts) == 3 and all("OK" in t for t in texts), texts
    assert "every device ran on this host's CPU" in page.locator(f"{PANEL} .ovkit-op-explorer").inner_text()
    chart.wait_for(state="visible")
    _save(page.locator(f"{PANEL} .ovkit-op-explorer"), "op-explorer.png")
    assert page_errors(page) == []


def test_devices_notebook_in_jupyterlab(lab: str, page: Any) -> None:
    try:
        open_and_run_all(page, f"{lab}/lab/tree/01-devices.ipynb")
    finally:
        _save(page, "01-devices.png", full_page=True)
        _shutdown_kernels(lab)
    assert page_errors(page) == []
    outputs = page.locator(f"{PANEL} .jp-OutputArea-output").all_inner_texts()
    assert any("Available devices:" in o for o in outputs)
    assert page.locator(f"{PANEL} .jp-OutputArea-output img").count() >= 1  # the memory chart
    source = (ROOT / "notebooks" / "01-devices.ipynb").read_text()
    if "ovkit.widgets" in source or "ovkit.dashboard" in source:
        assert page.locator(f"{PANEL} .jp-OutputArea-output .jupyter-widgets").count() >= 1
