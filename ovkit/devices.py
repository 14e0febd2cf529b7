"""Device discovery: one entry per physical OpenVINO device, as ``--list-devices`` shows them: the
virtual ids (AUTO, MULTI, HETERO, BATCH) dropped, sorted, named by the exact id, classed by prefix,
described by ``FULL_DEVICE_NAME`` (+ `` (NPU <arch>)``), or the id when that cannot be read."""

from __future__ import annotations

import enum
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from ovkit import layouts, memory
from ovkit.layouts import VIRTUAL_PREFIXES
from ovkit.memory import MIB, LiveFigures, MemoryReport, read_memory
from ovkit.runtime import Core, get_core, is_simulated

ENV_DEVICE = "GGML_OPENVINO_DEVICE"


class DeviceClass(enum.StrEnum):
    """The class of a device decides its memory rule and its op restrictions."""

    CPU = "CPU"
    GPU = "GPU"
    NPU = "NPU"
    OTHER = "OTHER"


def device_class(name: str) -> DeviceClass:
    """Classify by prefix: ``CPU*``, ``GPU*``, ``NPU*``, anything else is OTHER."""
    return next((cls for cls in DeviceClass if name.startswith(cls)), DeviceClass.OTHER)


def is_virtual(name: str) -> bool:
    """AUTO/MULTI/HETERO/BATCH route to other devices and are never listed."""
    return name.startswith(VIRTUAL_PREFIXES)


@dataclass(frozen=True, slots=True)
class Device:
    """One physical OpenVINO device with its memory as the backend reports it."""

    name: str
    description: str
    device_class: DeviceClass
    total_bytes: int
    free_bytes: int
    used_bytes: int = 0
    memory_error: str | None = None
    description_error: str | None = None
    memory_formula: str = ""
    memory_clamped: bool = False
    memory_breakdown: Mapping[str, int] = field(default_factory=dict)
    host_available_bytes: int | None = None
    #: MemAvailable of the host whose RAM this device allocates from (an iGPU or NPU), else None
    shared_host_available_bytes: int | None = None
    properties: Mapping[str, Any] = field(default_factory=dict)
    simulated: bool = False
    ov_id: str = ""  #: the OpenVINO device this entry stands for (the name, in the seed layout)
    layout: str = "seed"  #: the device layout that listed it (``ovkit.layouts.LAYOUTS``)
    ggml_type: str = "GPU"  #: ``ggml_backend_dev_type``; ``--list-devices`` skips type CPU

    @property
    def total_mib(self) -> int:
        return self.total_bytes // MIB

    @property
    def free_mib(self) -> int:
        return self.free_bytes // MIB

    @property
    def live(self) -> LiveFigures:
        """Total/used/free as every live view and the fit check show them (``memory.LIVE_RULES``):
        host RAM by ``MemAvailable``, a device sharing host RAM capped there."""
        # host RAM (the CPU, and any device a layout reports as host RAM) follows the CPU's rule
        cls = "CPU" if self.host_available_bytes is not None else str(self.device_class)
        rule, total = memory.LIVE_RULES.get(cls), self.total_bytes
        if self.memory_error is not None or rule is None:
            return LiveFigures(
                None, None, None, memory.UNKNOWN_RULE, self.memory_error or f"no memory rule for {cls}"
            )
        if self.host_available_bytes is not None:
            free = min(total, self.host_available_bytes)
            return LiveFigures(
                total, total - free, free, memory.SIMULATED_HOST_RULE if self.simulated else rule
            )
        if self.shared_host_available_bytes is None:
            return LiveFigures(total, self.used_bytes, self.free_bytes, rule)
        shared = memory.LiveRule(
            f"{rule.label}; free ≤ MemAvailable",
            rule.used,
            f"{rule.free}, at most MemAvailable",
            memory.SHARED_NOTE,
        )
        return LiveFigures(
            total, self.used_bytes, min(self.free_bytes, self.shared_host_available_bytes), shared
        )

    def list_line(self) -> str:
        """The ``--list-devices`` row: ``  <name>: <desc> (<total> MiB, <free> MiB free)``."""
        return f"  {self.name}: {self.description} ({self.total_mib} MiB, {self.free_mib} MiB free)"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data (property values that JSON cannot hold become strings)."""
        d = asdict(self)
        d["device_class"] = str(self.device_class)
        d["total_mib"] = self.total_mib
        d["free_mib"] = self.free_mib
        d["memory_breakdown"] = dict(self.memory_breakdown)
        d["properties"] = json.loads(json.dumps(dict(self.properties), default=str))
        return d


def physical_device_ids(core: Core | None = None) -> list[str]:
    """``available_devices`` without virtual ids, sorted lexicographically."""
    return layouts.physical(get_core(core).available_devices)


def describe_device(name: str, *, core: Core | None = None) -> Device:
    """Read one device's description and memory; property failures become fallbacks."""
    core = get_core(core)
    cls = device_class(name)
    props: dict[str, Any] = {}
    description, description_error = layouts.describe(name, core=core, props=props)
    mem = read_memory(name, cls, props, core=core)
    seen = Device(name, description, cls, 0, 0, description_error=description_error, properties=props)
    return with_memory(replace(seen, simulated=is_simulated(core), ov_id=name), mem)


#: Device's name of each MemoryReport field (the others have the same name)
DEVICE_FIELD = {
    "formula": "memory_formula",
    "error": "memory_error",
    "clamped": "memory_clamped",
    "breakdown": "memory_breakdown",
}


def with_memory(d: Device, mem: MemoryReport) -> Device:
    """``d`` with the figures of a memory reading."""
    return replace(d, **{DEVICE_FIELD.get(f.name, f.name): getattr(mem, f.name) for f in fields(mem)})


def list_devices(
    layout: str = "seed", env: Mapping[str, str] | None = None, *, core: Core | None = None
) -> list[Device]:
    """The ggml devices the backend registers in ``layout`` (``ovkit.layouts.LAYOUTS``), which may
    depend on ``GGML_OPENVINO_DEVICE`` in ``env`` (default ``os.environ``): each entry of the
    layout's tables applied to the seed's reading of the OpenVINO device."""
    chosen = layouts.get_layout(layout)
    core = get_core(core)
    requested = (os.environ if env is None else env).get(ENV_DEVICE) or None
    selected = layouts.resolve_for(chosen, requested, core=core).device
    devices = []
    for index, ov_id in enumerate(chosen.entries(list(core.available_devices), selected)):
        seen = describe_device(ov_id, core=core)  # the seed's reading: description, properties, memory
        if chosen.memory is not None:
            seen = with_memory(seen, chosen.memory(core, ov_id))
        name, description = chosen.naming(index, ov_id), chosen.description(core, ov_id, selected, seen)
        ggml_type = chosen.ggml_type(ov_id, selected)
        devices.append(replace(seen, name=name, description=description, layout=layout, ggml_type=ggml_type))
    return devices


def format_device_list(devices: Iterable[Device]) -> str:
    """The exact text llama.cpp prints for ``--list-devices`` (without the trailing newline)."""
    lines = ["Available devices:"]
    lines += [d.list_line() for d in devices] or ["  (none)"]
    return "\n".join(lines)
