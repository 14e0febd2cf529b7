"""The process-wide OpenVINO ``Core`` (one per process, as upstream: memory statistics are only
seen through the Core that compiled the models), and the :class:`Core` protocol every ``core=``
argument takes (``openvino.Core`` or ``ovkit.simulate.SimulatedCore``)."""

from __future__ import annotations

import functools
from collections.abc import MutableMapping
from typing import Any, Protocol, runtime_checkable

from ovkit.errors import OvkitError


@runtime_checkable
class Core(Protocol):
    """What ovkit asks of an OpenVINO Core (``openvino.Core`` and ``SimulatedCore`` are ones)."""

    @property
    def available_devices(self) -> list[str]:
        """The device ids, ``CPU``, ``GPU.0`` ..."""

    def get_property(self, device_name: str, name: str, /) -> Any:
        """One property of one device (raises when the device or the property is not there)."""

    def compile_model(self, model: Any, device_name: str, config: dict[str, Any] | None = None, /) -> Any:
        """``model`` (an ``openvino.Model``) compiled for ``device_name`` with ``config``."""

    def import_model(self, model_stream: bytes, device_name: str, config: dict[str, Any], /) -> Any:
        """A compiled model exported before (the compiled-model cache), for ``device_name``."""

    def get_default_context(self, device_name: str, /) -> Any:
        """The device's remote context (remote tensors in device memory)."""


class RuntimeUnavailableError(OvkitError, RuntimeError):
    """OpenVINO could not be imported or its Core could not start."""


@functools.cache
def default_core() -> Core:
    """The process-wide ``openvino.Core`` (created on first use)."""
    try:
        import openvino as ov
    except Exception as exc:  # ImportError, or a broken shared library
        raise RuntimeUnavailableError(f"cannot import openvino: {exc}") from exc
    try:
        return ov.Core()
    except Exception as exc:
        raise RuntimeUnavailableError(f"cannot start the OpenVINO runtime: {exc}") from exc


def get_core(core: Core | None = None) -> Core:
    """``core`` if given, else the process-wide Core."""
    return default_core() if core is None else core


def is_simulated(core: Core | None) -> bool:
    """True for ovkit's simulated device set (None, the process-wide Core, is real)."""
    return bool(getattr(core, "simulated", False))


def _precision_name(value: Any) -> str:
    """An inference precision as text ("f32"): properties give an ``openvino.Type`` or text."""
    return str(value.get_type_name() if hasattr(value, "get_type_name") else value)


def default_precision(device: str, *, core: Core) -> str:
    """The inference precision ``device`` compiles in when none is asked ("f32", "bf16", "f16"):
    its own property, or for a simulated device the real CPU's, where it compiles."""
    real, name = (default_core(), "CPU") if is_simulated(core) else (core, device)
    return _precision_name(real.get_property(name, "INFERENCE_PRECISION_HINT"))


def exact_on_cpu(props: MutableMapping[str, Any]) -> None:
    """CPU plugin properties asking f32 made exact: dynamic quantization off (unless set), which on
    VNNI/AMX CPUs quantizes activations to int8 even at f32 (docs/quant.md)."""
    if _precision_name(props.get("INFERENCE_PRECISION_HINT", "")) == "f32":
        props.setdefault("DYNAMIC_QUANTIZATION_GROUP_SIZE", 0)
