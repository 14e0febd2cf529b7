"""The devices the installed backend registers, exactly as ``ggml_backend_dev_*`` reports them.

Read in a child process (:mod:`ovkit.upstream.isolate`).  :func:`format_list_devices` prints
what ``llama-bench --list-devices`` prints with this build: llama.cpp's
``common_print_available_devices`` skips devices of type CPU and writes each other one as
``  <name>: <description> (<total> MiB, <free> MiB free)`` with floor division by 1 MiB.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from ovkit.memory import MIB
from ovkit.upstream.isolate import Isolated, call_once

if TYPE_CHECKING:
    import pandas as pd


class UpstreamCallError(RuntimeError):
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
