"""The engine's errors."""

from __future__ import annotations

from ovkit.errors import OvkitError


class EngineError(OvkitError, RuntimeError):
    """Compilation or inference failed in OpenVINO (the message names the device and graph)."""


class InputError(OvkitError, ValueError):
    """An input array that does not fit the compiled graph (names, shapes, dtypes)."""


class ProfilingOffError(OvkitError, RuntimeError):
    """Per-node timings were asked for but the compiled model reports ``PERF_COUNT`` off."""
