"""ovkit widgets: thin ipywidgets views over plain data functions (see ``ovkit.widgets.data``).

Every widget also renders as HTML and text, so ``print``, nbconvert and front ends without
widget support still show the data.
"""

from __future__ import annotations

from ovkit.widgets._refresh import Refresher, live_refreshers, stop_all
from ovkit.widgets.charts import AllocationCharts
from ovkit.widgets.dashboard import Dashboard, dashboard
from ovkit.widgets.data import MemoryHistory, Snapshot, take_snapshot
from ovkit.widgets.device_table import DeviceTable
from ovkit.widgets.op_explorer import OpExplorer
from ovkit.widgets.selector import DeviceSelector

__all__ = [
    "AllocationCharts",
    "Dashboard",
    "DeviceSelector",
    "DeviceTable",
    "MemoryHistory",
    "Refresher",
    "Snapshot",
    "dashboard",
    "live_refreshers",
    "stop_all",
    "take_snapshot",
    "OpExplorer",
]
