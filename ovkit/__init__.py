"""ovkit: explore OpenVINO devices the way llama.cpp's ggml-openvino backend sees them.

The light core (devices, memory, selection, config) is imported eagerly; graphs, engine, buffers
and widgets load on first use so that ``ovkit list-devices`` stays as fast as OpenVINO itself.
"""

from __future__ import annotations

import importlib
import logging
from typing import TYPE_CHECKING, Any

from ovkit.config import OvkitConfig, OvkitConfigWarning, read_config
from ovkit.devices import Device, DeviceClass, device_table, format_device_list, list_devices
from ovkit.memory import MemoryReport, read_memory
from ovkit.selection import Backend, Selection, resolve_device, using_device

__version__ = "0.1.0"

# A library adds no handler but this one: where ovkit's log lines go is the application's choice
# (``ovkit.notebook_log.install()`` in a notebook; the CLI writes them to stderr).
logging.getLogger("ovkit").addHandler(logging.NullHandler())


# Heavier parts, imported lazily: attribute name -> module.
_LAZY: dict[str, str] = {
    "simulate": "ovkit.simulate",
    "SimulatedCore": "ovkit.simulate",
    "widgets": "ovkit.widgets",
    "dashboard": "ovkit.widgets",
    "engine": "ovkit.engine",
    "Engine": "ovkit.engine",
    "RunConfig": "ovkit.engine",
    "get_engine": "ovkit.engine",
    "graph_session": "ovkit.engine",
    "testops": "ovkit.testops",
    "buffers": "ovkit.buffers",
    "current_allocations": "ovkit.buffers",
    "allocation_history": "ovkit.buffers",
    "quant": "ovkit.quant",
    "QuantizedWeight": "ovkit.quant",
    "weight_release": "ovkit.weight_release",
    "gguf": "ovkit.gguf",
    "read_gguf": "ovkit.gguf",
    "graph": "ovkit.graph",
    "Graph": "ovkit.graph",
    "GraphError": "ovkit.graph",
    "UnsupportedOpError": "ovkit.graph",
    "op_coverage_table": "ovkit.ops.table",
    "check": "ovkit.preflight",
}


if TYPE_CHECKING:  # the lazy names, for type checkers and editors (the runtime imports them on use)
    from ovkit import buffers, engine, gguf, graph, quant, simulate, testops, weight_release, widgets
    from ovkit.buffers import allocation_history, current_allocations
    from ovkit.engine import Engine, RunConfig, get_engine, graph_session
    from ovkit.gguf import read_gguf
    from ovkit.graph import Graph, GraphError, UnsupportedOpError
    from ovkit.ops.table import op_coverage_table
    from ovkit.preflight import check
    from ovkit.quant import QuantizedWeight
    from ovkit.simulate import SimulatedCore
    from ovkit.widgets.dashboard import dashboard


def __dir__() -> list[str]:
    """The module's names and the lazy ones, so tab completion offers ``ovkit.Graph``."""
    return sorted({*globals(), *_LAZY})


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'ovkit' has no attribute {name!r}")
    mod = importlib.import_module(module)
    return mod if module.endswith("." + name) else getattr(mod, name)


__all__ = [
    "allocation_history",
    "Backend",
    "buffers",
    "check",
    "current_allocations",
    "dashboard",
    "Device",
    "device_table",
    "DeviceClass",
    "Engine",
    "engine",
    "format_device_list",
    "get_engine",
    "gguf",
    "graph",
    "Graph",
    "graph_session",
    "GraphError",
    "list_devices",
    "MemoryReport",
    "op_coverage_table",
    "OvkitConfig",
    "OvkitConfigWarning",
    "quant",
    "QuantizedWeight",
    "read_config",
    "read_gguf",
    "read_memory",
    "resolve_device",
    "RunConfig",
    "Selection",
    "simulate",
    "SimulatedCore",
    "testops",
    "UnsupportedOpError",
    "using_device",
    "weight_release",
    "widgets",
]
