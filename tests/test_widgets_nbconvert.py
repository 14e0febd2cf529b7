"""Fallbacks in a real kernel: a notebook that displays the widgets, executed with nbclient and
exported by nbconvert without widget state, still shows the table and the charts as HTML."""

from __future__ import annotations

import re

import nbconvert
import pytest
from widget_helpers import run_in_kernel

pytestmark = [pytest.mark.slow]

CELLS = [
    "import ovkit\n"
    "from ovkit import notebook_log\n"
    "notebook_log.install()\n"
    "from ovkit.widgets import DeviceTable\n"
    'core = ovkit.SimulatedCore("laptop")\n'
    "table = DeviceTable(auto_refresh=False, core=core)\n"
    "table",
    "print(table)",
    "board = ovkit.dashboard(auto_refresh=False, op_explorer=False, core=core)\nboard",
    "board.close(); table.close()",
    'sel = ovkit.resolve_device({"GGML_OPENVINO_DEVICE": "gpu"}, core=core)',
]


def test_exported_html_shows_the_data_without_widget_state(tmp_path) -> None:
    nb = run_in_kernel(CELLS)
    outputs = [o for c in nb.cells for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    shown = [
        o for c in nb.cells[:-1] for o in c.outputs if o.output_type in ("display_data", "execute_result")
    ]
    # both views were closed (cell 4): their outputs hold the last drawn state, no widget view
    assert all(
        "text/html" in o.data and "application/vnd.jupyter.widget-view+json" not in o.data for o in shown
    )
    assert "*  CPU (sim)" in "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    html, _ = nbconvert.HTMLExporter().from_notebook_node(nb)
    assert len(re.findall(r">\*</td><td[^>]*>CPU \(sim\)<", html)) == 2  # selected: table + dashboard
    assert ">NPU (sim)<" in html
    assert "data:image/png;base64," in html  # the dashboard's charts
    assert "GGML_OPENVINO_DEVICE" in html  # the selector's resolution
    # ovkit's log lines: no stderr block; a quiet info line, the warning and the hint styled
    logged = nb.cells[-1].outputs
    assert [o.output_type for o in logged] == ["display_data"] * 3
    assert [o.data["text/plain"] for o in logged] == [
        "warning: GGML OpenVINO Backend: device gpu is not available, fallback to CPU",
        "hint: device ids are case-sensitive: use 'GPU'",
        "OpenVINO: using device CPU",
    ]
    assert 'class="ovkit-log ovkit-log-warning"' in html and 'class="ovkit-log ovkit-log-info"' in html
    assert "var(--jp-warn-color1, #f57c00)" in html  # the warning's colour, with a fallback outside Lab
