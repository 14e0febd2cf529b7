"""ovkit widgets: live views drawn in the browser over plain data (``ovkit.widgets.data``); every
widget also renders as HTML, text and (charts) a PNG, for ``print``, nbconvert and other front ends."""

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
