"""A JupyterLab server driven through Debian's Chromium by Playwright, for browser tests.

No browser is downloaded: Playwright launches ``/usr/bin/chromium`` (``.ci/test`` installs it).
:func:`jupyter_lab` serves a directory on a free loopback port (no token) and always stops the
server and its kernels; :func:`open_and_run_all` runs a notebook's cells in the browser and
:func:`page_errors` collects what went wrong on screen.  Every wait is bounded.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts"  # screenshots for a person to look at (git-ignored)
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
CELL_RUN_S = 300
PANEL = ".jp-NotebookPanel:not(.lm-mod-hidden)"  # the visible notebook (a workspace may restore others)
ERROR_OUTPUT = '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.error"]'
SAVE_S = 30

# Render every cell (no virtual scrolling: off-screen cells would have empty prompts) and do not
# ask about fetching news (no network, no popup over the outputs).
LAB_SETTINGS: dict[str, dict[str, Any]] = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false"},
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


@contextlib.contextmanager
def jupyter_lab(
    root: Path,
    home: Path,
    kernel_env: dict[str, str] | None = None,
    settings: dict[str, dict[str, Any]] | None = None,
) -> Iterator[str]:
    """Serve ``root`` with JupyterLab (settings and runtime files under ``home``); yields its URL.
    ``kernel_env``: the environment of the server and so of its kernels (default: this one's);
    ``settings``: more settings files beside ``LAB_SETTINGS``, by path under the settings folder."""
    for rel, value in (LAB_SETTINGS | (settings or {})).items():
        (home / "settings" / rel).parent.mkdir(parents=True, exist_ok=True)
        (home / "settings" / rel).write_text(json.dumps(value))
    port = _free_port()
    env = {
        k: v
        for k, v in (os.environ if kernel_env is None else kernel_env).items()
        if not k.startswith("GGML_OPENVINO_") and k != "MPLBACKEND"
    }
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
        "--ServerApp.disable_check_xsrf=True",  # shutdown_kernels' DELETE has no browser cookie
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


def open_and_run_all(page: Any, url: str, timeout: float = CELL_RUN_S) -> None:
    """Open a notebook, wait for its kernel, run every cell and wait until all have run, or
    until the kernel is idle after an error output (JupyterLab runs no cell after it)."""
    page.goto(url + "?reset")  # a fresh workspace: no tab restored from the previous test
    page.wait_for_selector(f"{PANEL} .jp-Notebook .jp-Cell")
    prompts: list[str] = []
    deadline = time.monotonic() + timeout
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
        if idle and "[*]:" not in prompts and page.locator(f"{PANEL} {ERROR_OUTPUT}").count():
            return
        if idle and all(p in ("[ ]:", "") for p in prompts) and time.monotonic() - clicked_at > 15:
            page.locator(f"{PANEL} .jp-Cell").first.click()  # focus: the Run menu acts on this notebook
            page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
            page.locator('li.lm-Menu-item[data-command="runmenu:run-all"]').click()
            clicked_at = time.monotonic()
        time.sleep(0.5)
    raise TimeoutError(f"cells still running after {timeout} s: {prompts}")


def shutdown_kernels(lab: str) -> None:
    """Stop every kernel of the server (a live view keeps its kernel busy otherwise)."""
    with urllib.request.urlopen(f"{lab}/api/kernels", timeout=10) as resp:
        kernels = json.load(resp)
    for k in kernels:
        req = urllib.request.Request(f"{lab}/api/kernels/{k['id']}", method="DELETE")
        try:
            urllib.request.urlopen(req, timeout=30).close()
        except urllib.error.HTTPError as exc:  # gone meanwhile is fine; a refusal (403) is not
            if exc.code != 404:
                raise


def page_errors(page: Any) -> list[str]:
    """Error outputs and widgets that failed to render, in the visible notebook."""
    errors: list[str] = page.locator(f"{PANEL} {ERROR_OUTPUT}").all_inner_texts()
    text = page.locator(PANEL).inner_text()
    return errors + (["Error displaying widget"] if "Error displaying widget" in text else [])


def contents(lab: str, name: str, content: bool = True) -> dict[str, Any]:
    """The server's model of a file (with its content unless ``content=False``)."""
    with urllib.request.urlopen(f"{lab}/api/contents/{name}?content={int(content)}", timeout=30) as resp:
        return dict(json.load(resp))


def save_notebook(page: Any, lab: str, name: str) -> None:
    """Save the open notebook as a reader would (Ctrl+S) and wait until the server has written it."""
    before = contents(lab, name, content=False)["last_modified"]
    page.locator(f"{PANEL} .jp-Cell").first.click()
    page.keyboard.press("Control+s")
    deadline = time.monotonic() + SAVE_S
    while contents(lab, name, content=False)["last_modified"] == before:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{name} was not saved within {SAVE_S} s")
        time.sleep(0.5)
