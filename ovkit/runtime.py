"""The process-wide OpenVINO ``Core``, and what ovkit needs of any Core-like object.

Upstream keeps one ``ov::Core`` singleton per process; ovkit does the same, so that memory
statistics are read through the Core that compiled the models (another Core sees none of them).
Every function that queries devices takes an optional ``core``: a real ``openvino.Core`` or a
``ovkit.simulate.SimulatedCore`` (anything with ``available_devices``, ``get_property(device,
name)`` and ``compile_model(model, device, config)``).
"""

from __future__ import annotations

import functools
from collections.abc import MutableMapping
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


def _precision_name(value: Any) -> str:
    """An inference precision as text ("f32"): properties give an ``openvino.Type`` or text."""
    return str(value.get_type_name() if hasattr(value, "get_type_name") else value)


def default_precision(core: Any, device: str) -> str:
    """The inference precision ``device`` compiles in when none is asked ("f32", "bf16", "f16"):
    its own property, or for a simulated device the real CPU's, where it compiles."""
    real, name = (default_core(), "CPU") if is_simulated(core) else (core, device)
    return _precision_name(real.get_property(name, "INFERENCE_PRECISION_HINT"))


def exact_on_cpu(props: MutableMapping[str, Any]) -> None:
    """CPU plugin properties asking f32 made exact: dynamic quantization off (unless set).  On
    CPUs with VNNI or AMX the plugin quantizes the activations meeting a compressed weight to int8
    in groups of 32 even at f32 precision (a Q4_1 matmul: NMSE 3e-5 against exact f32, 2e-13
    without), so ovkit's f32 would not be f32 there (docs/quant.md, "What differs between CPUs")."""
    if _precision_name(props.get("INFERENCE_PRECISION_HINT", "")) == "f32":
        props.setdefault("DYNAMIC_QUANTIZATION_GROUP_SIZE", 0)
