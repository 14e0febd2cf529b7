"""Memory per device class by the rules upstream's device listing uses (:data:`MEMORY_RULES`), and
the live rules every view shows (:data:`LIVE_RULES`, applied by ``Device.live``)."""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ovkit.errors import OvkitError
from ovkit.runtime import Core

MIB = 1024 * 1024
GIB = 1024 * MIB

SIZE_MAX = 2**64 - 1  #: C's SIZE_MAX on 64-bit hosts: "no limit" in ggml's buffer sizes
#: (name, bytes per unit), smallest first
UNITS: tuple[tuple[str, int], ...] = (
    ("B", 1),
    ("KiB", 1 << 10),
    ("MiB", MIB),
    ("GiB", GIB),
    ("TiB", 1 << 40),
)


def unit_for(nbytes: float) -> tuple[str, int]:
    """The largest unit in which ``nbytes`` is at least 2 (1.5 GiB -> MiB, 6 GiB -> GiB): a chart's scale."""
    return next((u for u in reversed(UNITS) if nbytes >= 2 * u[1]), UNITS[0])


def format_bytes(n: float | None, unit: tuple[str, int] | None = None) -> str:
    """``n`` bytes in ``unit`` (default: the largest it reaches): ``512 B``, ``4.0 KiB``, ``1.6 GiB``."""
    if n is None or n != n:  # None or NaN
        return "unknown"
    if n >= SIZE_MAX:
        return "unlimited"
    name, size = unit or next((u for u in reversed(UNITS) if abs(n) >= u[1]), UNITS[0])
    return f"{n:,.0f} B" if size == 1 else f"{n / size:,.1f} {name}"


@dataclass(frozen=True, slots=True)
class MemoryRule:
    """Where one device class reads its total and used bytes from."""

    total_property: str | None  # None: host RAM
    used_property: str | None
    used_is_map: bool = False
    formula: str = ""


# The rules as data: one entry per device class.  OTHER has no rule (0/0, with a reason).
MEMORY_RULES: dict[str, MemoryRule] = {
    "CPU": MemoryRule(None, None, formula="host RAM (free = total, as the backend reports on Linux)"),
    "GPU": MemoryRule(
        "GPU_DEVICE_TOTAL_MEM_SIZE",
        "GPU_MEMORY_STATISTICS",
        used_is_map=True,
        formula="GPU_DEVICE_TOTAL_MEM_SIZE - sum(GPU_MEMORY_STATISTICS)",
    ),
    "NPU": MemoryRule(
        "NPU_DEVICE_TOTAL_MEM_SIZE",
        "NPU_DEVICE_ALLOC_MEM_SIZE",
        formula="NPU_DEVICE_TOTAL_MEM_SIZE - NPU_DEVICE_ALLOC_MEM_SIZE",
    ),
}


@dataclass(frozen=True, slots=True)
class HostMemory:
    """Physical RAM and what the OS currently calls available."""

    total_bytes: int
    available_bytes: int


@dataclass(frozen=True, slots=True)
class MemoryReport:
    """Memory of one device, with how it was computed and why it may be missing."""

    total_bytes: int
    free_bytes: int
    used_bytes: int
    formula: str
    error: str | None = None
    clamped: bool = False
    breakdown: Mapping[str, int] = field(default_factory=dict)
    host_available_bytes: int | None = None
    #: MemAvailable of the host whose RAM this device allocates from (an iGPU or NPU), else None
    shared_host_available_bytes: int | None = None


def host_memory(core: Core | None = None) -> HostMemory:
    """Host RAM; a simulated core supplies its own (``host_memory()``)."""
    provider = getattr(core, "host_memory", None)
    if callable(provider):
        return HostMemory(*map(int, provider()))
    total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    available = total  # where there is no /proc/meminfo
    with contextlib.suppress(OSError), open("/proc/meminfo", encoding="ascii") as fh:
        found = (int(line.split()[1]) * 1024 for line in fh if line.startswith("MemAvailable:"))
        available = next(found, total)
    return HostMemory(total, available)


def host_ram_report(formula: str, *, core: Core | None) -> MemoryReport:
    """Host RAM as a device's memory: free = total, as the backend reports it on Linux."""
    host = host_memory(core)
    return MemoryReport(
        host.total_bytes, host.total_bytes, 0, formula, host_available_bytes=host.available_bytes
    )


def read_property(device: str, name: str, *, core: Core) -> tuple[Any, str | None]:
    """``core.get_property`` that never raises: ``(value, None)`` or ``(None, reason)``."""
    try:
        return core.get_property(device, name), None
    except (RuntimeError, TypeError, ValueError, KeyError) as exc:
        return None, f"{name}: {exc}".strip()


def shares_host_ram(device: str, *, core: Core) -> bool:
    """An NPU, or a GPU whose ``DEVICE_TYPE`` is integrated: both allocate from host RAM."""
    if device.startswith("NPU"):
        return True
    if not device.startswith("GPU"):
        return False
    kind, err = read_property(device, "DEVICE_TYPE", core=core)
    return not err and str(kind).rsplit(".", 1)[-1].upper() == "INTEGRATED"


class UnreadableMemory(OvkitError):
    """A property that failed or returned no byte count (its message is the reason kept)."""


