"""The process-wide OpenVINO ``Core``, and what ovkit needs of any Core-like object.

Upstream keeps one ``ov::Core`` singleton per process; ovkit does the same, so that memory
statistics are read through the Core that compiled the models (another Core sees none of them).
Every function that queries devices takes an optional ``core``: a real ``openvino.Core`` or a
``ovkit.simulate.SimulatedCore`` (anything with ``available_devices``, ``get_property(device,
name)`` and ``compile_model(model, device, config)``).
"""

from __future__ import annotations

import functools
from typing import Any


class RuntimeUnavailableError(RuntimeError):
    """OpenVINO could not be imported or its Core could not start."""


@functools.cache
def default_core() -> Any:
    """The process-wide ``openvino.Core`` (created on first use)."""
    try:
        import openvino as ov
    except Exception as exc:  # ImportError, or a broken shared library
        raise RuntimeUnavailableError(f"cannot import openvino: {exc}") from exc
    try:
        return ov.Core()
    except Exception as exc:
        raise RuntimeUnavailableError(f"cannot start the OpenVINO runtime: {exc}") from exc


def get_core(core: Any | None = None) -> Any:
    """``core`` if given, else the process-wide Core."""
    return default_core() if core is None else core


def is_simulated(core: Any) -> bool:
    """True for ovkit's simulated device set."""
    return bool(getattr(core, "simulated", False))
