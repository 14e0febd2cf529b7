"""How busy each device is: the change of a busy counter over the change of an elapsed one between
two readings (CPU: ``/proc/stat``; Intel GPUs: DRM fdinfo; Intel NPU: ``npu_busy_time_us``).
Readers take the filesystem root and say "not available here" and why when their files are absent."""

from __future__ import annotations

import glob
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path("/")

#: DRM drivers whose fdinfo carries per-client engine counters ovkit reads.
DRM_DRIVERS = ("i915", "xe")
NPU_DRIVERS = ("intel_vpu",)


@dataclass(frozen=True, slots=True)
class Reading:
    """Counters of one source at one moment: per key ``(busy, elapsed)`` in one unit each (the key
    names a group and a member: ``engine/client``); ``error`` says why there are none."""

    source: str
    counters: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    capacity: Mapping[str, float] = field(default_factory=dict)  # per group: units that can be busy
    error: str | None = None


def shares(prev: Reading, cur: Reading) -> dict[str, float]:
    """Busy share per group between two readings: the members present in both, summed, over the
    group's capacity, clamped to 0..1 (a group with no elapsed time is left out)."""
    out: dict[str, float] = {}
    for key, (busy, elapsed) in cur.counters.items():
        before = prev.counters.get(key)
        if before is None:
            continue
        d_busy, d_elapsed = busy - before[0], elapsed - before[1]
        if d_elapsed <= 0 or d_busy < 0:  # no time passed, or a counter that was reset
            continue
        group = key.split("/", 1)[0]
        out[group] = out.get(group, 0.0) + d_busy / d_elapsed
    return {g: min(1.0, max(0.0, v / cur.capacity.get(g, 1.0))) for g, v in out.items()}


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="ascii", errors="replace")
    except OSError:
        return None


def _link(path: Path) -> str:
    """Where a symbolic link points ("" when it cannot be read)."""
    try:
        return os.readlink(path)
    except OSError:
        return ""


# -- CPU ---------------------------------------------------------------------------------------
def read_cpu(root: Path = ROOT, now: float | None = None) -> Reading:
    """``/proc/stat`` (the whole machine) and ``/proc/self/stat`` (this process)."""
    source = "/proc/stat, /proc/self/stat"
    stat = _read(root / "proc" / "stat")
    if stat is None:
        return Reading(source, error=f"not available here: no {root / 'proc' / 'stat'}")
    lines = stat.splitlines()
    fields = lines[0].split() if lines else []
    if not fields or fields[0] != "cpu" or len(fields) < 5:
        return Reading(source, error=f"not available here: unexpected /proc/stat line {lines[:1]!r}")
    jiffies = [float(x) for x in fields[1:9]]  # user nice system idle iowait irq softirq steal
    total = sum(jiffies)
    idle = jiffies[3] + (jiffies[4] if len(jiffies) > 4 else 0.0)
    counters = {"system": (total - idle, total)}
    n_cpu = sum(1 for line in lines[1:] if line.startswith("cpu")) or (os.cpu_count() or 1)
    own = _read(root / "proc" / "self" / "stat")
    if own is not None and ")" in own:
        after = own[own.rfind(")") + 2 :].split()  # field 3 (state) onwards
        ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        cpu_s = (float(after[11]) + float(after[12])) / ticks  # utime, stime (fields 14, 15)
        wall = time.monotonic() if now is None else now
        counters["process"] = (cpu_s, wall * n_cpu)
    return Reading(source, counters)


# -- Intel GPUs: DRM fdinfo --------------------------------------------------------------------
def _bound(base: Path, prefix: str, drivers: tuple[str, ...]) -> list[tuple[Path, str]]:
    """The entries ``prefix*`` of a sysfs class (connectors like ``card0-DP-1`` left out) whose
    device is bound to one of ``drivers``, with that driver, sorted."""
    entries = sorted(p for p in map(Path, glob.glob(os.path.join(base, prefix + "*"))) if "-" not in p.name)
    bound = ((entry, os.path.basename(_link(entry / "device" / "driver"))) for entry in entries)
    return [(entry, driver) for entry, driver in bound if driver in drivers]


