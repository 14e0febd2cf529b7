"""``ovkit.dashboard()``, headless: the selector moves the table's highlight; one thread, closed."""

from __future__ import annotations

import os

import pytest
from widget_helpers import FOUR_DEVICES, thread_names, wait_for

import ovkit
from ovkit.selection import ENV_DEVICE
from ovkit.simulate import SimulatedCore
from ovkit.widgets import Dashboard


@pytest.fixture
def restore_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_DEVICE, "placeholder")
    monkeypatch.delenv(ENV_DEVICE)


def _highlighted(d: Dashboard) -> list[str]:
    tick = d.view.get_state()["tick"]  # what the browser highlights
    return [d.view.meta["devices"][tick["selected"]]["name"]] if tick["selected"] >= 0 else []


def test_selector_moves_the_highlight(restore_env) -> None:
    d = ovkit.dashboard(auto_refresh=False, op_explorer=False, core=SimulatedCore("laptop"))
    assert isinstance(d, Dashboard)
    assert _highlighted(d) == ["CPU"]
    d.selector.dropdown.value = "GPU"
    assert os.environ[ENV_DEVICE] == "GPU"
    assert _highlighted(d) == ["GPU"]
    d.selector.text.value = "npu"  # near miss: falls back to CPU
    assert _highlighted(d) == ["CPU"]
    assert "fallback to CPU" in d.selector.status.value
    d.close()


def test_one_thread_feeds_table_and_charts_and_stops_on_close(restore_env) -> None:
    core = SimulatedCore(FOUR_DEVICES, activity=True)
    before = thread_names()
    d = ovkit.dashboard(interval=0.05, op_explorer=False, core=core)
    new = thread_names() - before
    assert new == {d.refresher.thread.name}  # the parts do not run threads of their own
    wait_for(lambda: len(d.history) >= 3, what="samples")
    assert list(d.to_frame().index) == ["CPU", "GPU.0", "GPU.1", "NPU"]
    thread = d.refresher.thread
    d.close()
    assert not thread.is_alive()
    assert thread_names() - before == set()


def test_dashboard_fallbacks(restore_env) -> None:
    d = ovkit.dashboard(auto_refresh=False, op_explorer=False, core=SimulatedCore("laptop"))
    text = str(d)
    assert "GGML_OPENVINO_DEVICE = (unset) -> CPU" in text
    assert "*  CPU (sim)" in text and "SIMULATED device set" in text
    html = d._repr_mimebundle_()["text/html"]
    assert ">GPU (sim)<" in html and "data:image/png;base64," in html
    d.close()


def test_dashboard_with_op_explorer_follows_the_selection(restore_env) -> None:
    d = ovkit.dashboard(auto_refresh=False, core=SimulatedCore("laptop"))
    assert d.explorer is not None
    assert d.explorer.device_select.value == ("CPU",)
    d.selector.dropdown.value = "NPU"
    assert d.explorer.device_select.value == ("NPU",)
    assert [v[0] for v in d.explorer.verdicts] == ["NPU"]
    d.close()


def test_op_runs_pause_the_live_refresh(restore_env) -> None:
    d = ovkit.dashboard(interval=0.05, core=SimulatedCore("laptop"))
    seen = []
    with d.quiet():
        seen.append(d.refresher.paused)
    assert seen == [True] and not d.refresher.paused
    d.refresher.pause()
    with d.quiet():
        pass
    assert d.refresher.paused  # a user's pause is kept
    d.close()


def test_close_releases_every_widget_model(restore_env) -> None:
    from ipywidgets.widgets.widget import _instances

    before = set(_instances)
    d = ovkit.dashboard(auto_refresh=False, core=SimulatedCore("laptop"))
    d.explorer.op_dropdown.value = "ADD"  # replaces the shape boxes
    assert len(set(_instances) - before) > 50
    d.close()
    assert set(_instances) - before == set()  # no model (child, layout, style) left in the kernel


def test_cpu_utilisation_moves_in_the_dashboard_while_a_model_runs(restore_env, tmp_path) -> None:
    """The busy panel: this process's CPU share rises while a model generates in a thread; the
    simulated GPU and NPU say they are not measured."""
    import threading
    import time

    from ovkit.model import Model, synthetic

    model = Model(synthetic("llama", tmp_path / "m.gguf"), n_ctx=64)
    model.generate([1, 2, 3], 1)  # compiled before the measurement
    d = ovkit.dashboard(auto_refresh=False, op_explorer=False, core=SimulatedCore("laptop"))
    time.sleep(0.3)
    d.refresh()
    quiet = next(b for b in d.busy if b.device == "CPU").detail["this process"]
    stop = threading.Event()

    def run() -> None:
        while not stop.is_set():
            model.reset()
            model.generate([1, 2, 3], 4)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    try:
        time.sleep(1.0)
        d.refresh()
    finally:
        stop.set()
        worker.join()
    frame = d.busy_frame()
    running = next(b for b in d.busy if b.device == "CPU").detail["this process"]
    assert running > quiet + 0.05, (quiet, frame.loc["CPU"].to_dict())
    assert list(frame.loc[["GPU", "NPU"], "shown"]) == ["simulated: not measured"] * 2
    text = str(d)
    assert "busy over the last refresh interval\ndevice" in text and "\nCPU " in text
    assert "<b>busy over the last refresh interval</b>" in d._repr_mimebundle_()["text/html"]
    d.close()
