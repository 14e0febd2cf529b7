"""The devices the installed backend registers, as ``ggml_backend_dev_*`` reports them (read in a
child process), and the text ``llama-bench --list-devices`` prints for them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from ovkit.errors import OvkitError
from ovkit.memory import MIB
from ovkit.upstream.isolate import Isolated, call_once

if TYPE_CHECKING:
    import pandas as pd

    from ovkit.devices import Device


class UpstreamCallError(OvkitError, RuntimeError):
    """A call into the real backend crashed or failed; the message names the signal or error."""


@dataclass(frozen=True, slots=True)
class UpstreamDevice:
    """One ggml backend device (``ggml_backend_dev_get(index)``)."""

    index: int
    name: str
    description: str
    memory_free: int  #: bytes
    memory_total: int  #: bytes
    type: str  #: ``CPU``, ``GPU``, ``IGPU``, ``ACCEL`` (``enum ggml_backend_dev_type``)
    registry: str  #: the backend registry that owns it (``OpenVINO``, ``CPU``)

    def list_line(self) -> str:
        return f"  {self.name}: {self.description} ({self.memory_total // MIB} MiB, {self.memory_free // MIB} MiB free)"


def list_devices(worker: Isolated | None = None) -> list[UpstreamDevice]:
    """Every registered ggml device, in registration order (``UpstreamCallError`` on a crash)."""
    out = worker.call({"cmd": "devices"}) if worker is not None else call_once({"cmd": "devices"})
    if not out.ok:
        raise UpstreamCallError(f"listing the real backend's devices failed: {out.status} {out.detail}")
    return [UpstreamDevice(**d) for d in out.reply["devices"]]


def ggml_info(worker: Isolated | None = None) -> dict[str, str]:
    """The loaded ggml's ``ggml_version``, ``ggml_commit`` and backend ``registries``."""
    out = worker.call({"cmd": "info"}) if worker is not None else call_once({"cmd": "info"})
    if not out.ok:
        raise UpstreamCallError(f"reading the real backend's ggml version failed: {out.status} {out.detail}")
    return {**out.reply, "registries": ", ".join(out.reply["registries"])}


def format_list_devices(devices: Iterable[UpstreamDevice]) -> str:
    """The text ``llama-bench --list-devices`` prints (without the trailing newline)."""
    lines = ["Available devices:"]
    lines += [d.list_line() for d in devices if d.type != "CPU"] or ["  (none)"]
    return "\n".join(lines)


def device_frame(devices: Iterable[UpstreamDevice]) -> pd.DataFrame:
    """The devices as a DataFrame: the backend's fields, plus MiB as ``--list-devices`` shows them."""
    import pandas as pd

    rows = [
        {**asdict(d), "total_mib": d.memory_total // MIB, "free_mib": d.memory_free // MIB} for d in devices
    ]
    return pd.DataFrame(rows, columns=[*UpstreamDevice.__slots__, "total_mib", "free_mib"])


def compare_lists(ours: Sequence[Device], theirs: Sequence[UpstreamDevice]) -> pd.DataFrame:
    """ovkit's device list (what the list-devices PRD asks for) next to the installed backend's,
    one row per aspect that differs, with the reason (a DataFrame: aspect, ovkit, backend, why)."""
    import pandas as pd

    listed = [d for d in theirs if d.type != "CPU"]
    rows = [
        ("devices", ", ".join(d.name for d in ours), ", ".join(d.name for d in listed),
         "the installed backend registers one device whatever OpenVINO offers; the PRD asks for one "
         "per physical OpenVINO device"),
        ("names", ", ".join(d.name for d in ours), ", ".join(d.name for d in listed),
         "the backend names its device OPENVINO<index>; the PRD uses the exact OpenVINO id, which "
         "GGML_OPENVINO_DEVICE takes"),
        ("descriptions", "; ".join(d.description for d in ours), "; ".join(d.description for d in listed),
         "the backend prints OpenVINO's version description; the PRD each device's FULL_DEVICE_NAME"),
        ("memory (MiB total / free)", "; ".join(f"{d.name} {d.total_mib} / {d.free_mib}" for d in ours),
         "; ".join(f"{d.name} {d.memory_total // MIB} / {d.memory_free // MIB}" for d in listed),
         "the backend reports host RAM, all of it free, for any device; the PRD each device's own "
         "memory (CPU: RAM and what is available, GPU/NPU: the plugin's counters)"),
        ("ggml device type", "-", ", ".join(f"{d.name} {d.type}" for d in theirs),
         "the backend's device is of type GPU even on the CPU, which is why llama-bench lists it; "
         "ggml's own CPU device is skipped"),
    ]  # fmt: skip
    return pd.DataFrame(rows, columns=["aspect", "ovkit (the PRD)", "installed backend", "why they differ"])
