"""ovkit widgets: live views drawn in the browser (``MemoryView``, an anywidget) over plain data
functions (``ovkit.widgets.data``, ``ovkit.widgets.axes``).

Every widget also renders as HTML, text and (charts) a PNG, so ``print``, nbconvert and front ends
without widget support still show the data.
"""

from __future__ import annotations

from ovkit.widgets._refresh import Refresher, live_refreshers, stop_all
from ovkit.widgets.charts import AllocationCharts
from ovkit.widgets.dashboard import Dashboard, dashboard
from ovkit.widgets.data import LiveModel, MemoryHistory, Snapshot, take_snapshot
from ovkit.widgets.device_table import DeviceTable
from ovkit.widgets.live import MemoryView
from ovkit.widgets.op_explorer import OpExplorer
from ovkit.widgets.selector import DeviceSelector

__all__ = [
    "AllocationCharts",
    "Dashboard",
    "DeviceSelector",
    "DeviceTable",
    "LiveModel",
    "MemoryHistory",
    "MemoryView",
    "Refresher",
    "Snapshot",
    "dashboard",
    "live_refreshers",
    "stop_all",
    "take_snapshot",
    "OpExplorer",
]
