"""The engine's errors."""

from __future__ import annotations


class EngineError(RuntimeError):
    """Compilation or inference failed in OpenVINO (the message names the device and graph)."""


class InputError(ValueError):
    """An input array that does not fit the compiled graph (names, shapes, dtypes)."""


class ProfilingOffError(RuntimeError):
    """Per-node timings were asked for but the compiled model reports ``PERF_COUNT`` off."""
