"""The live device table, headless (ipywidgets' DummyComm): rows, highlight, escaping, errors, thread."""

from __future__ import annotations

import dataclasses
import time

import pytest
from widget_helpers import HOSTILE, HOSTILE_PROFILE, MIB, FlakyCore, made_and_closed, thread_names, wait_for

from ovkit.selection import ENV_DEVICE
from ovkit.simulate import SimulatedCore
from ovkit.widgets import DeviceTable
from ovkit.widgets.data import device_rows, take_snapshot
from ovkit.widgets.device_table import table_report


def _html(table: DeviceTable) -> str:
    return table._repr_html_()  # the browser draws the same rows from ``table.view``


def _selected_rows(table: DeviceTable) -> list[str]:
    return [name.removesuffix(" (sim)") for mark, name, *_ in table.report().rows if mark == "*"]


@pytest.fixture
def table():
    yield from made_and_closed(DeviceTable)


def test_rows_and_values_of_the_laptop(table) -> None:
    t = table(SimulatedCore("laptop"), auto_refresh=False)
    frame = t.to_frame()
    assert list(frame.index) == ["CPU", "GPU", "NPU"]
    assert list(frame["total_bytes"] // MIB) == [31623, 29276, 31623]
    assert list(frame["class"]) == ["CPU", "GPU", "NPU"]
    assert frame.loc["NPU", "description"] == "Intel(R) AI Boost (NPU 4000)"
    assert frame["simulated"].all()
    assert t.report().column("Device") == ["CPU (sim)", "GPU (sim)", "NPU (sim)"]  # labelled simulated
    html = _html(t)
    assert "31,623" in html and "29,276" in html
    assert type(t.view.comm).__name__ == "DummyComm"


def test_selected_device_is_highlighted(table, monkeypatch) -> None:
    t = table(SimulatedCore("laptop"), auto_refresh=False)
    assert _selected_rows(t) == ["CPU"]
    assert t.selected == "CPU"
    monkeypatch.setenv(ENV_DEVICE, "NPU")
    t.refresh()
    assert _selected_rows(t) == ["NPU"]
    assert t.to_frame()["selected"].to_dict() == {"CPU": False, "GPU": False, "NPU": True}


def test_allocation_shows_after_refresh(table) -> None:
    core = SimulatedCore("laptop")
    t = table(core, auto_refresh=False)
    assert t.to_frame().loc["GPU", "used_bytes"] // MIB == 0
    core.allocate("GPU", 512 * MIB)
    t.refresh()
    row = t.to_frame().loc["GPU"]
    assert row["used_bytes"] == 512 * MIB
    # the iGPU allocates from host RAM: its free is the host's 24 GiB MemAvailable less the 512 MiB
    assert row["free_bytes"] // MIB == 24 * 1024 - 512
    assert t.to_frame().loc["CPU", "free_bytes"] // MIB == 24 * 1024 - 512
    assert t.report().column("Used MiB")[1] == "512" and ">512<" in _html(t)


def test_runtime_strings_are_escaped_and_errors_inline(table) -> None:
    t = table(SimulatedCore(HOSTILE_PROFILE), auto_refresh=False)
    html = _html(t)
    assert "<script>" not in html and "<b>bold" not in html and "<img" not in html
    assert "&lt;script&gt;alert('x')&lt;/script&gt; &amp; \"Co\"" in html
    # the GPU's failed memory property is shown with the table, escaped
    assert [n for n in t.report().notes if n.startswith("  ! GPU: ")] == [f"  ! GPU: {t.rows[1].errors[0]}"]
    assert "driver said &lt;img src=x" in html
    assert t.to_frame().loc["CPU", "description"] == HOSTILE


def test_render_escapes_device_names() -> None:
    rows = [
        dataclasses.replace(r, name='"><x>') for r in device_rows(take_snapshot(core=SimulatedCore("laptop")))
    ]
    html = table_report(rows)._repr_html_()
    assert '"><x>' not in html and '"&gt;&lt;x&gt;' in html


def test_failing_refresh_is_shown_not_raised(table) -> None:
    core = FlakyCore("laptop")
    t = table(core, auto_refresh=False)
    core.fail_with = RuntimeError("driver <lost>")
    t.refresh()  # no exception
    assert t.error is not None and "RuntimeError: driver <lost>" in t.error
    html = _html(t)
    assert "driver &lt;lost&gt;" in html
    assert len(t.report().rows) == 3  # last good rows stay visible
    core.fail_with = None
    t.refresh()
    assert t.error is None and "driver" not in _html(t)


def test_failing_refresh_on_the_thread_keeps_running(table) -> None:
    core = FlakyCore("laptop")
    t = table(core, interval=0.02)
    core.fail_with = ZeroDivisionError("boom")
    wait_for(lambda: t.error is not None and "boom" in t.error, what="the error in the widget")
    assert t.refresher.alive
    core.fail_with = None
    wait_for(lambda: t.error is None, what="recovery")


def test_background_refresh_updates_in_place(table) -> None:
    core = SimulatedCore("laptop")
    t = table(core, interval=0.02)
    view = t.view
    core.allocate("NPU", 300 * MIB)
    wait_for(lambda: t.to_frame().loc["NPU", "used_bytes"] // MIB == 300, what="the allocation on the thread")
    assert t.view is view  # same widget, new figures
    assert t.view.get_state()["tick"]["devices"][2][1] == 300 * MIB
    assert t.report().column("Used MiB")[2] == "300"


def test_pause_and_resume(table) -> None:
    core = SimulatedCore("laptop")
    t = table(core, interval=0.02)
    wait_for(lambda: t.refresher.ticks >= 3, what="ticks")
    t.controls.pause_button.value = True  # the toggle, as a user clicks it
    assert t.refresher.paused
    assert t.controls.pause_button.get_state()["description"] == "Paused"
    time.sleep(0.1)  # let a tick that was already running finish
    ticks = t.refresher.ticks
    core.allocate("GPU", 100 * MIB)
    time.sleep(0.2)  # ten intervals
    assert t.refresher.ticks == ticks
    assert t.to_frame().loc["GPU", "used_bytes"] // MIB == 0
    assert "paused" in t.controls.status.value
    t.controls.pause_button.value = False
    assert not t.refresher.paused
    wait_for(lambda: t.to_frame().loc["GPU", "used_bytes"] // MIB == 100, what="refresh after resume")


def test_interval_control(table) -> None:
    t = table(SimulatedCore("laptop"), interval=0.5)
    t.controls.interval_box.value = 0.05
    assert t.refresher.interval == 0.05
    with pytest.raises(ValueError, match=r"refresh interval -1 s: expected a finite number >= 0.02"):
        t.refresher.interval = -1
    with pytest.raises(ValueError, match="not a number"):
        DeviceTable(interval="often", auto_refresh=False, core=SimulatedCore("laptop"))  # type: ignore[arg-type]


def test_close_stops_the_thread(table) -> None:
    t = DeviceTable(interval=0.02, core=SimulatedCore("laptop"))
    thread = t.refresher.thread
    assert thread is not None and thread.is_alive() and thread.name in thread_names()
    t.close()
    assert not thread.is_alive()
    assert thread.name not in thread_names()
    assert t.view.comm is None  # the view is gone as well


def test_text_and_html_fallbacks(table) -> None:
    t = table(SimulatedCore("laptop"), auto_refresh=False)
    text = str(t)
    caption, _header, first = text.splitlines()[:3]
    assert caption.startswith("SIMULATED device set") and first.startswith("*  CPU (sim)")
    assert "GPU (sim)" in text and "29,276" in text and "(SIMULATED device set" in text
    assert repr(t) == text
    bundle = t._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert bundle["text/plain"] == text
    assert ">NPU (sim)<" in bundle["text/html"] and t._repr_html_() == bundle["text/html"]


def test_real_cpu_device_of_this_machine(table) -> None:
    t = table(None, auto_refresh=False)  # the process-wide openvino.Core
    frame = t.to_frame()
    assert "CPU" in frame.index
    cpu = frame.loc["CPU"]
    assert not cpu["simulated"] and cpu["total_bytes"] > 0 and cpu["selected"]
    assert "(sim)" not in str(t)
    assert "OpenVINO devices" in _html(t)


def test_stop_all_ends_threads_of_widgets_never_closed() -> None:
    from ovkit.widgets import live_refreshers, stop_all

    t = DeviceTable(interval=0.05, core=SimulatedCore("laptop"))
    assert t.refresher in live_refreshers()
    assert stop_all() >= 1
    assert not t.refresher.alive and t.refresher not in live_refreshers()
    t.close()


def test_unreadable_name_is_described_by_its_id_with_the_reason(table) -> None:
    t = table(SimulatedCore("npu-name-error"), auto_refresh=False)
    assert t.to_frame().loc["NPU", "description"] == "NPU"
    assert "Unsupported configuration key: FULL_DEVICE_NAME" in _html(t)
    assert "  ! NPU: FULL_DEVICE_NAME: Unsupported configuration key" in str(t)