def _as_bytes(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        try:
            value = int(str(value))
        except ValueError:
            raise UnreadableMemory(f"{name} returned {value!r}, expected a byte count") from None
    if value < 0:
        raise UnreadableMemory(f"{name} returned {value}, expected a byte count >= 0")
    return value


def read_counters(
    device: str, rule: MemoryRule, props: dict[str, Any], *, core: Core, skip: tuple[str, ...] = ()
) -> MemoryReport:
    """Memory from the plugin's total and used counters by ``rule`` (the used map's ``skip`` entries
    left out); raw values are stored into ``props``; ``UnreadableMemory`` says why there is none."""

    def read(name: str | None) -> Any:
        if name is None:
            raise UnreadableMemory("no memory counters: host RAM")
        value, err = read_property(device, name, core=core)
        if err:
            raise UnreadableMemory(err)
        props[name] = value
        return value

    total = _as_bytes(str(rule.total_property), read(rule.total_property))
    raw_used = read(rule.used_property)
    if rule.used_is_map and not isinstance(raw_used, Mapping):
        raise UnreadableMemory(f"{rule.used_property} returned {raw_used!r}, expected a map")
    items = raw_used.items() if rule.used_is_map else ()
    breakdown = {str(k): _as_bytes(f"{rule.used_property}[{k}]", v) for k, v in items if str(k) not in skip}
    used = sum(breakdown.values()) if rule.used_is_map else _as_bytes(str(rule.used_property), raw_used)
    return MemoryReport(
        total, max(0, total - used), used, rule.formula, clamped=used > total, breakdown=breakdown
    )


def read_memory(
    device: str, device_class: str, props: dict[str, Any] | None = None, *, core: Core
) -> MemoryReport:
    """Memory of ``device`` by its class rule; raw property values are stored into ``props``."""
    rule = MEMORY_RULES.get(device_class)
    if rule is None:
        return MemoryReport(
            0, 0, 0, "no memory rule", error=f"no memory rule for device class {device_class}"
        )
    if rule.total_property is None:
        return host_ram_report(rule.formula, core=core)
    try:
        mem = read_counters(device, rule, {} if props is None else props, core=core)
    except UnreadableMemory as exc:
        return MemoryReport(0, 0, 0, rule.formula, error=str(exc))
    shared = host_memory(core).available_bytes if shares_host_ram(device, core=core) else None
    return replace(mem, shared_host_available_bytes=shared)


# -- the live rule per device class ---------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class LiveRule:
    """How the live views derive used and free for one device class (short label + tooltip)."""

    label: str
    used: str
    free: str
    note: str = ""


LIVE_RULES: dict[str, LiveRule] = {
    "CPU": LiveRule(
        "host RAM − MemAvailable",
        used="physical RAM − MemAvailable (all processes)",
        free="MemAvailable",
        note="--list-devices prints free = total for CPU, as the backend does on Linux",
    ),
    **{
        cls: LiveRule(
            "total − OpenVINO allocations",
            used=f"this process's OpenVINO allocations ({'sum of ' if r.used_is_map else ''}{r.used_property})",
            free=f"--list-devices free ({r.total_property} − used)",
        )
        for cls, r in MEMORY_RULES.items()
        if r.total_property is not None
    },
}
UNKNOWN_RULE = LiveRule("unknown", used="unknown", free="unknown")

#: A device that allocates from host RAM (iGPU, NPU): its free cannot exceed what the host has.
SHARED_NOTE = "shares host RAM: free is at most the host's MemAvailable"
#: A simulated machine's host RAM: the profile's fixed figures, moved only by what ovkit does there.
SIMULATED_HOST_RULE = LiveRule(
    "simulated host RAM − MemAvailable",
    used="the profile's fixed host RAM − its MemAvailable",
    free="the profile's fixed MemAvailable − what ovkit allocated on the simulated machine",
    note="simulated: a fixed value except for models compiled and buffers allocated on the simulated "
    "CPU, iGPU and NPU, which share its host RAM",
)


@dataclass(frozen=True, slots=True)
class LiveFigures:
    """Total, used and free bytes of one device as every live view shows them; None = unknown."""

    total_bytes: int | None
    used_bytes: int | None
    free_bytes: int | None
    rule: LiveRule
    error: str | None = None

    @property
    def known(self) -> bool:
        return self.error is None and self.total_bytes is not None

    @property
    def usage(self) -> float | None:
        """Used as a fraction of total (0..1), None when unknown or total is 0."""
        if not self.known or not self.total_bytes or self.used_bytes is None:
            return None
        return min(1.0, self.used_bytes / self.total_bytes)

    def explain(self) -> str:
        """One line saying which rule produced the figures (a tooltip or a footnote)."""
        if not self.known:
            return f"unknown: {self.error}"
        text = f"used = {self.rule.used}; free = {self.rule.free}"
        return f"{text} ({self.rule.note})" if self.rule.note else text


@functools.cache
def _process(pid: int) -> Any:
    import psutil

    return psutil.Process(pid)  # kept: a new Process reads /proc/<pid>/stat for its start time


def process_rss_bytes() -> int:
    """This process's resident set size."""
    return int(_process(os.getpid()).memory_info().rss)
