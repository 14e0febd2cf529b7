"""The live views, headless: one memory figure everywhere, numbers-only payload, stable axes,
lifecycle (one thread per re-created view, none outliving its widget), static PNG."""

from __future__ import annotations

import gc
import math
import threading
from pathlib import Path

import numpy as np
import openvino as ov
import pytest
from openvino import opset13 as ops
from widget_helpers import FOUR_DEVICES, GIB, MIB, FlakyCore, made_and_closed, wait_for

import ovkit
from ovkit import gguf as og
from ovkit.devices import list_devices
from ovkit.memory import format_bytes, unit_for
from ovkit.simulate import SimulatedCore
from ovkit.widgets import AllocationCharts, DeviceTable, Refresher, live_refreshers
from ovkit.widgets.axes import Axis, fit_axis, next_axis, nice_step
from ovkit.widgets.live import MemoryView

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def charts():
    yield from made_and_closed(AllocationCharts)


@pytest.fixture
def gguf_file(tmp_path: Path) -> Path:
    rng = np.random.default_rng(1)
    return og.write_gguf(
        tmp_path / "tiny.gguf", {"token_embd.weight": rng.standard_normal((8, 64)).astype(np.float16)}
    )


def _history_rows(view: MemoryView) -> np.ndarray:
    raw = view.get_state()["history"]
    return np.frombuffer(bytes(raw), np.float64).reshape(-1, 1 + len(view.meta["devices"]))


# -- one memory story ---------------------------------------------------------------------
def test_the_same_memory_figure_in_table_bars_chart_and_fit_check(charts, gguf_file: Path) -> None:
    core = SimulatedCore(FOUR_DEVICES)
    core.allocate("GPU.0", 300 * MIB)
    expected = {
        d.name: (d.live.total_bytes, d.live.used_bytes, d.live.free_bytes) for d in list_devices(core=core)
    }
    assert expected["CPU"] == (32 * GIB, 12 * GIB, 20 * GIB)  # host RAM − MemAvailable, not "0 used"
    assert expected["GPU.0"] == (8 * GIB, 300 * MIB, 8 * GIB - 300 * MIB)

    styled = ovkit.device_table(core=core).data  # the compact table (MiB)
    table = {
        n: (r["total MiB"] * MIB, r["used MiB"] * MIB, r["free MiB"] * MIB) for n, r in styled.iterrows()
    }
    c = charts(core, auto_refresh=False)
    tick = c.view.get_state()["tick"]  # what the browser draws: bars and table
    names = [d["name"] for d in c.view.meta["devices"]]
    sent = {n: tuple(v[:3]) for n, v in zip(names, tick["devices"], strict=True)}
    bars = c.frames()["bars"]
    bar = {n: (r["total_bytes"], r["used_bytes"], r["free_bytes"]) for n, r in bars.iterrows()}
    history = dict(zip(names, _history_rows(c.view)[-1, 1:], strict=True))  # the time series
    fit = og.read_gguf(gguf_file).fit_check(core).set_index("device")
    for name, (total, used, free) in expected.items():
        assert table[name] == (total, used, free), name
        assert sent[name] == (total, used, free), name
        assert bar[name] == (total, used, free), name
        assert history[name] == used, name
        assert fit.loc[name, "free_bytes"] == free, name
    assert "MemAvailable" in fit.loc["CPU", "memory_rule"]


def test_a_failed_property_is_unknown_with_its_reason_never_zero_used(charts, gguf_file: Path) -> None:
    core = SimulatedCore("gpu-memory-error")
    gpu = next(d for d in list_devices(core=core) if d.name == "GPU")
    assert gpu.live.used_bytes is None and "no supported devices found" in gpu.live.explain()
    styled = ovkit.device_table(core=core)
    assert math.isnan(styled.data.loc["GPU", "used MiB"])
    assert styled.data.loc["GPU", "rule"].startswith("unknown: GPU_DEVICE_TOTAL_MEM_SIZE")
    assert "unknown" in styled.to_html()
    c = charts(core, auto_refresh=False)
    assert c.view.get_state()["tick"]["devices"][1][:3] == [None, None, None]
    assert math.isnan(_history_rows(c.view)[-1, 2])  # the series has a gap, not a 0
    fit = og.read_gguf(gguf_file).fit_check(core).set_index("device")
    assert fit.loc["GPU", "fits"] is None and math.isnan(fit.loc["GPU", "free_bytes"])
    t = DeviceTable(auto_refresh=False, core=core)
    assert "GPU (sim)  GPU    unknown" in str(t)
    t.close()


