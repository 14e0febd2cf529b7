"""Allocation charts, headless: the frames they draw, PNG images, in-place live updates."""

from __future__ import annotations

import sys
import time
import types

import numpy as np
import openvino as ov
import pandas as pd
import pytest
from openvino import opset13 as ops
from widget_helpers import MIB, FlakyCore, made_and_closed, wait_for

from ovkit.simulate import SimulatedCore
from ovkit.widgets import AllocationCharts
from ovkit.widgets.charts import make_figure
from ovkit.widgets.data import buffer_usage_frame

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def charts():
    yield from made_and_closed(AllocationCharts)


def test_used_vs_free_and_gpu_breakdown(charts) -> None:
    c = charts(SimulatedCore("workstation"), auto_refresh=False)
    frames = c.frames()
    usage = frames["usage"].set_index("device")
    assert list(usage.index) == ["CPU", "GPU.0", "GPU.1"]
    assert usage.loc["GPU.1", "used_mib"] == 1600  # 1536 usm_device + 64 usm_host
    assert usage.loc["GPU.1", "free_mib"] == 16 * 1024 - 1600
    assert usage.loc["CPU", "used_mib"] == (64 - 52) * 1024  # host RAM in use (MemAvailable)
    breakdown = frames["gpu_breakdown"]
    gpu1 = breakdown[breakdown["device"] == "GPU.1"].set_index("kind")["mib"].to_dict()
    assert gpu1 == {"cl_mem": 0, "usm_device": 1536, "usm_host": 64, "usm_shared": 0}
    for name, image in c.images.items():
        assert image.get_state()["format"] == "png"
        assert bytes(image.value).startswith(PNG), name


def test_unchanged_data_is_not_redrawn_and_history_grows(charts) -> None:
    core = SimulatedCore("laptop")
    c = charts(core, auto_refresh=False)
    c.refresh()
    c.refresh()
    assert c.renders["gpu_breakdown"] == 1 and c.renders["usage"] == 1
    assert c.renders["history"] == 3
    assert len(c.frames()["history"]) == 3
    core.allocate("GPU", 256 * MIB)
    c.refresh()
    assert c.renders["usage"] == 2
    assert c.frames()["history"]["GPU"].iloc[-1] == 256


def _model_with_constants(n: int) -> ov.Model:
    x = ops.parameter([n], np.float32, name="x")
    return ov.Model([ops.add(x, ops.constant(np.ones(n, np.float32)))], [x], "add_const")


def test_time_series_keeps_updating_while_graphs_run(charts) -> None:
    core = SimulatedCore("laptop")
    c = charts(core, interval=0.05)
    n = 4 * MIB // 4
    compiled = core.compile_model(_model_with_constants(n), "GPU")  # really runs on the CPU
    out = compiled({"x": np.zeros(n, np.float32)})[0]
    assert out[0] == 1.0
    wait_for(lambda: c.frames()["history"]["GPU"].iloc[-1] >= 4, what="the GPU allocation in the series")
    hist = c.frames()["history"]
    assert hist["GPU"].iloc[0] == 0 and len(hist) >= 2
    del compiled
    wait_for(lambda: c.frames()["history"]["GPU"].iloc[-1] == 0, what="the release in the series")


def test_buffers_chart_reads_ovkit_buffers(monkeypatch, charts) -> None:
    fake = types.ModuleType("ovkit.buffers")
    frame = pd.DataFrame(
        {
            "device": ["CPU", "CPU", "GPU", "GPU"],
            "usage": ["weights", "kv", "weights", "compute"],
            "bytes": [3 * MIB, MIB, 2 * MIB, MIB],
        }
    )
    fake.current_allocations = lambda: frame  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "ovkit.buffers", fake)
    got = buffer_usage_frame()
    assert got.set_index(["device", "usage"])["bytes"].to_dict() == {
        ("CPU", "kv"): MIB,
        ("CPU", "weights"): 3 * MIB,
        ("GPU", "compute"): MIB,
        ("GPU", "weights"): 2 * MIB,
    }
    c = charts(SimulatedCore("laptop"), auto_refresh=False)
    assert len(c.frames()["buffers"]) == 4


