"""Live device table: one row per device, memory with a usage bar, the selected device highlighted.
The browser draws it; the HTML and text below are its fallbacks (nbconvert, ``print``)."""

from __future__ import annotations

from ovkit.layouts import LAYOUTS
from ovkit.memory import MIB
from ovkit.report import Report
from ovkit.widgets._html import STYLE, error_box, esc, usage_bar
from ovkit.widgets.controls import LiveView
from ovkit.widgets.data import DeviceRow

COLUMNS: tuple[str, ...] = (
    "Device", "Class", "Description", "Total MiB", "Used MiB", "Free MiB", "Usage", "Rule",
)  # fmt: skip


def mib_text(nbytes: int | None) -> str:
    """Whole MiB with thousands separators (as ``--list-devices`` floors them), or "unknown"."""
    return "unknown" if nbytes is None else f"{nbytes // MIB:,}"


def _usage_text(r: DeviceRow) -> str:
    return "unknown" if r.usage is None else f"{r.usage:.0%}"


def _name_cell(row: DeviceRow) -> str:
    tags = ""
    if row.selected:
        tags += '<span class="ovkit-tag ovkit-tag-sel">selected</span>'
    if row.simulated:
        tags += '<span class="ovkit-tag ovkit-tag-sim">simulated</span>'
    return f"{esc(row.name)}{tags}"


def caption(simulated: bool) -> str:
    what = "SIMULATED device set (ovkit.simulate)" if simulated else "OpenVINO devices"
    return f"{what} — layout: seed ({LAYOUTS['seed'].title})"  # the live views list the seed's devices


def render_table_html(rows: list[DeviceRow], *, simulated: bool = False, error: str | None = None) -> str:
    """The table as HTML: escaped runtime strings, a usage bar, selected row and errors inline."""
    head = "".join(f"<th>{esc(c)}</th>" for c in COLUMNS)
    body = []
    for r in rows:
        cls = "ovkit-row ovkit-selected" if r.selected else "ovkit-row"
        body.append(
            f'<tr class="{cls}" data-device="{esc(r.name)}">'
            f"<td>{_name_cell(r)}</td><td>{esc(r.device_class)}</td><td>{esc(r.description)}</td>"
            f'<td class="num">{mib_text(r.total_bytes)}</td><td class="num">{mib_text(r.used_bytes)}</td>'
            f'<td class="num">{mib_text(r.free_bytes)}</td>'
            f"<td>{usage_bar(r.usage or 0.0, r.explain)} <small>{_usage_text(r)}</small></td>"
            f'<td title="{esc(r.explain)}"><small>{esc(r.rule)}</small></td></tr>'
        )
        for e in r.errors:
            body.append(
                f'<tr class="ovkit-errrow" data-device="{esc(r.name)}"><td></td>'
                f'<td colspan="{len(COLUMNS) - 1}">&#9888; {esc(e)}</td></tr>'
            )
    if not rows:
        body.append(f'<tr><td colspan="{len(COLUMNS)}"><i>(no devices)</i></td></tr>')
    parts = [
        STYLE,
        f'<table class="ovkit-devtable"><caption style="text-align:left">{esc(caption(simulated))}</caption>',
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>",
    ]
    if error:
        parts.insert(1, error_box(error))
    return "".join(parts)


def render_table_text(rows: list[DeviceRow], *, simulated: bool = False, error: str | None = None) -> str:
    """The table as fixed-width text (``print`` and non-HTML front ends), under its caption."""
    header = ("", "Device", "Class", "Total MiB", "Used MiB", "Free MiB", "Usage", "Rule", "Description")
    lines = tuple(
        (
            "*" if r.selected else "",
            r.name + (" (sim)" if r.simulated else ""),
            r.device_class,
            mib_text(r.total_bytes),
            mib_text(r.used_bytes),
            mib_text(r.free_bytes),
            _usage_text(r),
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
    return str(Report(caption(simulated), header, lines, tuple(notes)))


class DeviceTable(LiveView):
    """The live device table (refreshes itself every ``interval`` seconds unless ``auto_refresh=False``)."""

    kind = "device-table"
    panels = ("table",)

    @property
    def selected(self) -> str | None:
        return next((r.name for r in self.rows if r.selected), None)

    def fallback_html(self) -> str:
        return render_table_html(self.rows, simulated=self._simulated(), error=self.error)

    def fallback_text(self) -> str:
        return render_table_text(self.rows, simulated=self._simulated(), error=self.error)
