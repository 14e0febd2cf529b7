"""ovkit: explore OpenVINO devices the way llama.cpp's ggml-openvino backend sees them.  The light
core is imported eagerly; the rest loads on first use, so ``ovkit list-devices`` stays fast."""

from __future__ import annotations

import importlib
import logging
from typing import TYPE_CHECKING, Any

from ovkit.config import OvkitConfig, OvkitConfigWarning, read_config
from ovkit.devices import Device, DeviceClass, format_device_list, list_devices
from ovkit.devices_view import device_table
from ovkit.errors import OvkitError
from ovkit.memory import MemoryReport, read_memory
from ovkit.selection import Backend, Selection, resolve_device, using_device

__version__ = "0.1.0"

# A library adds no handler but this one: where ovkit's log lines go is the application's choice
# (``ovkit.notebook_log.install()`` in a notebook; the CLI writes them to stderr).
logging.getLogger("ovkit").addHandler(logging.NullHandler())


# Heavier parts, imported on first use: attribute name -> module.
_LAZY: dict[str, str] = {
    "allocation_history": "ovkit.buffers",
    "check": "ovkit.preflight",
    "current_allocations": "ovkit.buffers",
    "dashboard": "ovkit.widgets",
    "Engine": "ovkit.engine",
    "get_engine": "ovkit.engine",
    "Graph": "ovkit.graph",
    "GraphError": "ovkit.graph",
    "graph_session": "ovkit.engine",
    "Model": "ovkit.model",
    "op_coverage_table": "ovkit.ops.coverage",
    "QuantizedWeight": "ovkit.quant",
    "read_gguf": "ovkit.gguf",
    "RunConfig": "ovkit.engine",
    "SimulatedCore": "ovkit.simulate",
    "UnsupportedOpError": "ovkit.graph",
}


if TYPE_CHECKING:  # the lazy names, for type checkers and editors (the runtime imports them on use)
    from ovkit.buffers import allocation_history, current_allocations
    from ovkit.engine import Engine, RunConfig, get_engine, graph_session
    from ovkit.gguf import read_gguf
    from ovkit.graph import Graph, GraphError, UnsupportedOpError
    from ovkit.model import Model
    from ovkit.ops.coverage import op_coverage_table
    from ovkit.preflight import check
    from ovkit.quant import QuantizedWeight
    from ovkit.simulate import SimulatedCore
    from ovkit.widgets.dashboard import dashboard


def __dir__() -> list[str]:
    """The public names, the lazy ones included (tab completion offers ``ovkit.Graph``)."""
    return sorted(__all__)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'ovkit' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


__all__ = [
    "allocation_history",
    "Backend",
    "check",
    "current_allocations",
    "dashboard",
    "Device",
    "device_table",
    "DeviceClass",
    "Engine",
    "format_device_list",
    "get_engine",
    "Graph",
    "graph_session",
    "GraphError",
    "list_devices",
    "MemoryReport",
    "Model",
    "op_coverage_table",
    "OvkitConfig",
    "OvkitConfigWarning",
    "OvkitError",
    "QuantizedWeight",
    "read_config",
    "read_gguf",
    "read_memory",
    "resolve_device",
    "RunConfig",
    "Selection",
    "SimulatedCore",
    "UnsupportedOpError",
    "using_device",
]
