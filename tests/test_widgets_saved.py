"""The saved picture of a live view is what the browser drew (sent back over the comm).

Headless: a ``drawn`` message from the browser becomes the view's saved picture, with the CSS that
lets a reopened notebook show it in place of the widget; malformed messages change nothing.  The
browser test (``tests/test_browser.py``) saves, reopens and looks at the page.
"""

from __future__ import annotations

import pytest
from widget_helpers import made_and_closed

from ovkit.simulate import SimulatedCore
from ovkit.widgets import DeviceTable, dashboard
from ovkit.widgets.live import MAX_DRAWN_CHARS
from ovkit.widgets.saved import SAVED_CLASS, SAVED_CSS

DRAWN = '<div class="lm-Widget ovkit-live" data-seq="7"><table class="ovkit-devtable"></table></div>'


@pytest.fixture
def table():
    yield from made_and_closed(DeviceTable)


def _send(view, content) -> None:
    view._handle_custom_msg(content, [])  # as ipywidgets routes a frontend's model.send()


def test_the_browser_drawing_becomes_the_saved_picture(table) -> None:
    view = table(SimulatedCore("laptop"), auto_refresh=False)
    before = view.saved_html()
    assert before == view._repr_html_() and ">NPU (sim)<" in before  # nothing drawn yet: the report
    saved: list[int] = []
    view.save_picture = lambda: saved.append(1)  # type: ignore[method-assign]
    view.view._on_drawn = view.save_picture
    _send(view.view, {"kind": "drawn", "html": DRAWN})
    assert view.saved_html() == DRAWN and saved == [1]
    html = view._saved_bundle()["text/html"]
    assert html.startswith(f"<div class='{SAVED_CLASS}'><style>") and SAVED_CSS in html
    assert ".ovkit-live" in html  # the view's own CSS, for a page where no widget loaded it
    assert "its kernel is gone: run the cell again" in html and html.endswith(DRAWN + "</div>")


@pytest.mark.parametrize(
    "content",
    [
        {"kind": "other", "html": DRAWN},
        {"kind": "drawn", "html": 42},
        {"kind": "drawn", "html": ""},
        {"kind": "drawn", "html": "x" * (MAX_DRAWN_CHARS + 1)},
        ["drawn", DRAWN],
    ],
)
def test_a_malformed_message_changes_nothing(table, content) -> None:
    view = table(SimulatedCore("laptop"), auto_refresh=False)
    _send(view.view, content)
    assert view.view.drawn_html == "" and ">NPU (sim)<" in view.saved_html()


def test_the_dashboards_picture_keeps_the_selection_and_busy_figures() -> None:
    board = dashboard(auto_refresh=False, op_explorer=False, core=SimulatedCore("laptop"))
    try:
        _send(board.view, {"kind": "drawn", "html": DRAWN})
        html = board.saved_html()
        assert DRAWN in html and "GGML_OPENVINO_DEVICE" in html and "busy" in html
    finally:
        board.close()
