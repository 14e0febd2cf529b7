"""The data behind the widgets, as plain records and DataFrames (testable without a browser).

Every widget is a thin view over these functions: a snapshot of the devices, the table rows, the
chart frames and a rolling history of used memory.
"""

from __future__ import annotations

import collections
import importlib
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ovkit.devices import Device, DeviceClass, list_devices
from ovkit.memory import MIB
from ovkit.runtime import get_core, is_simulated
from ovkit.selection import Selection, resolve_device

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One reading of every device and of the current selection (or why it failed)."""

    time: float
    devices: tuple[Device, ...]
    selection: Selection | None
    simulated: bool
    error: str | None = None

    @property
    def selected(self) -> str | None:
        return None if self.selection is None else self.selection.device


def error_text(exc: BaseException) -> str:
    """``TypeName: message`` (the message alone is often empty or ambiguous)."""
    return f"{type(exc).__name__}: {exc}"


def take_snapshot(core: Any = None, env: Mapping[str, str] | None = None) -> Snapshot:
    """Read every device and resolve ``GGML_OPENVINO_DEVICE``; failures are kept, not raised."""
    now = time.time()
    try:
        core = get_core(core)
        devices = tuple(list_devices(core))
        selection = resolve_device(core, env, log=False)
    except Exception as exc:
        return Snapshot(now, (), None, simulated=is_simulated(core), error=error_text(exc))
    return Snapshot(now, devices, selection, simulated=is_simulated(core))


# -- the device table ---------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class DeviceRow:
    """One row of the live device table (numbers in MiB, usage as a fraction of total)."""

    name: str
    device_class: str
    description: str
    total_mib: int
    used_mib: int
    free_mib: int
    usage: float
    usage_label: str
    selected: bool
    simulated: bool
    errors: tuple[str, ...] = ()


def live_used_bytes(device: Device) -> int:
    """Bytes in use as live views show them: host RAM in use for CPU (D4), else the backend's used."""
    if device.host_available_bytes is not None:
        return max(0, device.total_bytes - device.host_available_bytes)
    return device.used_bytes


def device_row(device: Device, selected: str | None) -> DeviceRow:
    """The table row for one device."""
    live = live_used_bytes(device)
    usage = min(1.0, live / device.total_bytes) if device.total_bytes > 0 else 0.0
    if device.host_available_bytes is not None:
        label = f"host RAM in use {usage:.0%} (MemAvailable {device.host_available_bytes // MIB:,} MiB)"
    elif device.total_bytes > 0:
        label = f"{usage:.0%} used"
    else:
        label = "no memory figures"
    errors = tuple(e for e in (device.memory_error, device.description_error) if e)
    return DeviceRow(
        name=device.name,
        device_class=str(device.device_class),
        description=device.description,
        total_mib=device.total_bytes // MIB,
        used_mib=device.used_bytes // MIB,
        free_mib=device.free_bytes // MIB,
        usage=usage,
        usage_label=label,
        selected=device.name == selected,
        simulated=device.simulated,
        errors=errors,
    )


def device_rows(snapshot: Snapshot) -> list[DeviceRow]:
    """The table rows of a snapshot, in device order."""
    return [device_row(d, snapshot.selected) for d in snapshot.devices]


def rows_frame(rows: Iterable[DeviceRow]) -> pd.DataFrame:
    """Table rows as a DataFrame indexed by device name."""
    import pandas as pd

    records = [
        {
            "name": r.name,
            "class": r.device_class,
            "description": r.description,
            "total_mib": r.total_mib,
            "used_mib": r.used_mib,
            "free_mib": r.free_mib,
            "usage": r.usage,
            "selected": r.selected,
            "simulated": r.simulated,
            "errors": "; ".join(r.errors),
        }
        for r in rows
    ]
    columns = ["name", "class", "description", "total_mib", "used_mib", "free_mib", "usage"]
    columns += ["selected", "simulated", "errors"]
    return pd.DataFrame(records, columns=columns).set_index("name")