def test_only_numbers_cross_the_comm_per_tick(charts) -> None:
    c = charts(SimulatedCore(FOUR_DEVICES, activity=True), auto_refresh=False)

    def numbers_only(value: object) -> bool:
        if isinstance(value, dict):
            return all(numbers_only(v) for v in value.values())
        if isinstance(value, list):
            return all(numbers_only(v) for v in value)
        return value is None or isinstance(value, int | float)

    assert numbers_only(c.view.tick)
    assert isinstance(c.view.get_state()["history"], bytes | memoryview)


def test_device_table_is_compact_with_simulated_first_and_raw_on_request() -> None:
    core = SimulatedCore("workstation")
    styled = ovkit.device_table(core=core)
    assert list(styled.data.columns)[0] == "simulated"
    html = styled.to_html()
    assert "SIMULATED device set 'workstation'" in html
    assert "65,536" in html and "host RAM − MemAvailable" in html  # MiB with separators, the rule
    assert "total_bytes" not in html
    raw = ovkit.device_table(raw=True, core=core)
    assert raw.loc["GPU.1", "used_bytes"] == 1600 * MIB and raw.loc["CPU", "live_free_bytes"] == 52 * GIB


# -- axes ---------------------------------------------------------------------------------
def test_units_go_by_magnitude() -> None:
    assert unit_for(16 * MIB) == ("MiB", MIB)
    assert unit_for(1536 * MIB) == ("MiB", MIB)  # a small device stays in MiB
    assert unit_for(6 * GIB) == ("GiB", GIB)
    assert (
        format_bytes(1536 * MIB, unit_for(1536 * MIB)) == "1,536.0 MiB"
        and format_bytes(6.8 * GIB) == "6.8 GiB"
    )
    assert format_bytes(None) == "unknown"


def test_axis_grows_at_once_and_shrinks_only_after_hysteresis() -> None:
    axis = next_axis(1080 * MIB, None)
    assert axis.unit == "MiB" and axis.top >= 1080 * MIB * 1.15
    same = next_axis(1100 * MIB, axis)  # a small change: the range stays put
    assert (same.top, same.step) == (axis.top, axis.step)
    grown = next_axis(6128 * MIB, axis)  # 1,080 -> 6,128 MiB looks different: the axis grows
    assert grown.top > 6128 * MIB and grown.unit == "GiB"
    shrinking = grown
    for _ in range(19):
        shrinking = next_axis(100 * MIB, shrinking)
        assert shrinking.top == grown.top  # held while the data stays low
    assert next_axis(100 * MIB, shrinking).top < grown.top  # then it shrinks
    ticks = fit_axis(7.3 * GIB).ticks()
    assert [label for _, label in ticks] == ["0", "2", "4", "6", "8"]
    with pytest.raises(ValueError, match="axis step -1"):
        nice_step(-1)


def test_chart_axis_stays_put_for_a_small_change(charts) -> None:
    core = SimulatedCore("laptop")
    core.allocate("GPU", 512 * MIB)
    c = charts(core, auto_refresh=False)
    first = c.view.tick["history_axes"][1]
    core.allocate("GPU", 4 * MIB)
    c.refresh()
    assert c.view.tick["history_axes"][1] == first
    assert _history_rows(c.view)[-1, 2] == 516 * MIB
    assert Axis(*first[:2], "MiB", int(first[2])).unit == "MiB"  # 0.5 GiB is drawn in MiB


# -- live data follows graphs that run ------------------------------------------------------
def _model_with_constants(n: int) -> ov.Model:
    x = ops.parameter([n], np.float32, name="x")
    return ov.Model([ops.add(x, ops.constant(np.ones(n, np.float32)))], [x], "add_const")