def _number(value: str) -> float | None:
    head = value.split()[0] if value.split() else ""
    try:
        return float(head)
    except ValueError:
        return None


def read_drm_clients(root: Path = ROOT, now: float | None = None) -> dict[str, Reading]:
    """Per Intel GPU (PCI address): each DRM client's engine counters from fdinfo, by engine class.

    Only processes whose fdinfo this user may read are seen (all of one's own; others' need
    ptrace rights, as for intel_gpu_top)."""
    drm = _bound(root / "sys" / "class" / "drm", "card", DRM_DRIVERS)  # the cards bound to i915 or xe
    cards = {os.path.basename(os.path.realpath(card / "device")): driver for card, driver in drm}
    if not cards:
        return {}
    wall_ns = (time.monotonic() if now is None else now) * 1e9
    found: dict[str, dict[str, tuple[float, float]]] = {pdev: {} for pdev in cards}
    capacity: dict[str, dict[str, float]] = {pdev: {} for pdev in cards}
    # glob skips what it cannot list (others' fds, a process that just exited)
    for fd in map(Path, glob.glob(os.path.join(root, "proc", "[0-9]*", "fd", "*"))):
        if not _link(fd).startswith("/dev/dri/"):
            continue
        text = _read(fd.parent.parent / "fdinfo" / fd.name)
        fields = (line.partition(":") for line in (text or "").splitlines())
        info = {key.strip(): value.strip() for key, sep, value in fields if sep}
        pdev, client = info.get("drm-pdev", ""), info.get("drm-client-id", "")
        if info.get("drm-driver") not in DRM_DRIVERS or pdev not in found or not client:
            continue
        for key, value in info.items():
            n = _number(value)
            if n is None:
                continue
            if key.startswith("drm-engine-capacity-"):
                capacity[pdev][key.removeprefix("drm-engine-capacity-")] = n
            elif key.startswith("drm-engine-"):  # i915: busy ns of the class
                found[pdev][f"{key.removeprefix('drm-engine-')}/{client}"] = (n, wall_ns)
            elif key.startswith("drm-cycles-"):  # xe: busy cycles over the GPU's total cycles
                engine = key.removeprefix("drm-cycles-")
                total = _number(info.get(f"drm-total-cycles-{engine}", ""))
                if total is not None:
                    found[pdev][f"{engine}/{client}"] = (n, total)
    return {
        pdev: Reading(f"DRM fdinfo ({cards[pdev]} {pdev})", found[pdev], capacity[pdev]) for pdev in cards
    }


# -- Intel NPU: sysfs busy time ----------------------------------------------------------------
def read_npu(root: Path = ROOT, now: float | None = None) -> list[Reading]:
    """Each intel_vpu accelerator's ``npu_busy_time_us`` (``/sys/class/accel``), in device order."""
    wall_us = (time.monotonic() if now is None else now) * 1e6
    out = []
    for accel, _driver in _bound(root / "sys" / "class" / "accel", "accel", NPU_DRIVERS):
        path = accel / "device" / "npu_busy_time_us"
        text = _read(path)
        busy = _number(text) if text else None
        source = f"{path.relative_to(root)}"
        if busy is None:
            out.append(Reading(source, error=f"not available here: {source} unreadable"))
        else:
            out.append(Reading(source, {"npu/busy": (busy, wall_us)}))
    return out


# -- per device --------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Busy:
    """How busy one device was over the last interval: ``share`` 0..1 (None: no figure, and
    ``source`` says why), the parts it is made of (``detail``), where it comes from."""

    device: str
    share: float | None
    source: str
    detail: Mapping[str, float] = field(default_factory=dict)
    simulated: bool = False

    @property
    def text(self) -> str:
        if self.share is None:
            if self.simulated:
                return "simulated: not measured"
            return "not available here" if self.source.startswith("not available") else "measuring"
        return f"{self.share:.0%}"

    @property
    def detail_text(self) -> str:
        return ", ".join(f"{k} {v:.0%}" for k, v in self.detail.items())


