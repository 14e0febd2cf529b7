"""Live device table: one row per device, memory with a usage bar, the selected device highlighted.
The browser draws it; its report is the fallback (nbconvert, ``print``)."""

from __future__ import annotations

from ovkit.layouts import LAYOUTS
from ovkit.memory import MIB
from ovkit.report import Report
from ovkit.widgets.controls import LiveView
from ovkit.widgets.data import DeviceRow


def mib_text(nbytes: int | None) -> str:
    """Whole MiB with thousands separators (as ``--list-devices`` floors them), or "unknown"."""
    return "unknown" if nbytes is None else f"{nbytes // MIB:,}"


def table_report(rows: list[DeviceRow], *, simulated: bool = False, error: str | None = None) -> Report:
    """The table under its caption (``*``: the selected device), each row's errors and a failed
    refresh in the notes."""
    header = ("", "Device", "Class", "Total MiB", "Used MiB", "Free MiB", "Usage", "Rule", "Description")
    lines = (
        (
            "*" if r.selected else "",
            r.name + (" (sim)" if r.simulated else ""),
            r.device_class,
            mib_text(r.total_bytes),
            mib_text(r.used_bytes),
            mib_text(r.free_bytes),
            "unknown" if r.usage is None else f"{r.usage:.0%}",
            r.rule,
            r.description,
        )
        for r in rows
    )
    notes = [f"  ! {r.name}: {e}" for r in rows for e in r.errors] + ([] if rows else ["  (no devices)"])
    if simulated:
        notes.append("(SIMULATED device set; * = selected)")
    if error:
        notes.append(f"refresh error: {error}")
    what = "SIMULATED device set (ovkit.simulate)" if simulated else "OpenVINO devices"
    title = f"{what} — layout: seed ({LAYOUTS['seed'].title})"  # the live views list the seed's devices
    return Report(title, header, tuple(lines), tuple(notes))


class DeviceTable(LiveView):
    """The live device table (refreshes itself every ``interval`` seconds unless ``auto_refresh=False``)."""

    kind = "device-table"
    panels = ("table",)

    @property
    def selected(self) -> str | None:
        return next((r.name for r in self.rows if r.selected), None)

    def report(self) -> Report:
        return table_report(self.rows, simulated=self._simulated(), error=self.error)
