"""The data behind the live views, as plain records and numbers, every figure from ``Device.live``;
``LiveModel`` turns snapshots into what crosses the comm (``meta``, a ``tick``, the history)."""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ovkit.devices import Device, DeviceClass, list_devices
from ovkit.memory import UNITS, process_rss_bytes, unit_for
from ovkit.runtime import Core, get_core, is_simulated
from ovkit.selection import Selection, resolve_device
from ovkit.widgets.axes import Axis, next_axis

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One reading of every device, the selection and this process's RSS (or why it failed)."""

    time: float
    devices: tuple[Device, ...]
    selection: Selection | None
    simulated: bool
    error: str | None = None
    rss_bytes: int | None = None

    @property
    def selected(self) -> str | None:
        return None if self.selection is None else self.selection.device


def error_text(exc: BaseException) -> str:
    """``TypeName: message`` (the message alone is often empty or ambiguous)."""
    return f"{type(exc).__name__}: {exc}"


def take_snapshot(env: Mapping[str, str] | None = None, *, core: Core | None = None) -> Snapshot:
    """Read every device and resolve ``GGML_OPENVINO_DEVICE``; failures are kept, not raised."""
    now = time.time()
    try:
        core = get_core(core)
        devices = tuple(list_devices(core=core))
        selection = resolve_device(env, log=False, core=core)
        rss = process_rss_bytes()
    except Exception as exc:
        return Snapshot(now, (), None, simulated=is_simulated(core), error=error_text(exc))
    return Snapshot(now, devices, selection, simulated=is_simulated(core), rss_bytes=rss)


# -- the device table ---------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class DeviceRow:
    """One row of the live table: the device's live figures (None = unknown) and its rule."""

    name: str
    device_class: str
    description: str
    total_bytes: int | None
    used_bytes: int | None
    free_bytes: int | None
    usage: float | None
    rule: str
    explain: str
    selected: bool
    simulated: bool
    errors: tuple[str, ...] = ()


def device_row(device: Device, selected: str | None) -> DeviceRow:
    """The table row for one device."""
    live, d = device.live, device
    errors = tuple(e for e in (d.memory_error, d.description_error) if e)
    return DeviceRow(
        d.name, str(d.device_class), d.description, live.total_bytes, live.used_bytes, live.free_bytes,
        live.usage, live.rule.label, live.explain(), d.name == selected, d.simulated, errors,
    )  # fmt: skip


def device_rows(snapshot: Snapshot) -> list[DeviceRow]:
    """The table rows of a snapshot, in device order."""
    return [device_row(d, snapshot.selected) for d in snapshot.devices]


def rows_frame(rows: Sequence[DeviceRow]) -> pd.DataFrame:
    """Table rows as a DataFrame indexed by device name (bytes; None = unknown)."""
    import pandas as pd

    columns = ["simulated", "device_class", "description", "total_bytes", "used_bytes", "free_bytes", "usage"]
    columns += ["rule", "selected", "errors"]
    records = [{c: getattr(r, c) for c in columns} | {"errors": "; ".join(r.errors)} for r in rows]
    frame = pd.DataFrame(records, columns=columns, index=pd.Index([r.name for r in rows], name="device"))
    return frame.rename(columns={"device_class": "class"})


# -- allocations by type ------------------------------------------------------------------
RSS_ROW = "this process (RSS)"


def allocations(device: Device) -> dict[str, int]:
    """This process's OpenVINO allocations on ``device`` by type (GPU map keys; NPU one figure)."""
    if device.memory_error is not None:
        return {}
    if device.device_class is DeviceClass.GPU:
        return {str(k): int(v) for k, v in sorted(device.memory_breakdown.items())}
    if device.device_class is DeviceClass.NPU:
        return {"npu_alloc": device.used_bytes}
    return {}


# -- history ------------------------------------------------------------------------------
class MemoryHistory:
    """A rolling, thread-safe buffer of live used bytes per device (NaN = unknown)."""

    def __init__(self, maxlen: int = 600) -> None:
        if not isinstance(maxlen, int) or maxlen < 2:
            raise ValueError(f"history length {maxlen!r}: expected an integer of at least 2 samples")
        self.maxlen = maxlen
        self.devices: tuple[str, ...] = ()
        self._rows: deque[list[float]] = deque(maxlen=maxlen)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._rows)

    def record(self, snapshot: Snapshot) -> None:
        """Append one sample (a failed snapshot is skipped; a new device set starts afresh)."""
        if snapshot.error is not None:
            return
        names = tuple(d.name for d in snapshot.devices)
        row = [snapshot.time] + [
            math.nan if d.live.used_bytes is None else float(d.live.used_bytes) for d in snapshot.devices
        ]
        with self._lock:
            if names != self.devices:
                self.devices = names
                self._rows.clear()
            self._rows.append(row)

    def array(self) -> np.ndarray:
        """``(n, 1 + devices)`` float64: epoch seconds, then used bytes per device."""
        with self._lock:
            return np.array(self._rows, dtype=float).reshape(len(self._rows), 1 + len(self.devices))

    def frame(self) -> pd.DataFrame:
        """Seconds since the first kept sample (index ``t_s``) x device -> used bytes."""
        import pandas as pd

        data = self.array()
        index = pd.Index(data[:, 0] - data[0, 0] if len(data) else [], name="t_s", dtype=float)
        return pd.DataFrame(data[:, 1:], index=index, columns=list(self.devices))