NOT_MEASURED_SIMULATED = "simulated device: no busy counter (its graphs run on this machine's CPU)"
NO_SOURCE = {
    "GPU": "no Intel GPU bound to i915/xe in /sys/class/drm",
    "NPU": "no intel_vpu device in /sys/class/accel",
}


class UtilisationMeter:
    """Keeps the last reading of each source and turns the next one into a :class:`Busy` per
    device, reading only the sources the devices need."""

    def __init__(self, root: Path | str = ROOT, clock: Callable[[], float] = time.monotonic) -> None:
        self.root = Path(root)
        self.clock = clock
        self._prev: dict[str, Reading] = {}
        self.sample(())  # the baseline: the first real sample measures from here

    def sample(self, devices: Sequence[Any]) -> list[Busy]:
        """One :class:`Busy` per device (``ovkit.devices.Device``-like: name, device_class,
        simulated), measured since the previous sample."""
        readings: dict[str, Reading] = {"cpu": read_cpu(self.root, self.clock())}
        real_classes = {str(d.device_class) for d in devices if not d.simulated}
        if "GPU" in real_classes or not devices:
            readings |= {f"gpu:{p}": r for p, r in read_drm_clients(self.root, self.clock()).items()}
        if "NPU" in real_classes or not devices:
            readings |= {f"npu:{i}": r for i, r in enumerate(read_npu(self.root, self.clock()))}
        # the real GPUs and NPUs, in device order, pair with the sources in PCI / accel order
        keys = {c: iter(sorted(k for k in readings if k.startswith(c.lower() + ":"))) for c in ("GPU", "NPU")}
        n_gpu_keys = sum(k.startswith("gpu:") for k in readings)
        n_gpus = sum(str(d.device_class) == "GPU" and not d.simulated for d in devices)
        paired = "" if n_gpus == n_gpu_keys == 1 else " (paired with the DRM cards in PCI order)"
        out = []
        for d in devices:
            cls = str(d.device_class)
            key = "cpu" if cls == "CPU" else None if d.simulated or cls not in keys else next(keys[cls], None)
            out.append(self._busy(d, readings, key, paired))
        self._prev = readings
        return out

    def _busy(self, d: Any, readings: Mapping[str, Reading], key: str | None, paired: str) -> Busy:
        """One device's figure from the reading under ``key`` (None: no source for it)."""
        cls, cpu = str(d.device_class), str(d.device_class) == "CPU"
        if d.simulated and not cpu:
            return Busy(d.name, None, NOT_MEASURED_SIMULATED, simulated=True)
        if cls not in NO_SOURCE and not cpu:
            return Busy(d.name, None, f"not available here: no busy counter for class {cls}")
        if key is None:
            return Busy(d.name, None, f"not available here: {NO_SOURCE[cls]}")
        cur, prev = readings[key], self._prev.get(key)
        if cur.error is not None:
            return Busy(d.name, None, cur.error, simulated=d.simulated)
        parts = shares(prev, cur) if prev is not None else {}
        if cpu:
            detail = {"this process": parts["process"]} if "process" in parts else {}
            where = "; this machine's CPU, where the simulated devices run" if d.simulated else ""
            return Busy(d.name, parts.get("system"), cur.source + where, detail, simulated=d.simulated)
        share = max(parts.values()) if parts else None
        if share is None and prev is not None and not cur.counters:
            share = 0.0  # a GPU no process has a DRM client on: idle
        return Busy(d.name, share, cur.source + (paired if cls == "GPU" else ""), parts)


def busy_frame(busy: Sequence[Busy]) -> Any:
    """The readings as a DataFrame indexed by device: share (0..1 or None), detail, source."""
    import pandas as pd

    rows = [(b.share, b.text, b.detail_text, b.source, b.simulated) for b in busy]
    columns = ["share", "shown", "detail", "source", "simulated"]
    return pd.DataFrame(rows, columns=columns, index=pd.Index([b.device for b in busy], name="device"))