def test_time_series_follows_a_graph_compiled_for_the_simulated_gpu(charts) -> None:
    core = SimulatedCore("laptop")
    c = charts(core, interval=0.05)
    n = 4 * MIB // 4
    compiled = core.compile_model(_model_with_constants(n), "GPU")  # really runs on the CPU
    assert compiled({"x": np.zeros(n, np.float32)})[0][0] == 1.0
    wait_for(lambda: c.history.frame()["GPU"].iloc[-1] >= 4 * MIB, what="the allocation in the series")
    del compiled
    wait_for(lambda: c.history.frame()["GPU"].iloc[-1] == 0, what="the release in the series")


def test_failing_refresh_shows_the_error_and_keeps_the_last_figures(charts) -> None:
    core = FlakyCore("laptop")
    c = charts(core, auto_refresh=False)
    before = c.view.tick["devices"]
    core.fail_with = RuntimeError("GPU lost")
    c.refresh()
    assert "GPU lost" in c.view.tick["error"] and c.view.tick["devices"] == before


# -- lifecycle ------------------------------------------------------------------------------
def _live_threads(prefix: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(prefix) and t.is_alive()]


def test_five_recreated_dashboards_leave_one_live_refresh_thread() -> None:
    core = SimulatedCore("laptop", activity=True)
    boards = [ovkit.dashboard(interval=0.05, op_explorer=False, core=core) for _ in range(5)]
    try:
        assert len(_live_threads("ovkit-dashboard")) == 1
        assert [b.refresher.alive for b in boards] == [False] * 4 + [True]
        assert boards[0].view.comm is None  # the replaced ones are closed, not just stopped
        wait_for(lambda: len(boards[-1].history) >= 3, what="the live one keeps refreshing")
    finally:
        boards[-1].close()
    assert _live_threads("ovkit-dashboard") == []


def test_views_of_other_cells_stay_live_and_a_rerun_cell_replaces_its_own(monkeypatch) -> None:
    from ovkit.widgets import _refresh

    core = SimulatedCore("laptop")
    cell = ["cell-a"]
    monkeypatch.setattr(_refresh, "current_cell", lambda: cell[0])
    a = ovkit.dashboard(interval=0.05, op_explorer=False, core=core)
    cell[0] = "cell-b"
    b = ovkit.dashboard(interval=0.05, op_explorer=False, core=core)
    table_b = DeviceTable(interval=0.05, core=core)  # another kind in the same cell
    cell[0] = "cell-a"  # the user re-runs the first cell
    a2 = ovkit.dashboard(interval=0.05, op_explorer=False, core=core)
    try:
        assert [v.refresher.alive for v in (a, b, table_b, a2)] == [False, True, True, True]
    finally:
        for v in (b, table_b, a2):
            v.close()
    assert _live_threads("ovkit-dashboard") == [] and _live_threads("ovkit-device-table") == []


def test_no_refresh_thread_outlives_its_owner() -> None:
    class Owner:
        def __init__(self) -> None:
            self.calls = 0

        def tick(self) -> None:
            self.calls += 1

    owners = [Owner()]
    r = Refresher(owners[0].tick, 0.02, name="ovkit-test-owner").start()
    wait_for(lambda: owners[0].calls >= 2, what="ticks")
    thread = r.thread
    owners.clear()  # the widget goes away without close()
    gc.collect()
    assert thread is not None
    thread.join(5)
    assert not thread.is_alive() and r not in live_refreshers()


def test_static_png_for_nbconvert_and_export(charts) -> None:
    c = charts(SimulatedCore("laptop"), auto_refresh=False)
    assert c.to_png().startswith(PNG)
    bundle = c._repr_mimebundle_()
    assert {"application/vnd.jupyter.widget-view+json", "image/png", "text/html"} <= set(bundle)
    assert "SIMULATED" in bundle["text/plain"]


def test_bad_panel_names_are_rejected() -> None:
    with pytest.raises(ValueError, match=r"panels \['pie'\]: expected a non-empty selection of table"):
        MemoryView(["pie"])