# -- what crosses the comm ----------------------------------------------------------------
def _num(value: float | None) -> float | None:
    return None if value is None else float(value)


WINDOWS_S: tuple[int, ...] = (10, 30, 60, 120, 300, 600, 1800, 3600)


def history_window(span_s: float) -> int:
    """The time-series window: the smallest of ``WINDOWS_S`` that holds ``span_s`` seconds."""
    return next((w for w in WINDOWS_S if w >= span_s), WINDOWS_S[-1])


META_FIELDS = ("name", "description", "simulated", "rule", "explain")  #: sent once per device set


class LiveModel:
    """Turns snapshots into the live views' payload, keeping the history and the axes' state."""

    def __init__(self) -> None:
        self.history = MemoryHistory()
        self.history_axes: dict[str, Axis] = {}
        self.breakdown_axis: Axis | None = None
        self.kinds: tuple[str, ...] = ()
        self.rows: list[DeviceRow] = []
        self.snapshot: Snapshot | None = None
        self.seq = 0

    def update(self, snapshot: Snapshot) -> tuple[dict[str, Any], dict[str, Any]]:
        """``(meta, tick)`` for ``snapshot`` (the history records it)."""
        self.snapshot = snapshot
        self.history.record(snapshot)
        self.rows = device_rows(snapshot)
        allocs = [allocations(d) for d in snapshot.devices]
        kinds = tuple(sorted({k for a in allocs for k in a}))
        self.kinds = kinds
        meta = self.meta()
        data = self.history.array()
        axes = []
        for j, row in enumerate(self.rows):
            column = data[:, 1 + j] if len(data) else np.array([])
            finite = column[np.isfinite(column)]
            top = float(finite.max()) if finite.size else 0.0
            axis = next_axis(top, self.history_axes.get(row.name))
            self.history_axes[row.name] = axis
            axes.append(axis.as_list())
        bars = [[float(a.get(k, 0)) for k in kinds] for a in allocs]
        rss = snapshot.rss_bytes or 0
        self.breakdown_axis = next_axis(max([sum(b) for b in bars] + [float(rss)]), self.breakdown_axis)
        self.seq += 1
        tick = {
            "seq": self.seq,
            "t": snapshot.time,
            "window_s": history_window(float(data[-1, 0] - data[0, 0]) if len(data) else 0.0),
            "selected": next((i for i, r in enumerate(self.rows) if r.selected), -1),
            "devices": [
                [_num(r.total_bytes), _num(r.used_bytes), _num(r.free_bytes), unit_for(r.total_bytes or 0)[1]]
                for r in self.rows
            ],
            "history_axes": axes,
            "breakdown": bars,
            "breakdown_axis": self.breakdown_axis.as_list(),
            "rss": float(rss),
            "error": snapshot.error,
        }
        return meta, tick

    def meta(self) -> dict[str, Any]:
        """Names, descriptions and rules: what changes only with the device set."""
        snap = self.snapshot
        return {
            "devices": [
                {k: getattr(r, k) for k in META_FIELDS} | {"cls": r.device_class, "errors": list(r.errors)}
                for r in self.rows
            ],
            "kinds": list(self.kinds),
            "rss_label": RSS_ROW,
            "units": [list(u) for u in UNITS],
            "simulated": bool(snap and snap.simulated),
        }

    # -- the same figures for static images and tests ---------------------------------------
    def breakdown_frame(self) -> pd.DataFrame:
        """Allocations by type per device (bytes), plus this process's RSS as its own row."""
        import pandas as pd

        snap = self.snapshot
        records = [
            {"row": d.name, "kind": k, "bytes": v}
            for d in (snap.devices if snap else ())
            for k, v in allocations(d).items()
        ]
        if snap is not None and snap.rss_bytes is not None:
            records.append({"row": RSS_ROW, "kind": "rss", "bytes": snap.rss_bytes})
        return pd.DataFrame(records, columns=["row", "kind", "bytes"])
