"""A live view shows the state of its thread, and a saved notebook keeps what it last drew.

Headless: the controls' button and status line follow ``refresher.pause()/resume()/stop()``
(not only clicks); in a real kernel (nbclient), a stopped view's output is replaced by its last
drawn picture, and a running one is followed by its saved picture, so the notebook saved without
widget state (JupyterLab's default) and reopened holds those pictures (the browser test checks
that they are what a reopened notebook shows, not "Error displaying widget: model not found").
"""

from __future__ import annotations

import re
from pathlib import Path

import nbconvert
import nbformat
import pytest
from widget_helpers import made_and_closed, run_in_kernel, wait_for

from ovkit.simulate import SimulatedCore
from ovkit.widgets import AllocationCharts

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


@pytest.fixture
def charts():
    yield from made_and_closed(AllocationCharts)


def _shown(view: AllocationCharts) -> tuple[str, bool, str]:
    c = view.controls
    return c.pause_button.description, c.pause_button.disabled, re.sub(r"<[^>]+>", "", c.status.value)


def test_controls_follow_the_thread_not_only_the_button(charts) -> None:
    view = charts(SimulatedCore("laptop"), interval=0.05)
    wait_for(lambda: view.refresher.ticks >= 2, what="two refreshes")
    label, disabled, status = _shown(view)
    assert label == "Pause" and not disabled and status.startswith("live · 3 devices · refresh "), status
    view.refresher.pause()
    assert _shown(view)[0] == "Paused" and view.controls.pause_button.value
    view.refresh()
    assert _shown(view)[2].startswith("paused · 3 devices"), _shown(view)
    view.refresher.resume()
    assert _shown(view)[0] == "Pause" and not view.controls.pause_button.value
    view.refresher.stop()
    label, disabled, status = _shown(view)
    assert label == "Stopped" and disabled and view.controls.interval_box.disabled
    assert re.fullmatch(r"stopped · 3 devices · last drawn \d\d:\d\d:\d\d", status), status
    view.refresh()  # a manual redraw after the stop: still says stopped
    assert _shown(view)[2].startswith("stopped · 3 devices · last drawn"), _shown(view)
    assert not view.refresher.alive and view.refresher.state == "stopped"


def test_the_button_still_pauses_the_thread(charts) -> None:
    view = charts(SimulatedCore("laptop"), interval=0.05)
    view.controls.pause_button.value = True
    assert view.refresher.paused and _shown(view)[0] == "Paused"
    view.controls.pause_button.value = False
    assert not view.refresher.paused and _shown(view)[0] == "Pause"


CELLS = [
    "import ovkit\n"
    "from ovkit.widgets import AllocationCharts, DeviceTable\n"
    'core = ovkit.SimulatedCore("laptop")\n'
    "charts = AllocationCharts(interval=0.2, core=core)\n"
    "charts",
    "table = DeviceTable(core=core)\ntable",
    "charts.refresher.stop()\nprint(charts.refresher.state)",
]


def _run_and_save(tmp_path: Path) -> Path:
    """The cells run in a kernel, then saved as JupyterLab saves by default (no widget state)."""
    nb = run_in_kernel(CELLS)
    saved = tmp_path / "saved.ipynb"
    nbformat.write(nb, saved)
    return saved


@pytest.mark.slow
def test_a_stopped_view_reopens_as_its_last_drawn_state(tmp_path: Path) -> None:
    nb = nbformat.read(_run_and_save(tmp_path), as_version=4)  # reopened: no kernel, no models
    assert "widgets" not in nb.metadata
    assert nb.cells[2].outputs[0].text == "stopped\n"
    charts, emptied = [o for o in nb.cells[0].outputs if "data" in o]
    assert WIDGET_VIEW not in charts.data  # nothing left that needs a widget model
    assert emptied.data == {"text/html": ""}  # its saved picture moved into the widget's place
    plain = charts.data["text/plain"]
    assert plain.startswith("charts stopped; the last state drawn (")
    assert re.search(r"^CPU +[\d.,]+ GiB +[\d.,]+ GiB +simulated host RAM − MemAvailable$", plain, re.M), (
        plain
    )
    assert not re.search(r"\d{7}", plain)  # figures by magnitude, never raw byte counts
    page = charts.data["text/html"]
    assert "charts stopped; the last state drawn" in page and "data:image/png;base64," in page
    assert charts.data["image/png"]
    table, saved = [o for o in nb.cells[1].outputs if "data" in o]
    assert WIDGET_VIEW in table.data  # a view still live stays the widget, its saved picture next
    assert "ovkit-saved" in saved.data["text/html"] and ">NPU (sim)<" in saved.data["text/html"]
    assert saved.data["text/plain"].startswith("saved picture of this DeviceTable, as drawn at ")
    html, _ = nbconvert.HTMLExporter().from_notebook_node(nb)
    assert "charts stopped; the last state drawn" in html and "data:image/png;base64," in html