def test_buffers_chart_is_empty_without_buffers_module(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "ovkit.buffers", None)  # import fails
    assert buffer_usage_frame().empty


def test_failing_refresh_shows_error(charts) -> None:
    core = FlakyCore("laptop")
    c = charts(core, auto_refresh=False)
    core.fail_with = RuntimeError("GPU lost")
    c.refresh()
    assert "GPU lost" in c.error_html.value
    assert bytes(c.images["history"].value).startswith(PNG)  # the last charts stay


def test_close_stops_thread_and_fallbacks(charts) -> None:
    c = AllocationCharts(SimulatedCore("laptop"), interval=0.05)
    thread = c.refresher.thread
    assert thread is not None and thread.is_alive()
    html = c._repr_html_()
    assert html.count("data:image/png;base64,") == 4
    assert "[history]" in str(c)
    c.close()
    assert not thread.is_alive()


def test_make_figure_rejects_unknown_chart() -> None:
    with pytest.raises(ValueError, match="unknown chart 'pie'.*usage, gpu_breakdown, buffers, history"):
        make_figure("pie", pd.DataFrame())


def test_buffers_chart_follows_real_ovkit_buffers(charts) -> None:
    buffers = pytest.importorskip("ovkit.buffers")
    c = charts(SimulatedCore("laptop"), auto_refresh=False)
    before = c.frames()["buffers"]
    weights = buffers.alloc_buffer("CPU", 3 * MIB, "weights")
    kv = buffers.alloc_buffer("CPU", MIB, "kv_cache")
    try:
        c.refresh()
        got = c.frames()["buffers"].set_index(["device", "usage"])["bytes"]
        base = before.set_index(["device", "usage"])["bytes"] if len(before) else {}
        assert got[("CPU", "weights")] - base.get(("CPU", "weights"), 0) == 3 * MIB
        assert got[("CPU", "kv_cache")] - base.get(("CPU", "kv_cache"), 0) == MIB
        assert c.renders["buffers"] == 2
    finally:
        weights.free()
        kv.free()


def test_history_grows_while_the_kernel_thread_computes(charts) -> None:
    core = SimulatedCore("laptop")
    c = charts(core, interval=0.05)
    n = 256 * 1024
    compiled = core.compile_model(_model_with_constants(n), "GPU")
    x = np.zeros(n, np.float32)
    start = len(c.history)
    deadline = time.monotonic() + 20
    runs = 0
    while len(c.history) < start + 5 and time.monotonic() < deadline:
        compiled({"x": x})  # this thread stays busy running the graph
        runs += 1
    assert len(c.history) >= start + 5, f"only {len(c.history) - start} samples during {runs} runs"
    assert c.frames()["history"]["GPU"].iloc[-1] >= 1  # the compiled constants count on the GPU


@pytest.mark.parametrize("name", ["usage", "gpu_breakdown", "history"])
def test_live_update_draws_what_a_fresh_figure_draws(name) -> None:
    from ovkit.widgets.charts import LiveChart, render_png
    from ovkit.widgets.data import MemoryHistory, chart_data, take_snapshot

    clock = [0.0]
    core = SimulatedCore("workstation", activity=True, clock=lambda: clock[0])
    history = MemoryHistory()
    chart = LiveChart(name)
    for step in range(4):
        clock[0] = 2.0 * step  # the simulated allocations move between samples
        snap = take_snapshot(core)
        history.record(snap)
        frame = getattr(chart_data(snap, history), name)
        png = chart.render(frame)
    assert chart.full_draws <= 2  # the kept figure was updated in place (history: markers end at 3 points)
    assert png == render_png(name, frame)