# -- chart data ---------------------------------------------------------------------------
def usage_frame(devices: Iterable[Device]) -> pd.DataFrame:
    """Used vs free per device (MiB), live figures (CPU: host RAM in use)."""
    import pandas as pd

    records = []
    for d in devices:
        used = live_used_bytes(d)
        records.append(
            {
                "device": d.name,
                "used_mib": used / MIB,
                "free_mib": max(0, d.total_bytes - used) / MIB,
                "total_mib": d.total_bytes / MIB,
                "simulated": d.simulated,
            }
        )
    return pd.DataFrame(records, columns=["device", "used_mib", "free_mib", "total_mib", "simulated"])


def gpu_breakdown_frame(devices: Iterable[Device]) -> pd.DataFrame:
    """GPU allocations by ``GPU_MEMORY_STATISTICS`` key (MiB), one row per (device, kind)."""
    import pandas as pd

    records = [
        {"device": d.name, "kind": kind, "mib": nbytes / MIB}
        for d in devices
        if d.device_class is DeviceClass.GPU
        for kind, nbytes in sorted(d.memory_breakdown.items())
    ]
    return pd.DataFrame(records, columns=["device", "kind", "mib"])


BUFFER_COLUMNS = ["device", "usage", "bytes"]


def buffer_usage_frame() -> pd.DataFrame:
    """ovkit's own live buffers summed by (device, usage) — weights / KV / compute.

    Reads :func:`ovkit.buffers.current_allocations`; an empty frame when that module cannot be
    imported, so the chart shows "no buffers" instead of failing.
    """
    import pandas as pd

    try:
        buffers = importlib.import_module("ovkit.buffers")
    except ImportError:
        return pd.DataFrame(columns=BUFFER_COLUMNS)
    frame = buffers.current_allocations()
    if frame.empty:
        return pd.DataFrame(columns=BUFFER_COLUMNS)
    return frame.groupby(["device", "usage"], as_index=False)["bytes"].sum()[BUFFER_COLUMNS]


class MemoryHistory:
    """A rolling, thread-safe record of live used memory per device (for the time series)."""

    def __init__(self, maxlen: int = 300) -> None:
        if maxlen < 2:
            raise ValueError(f"history length {maxlen!r}: expected at least 2 samples")
        self._samples: collections.deque[tuple[float, dict[str, float]]] = collections.deque(maxlen=maxlen)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._samples)

    @property
    def maxlen(self) -> int:
        return self._samples.maxlen or 0

    def record(self, snapshot: Snapshot) -> None:
        """Append one sample: used MiB per device at the snapshot's time (failed reads skipped)."""
        if snapshot.error is not None:
            return
        values = {d.name: live_used_bytes(d) / MIB for d in snapshot.devices}
        with self._lock:
            self._samples.append((snapshot.time, values))

    def frame(self) -> pd.DataFrame:
        """Seconds since the first kept sample (index ``t_s``) × device → used MiB."""
        import pandas as pd

        with self._lock:
            samples = list(self._samples)
        if not samples:
            return pd.DataFrame(index=pd.Index([], name="t_s", dtype=float))
        t0 = samples[0][0]
        frame = pd.DataFrame([v for _, v in samples], index=[t - t0 for t, _ in samples])
        frame.index.name = "t_s"
        return frame


@dataclass(slots=True)
class ChartData:
    """Everything the allocation charts draw, from one snapshot."""

    usage: pd.DataFrame
    gpu_breakdown: pd.DataFrame
    buffers: pd.DataFrame
    history: pd.DataFrame
    notes: list[str] = field(default_factory=list)


def chart_data(snapshot: Snapshot, history: MemoryHistory) -> ChartData:
    """The four chart frames for ``snapshot`` (the history must already hold it)."""
    notes = []
    try:
        buffers = buffer_usage_frame()
    except Exception as exc:
        import pandas as pd

        buffers = pd.DataFrame(columns=BUFFER_COLUMNS)
        notes.append(f"buffers: {error_text(exc)}")
    return ChartData(
        usage=usage_frame(snapshot.devices),
        gpu_breakdown=gpu_breakdown_frame(snapshot.devices),
        buffers=buffers,
        history=history.frame(),
        notes=notes,
    )
