"""Live device table: one row per device, memory with a usage bar, the selected device highlighted."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import ipywidgets as widgets

from ovkit.widgets._html import STYLE, error_box, esc, usage_bar
from ovkit.widgets._refresh import DEFAULT_INTERVAL_S
from ovkit.widgets.controls import LiveView, close_parts
from ovkit.widgets.data import DeviceRow, Snapshot, device_rows, error_text, rows_frame

if TYPE_CHECKING:
    import pandas as pd

COLUMNS: tuple[str, ...] = ("Device", "Class", "Description", "Total MiB", "Used MiB", "Free MiB", "Usage")


def _name_cell(row: DeviceRow) -> str:
    tags = ""
    if row.selected:
        tags += '<span class="ovkit-tag ovkit-tag-sel">selected</span>'
    if row.simulated:
        tags += '<span class="ovkit-tag ovkit-tag-sim">simulated</span>'
    return f"{esc(row.name)}{tags}"


def render_table_html(rows: list[DeviceRow], *, simulated: bool = False, error: str | None = None) -> str:
    """The table as HTML: escaped runtime strings, a usage bar, selected row and errors inline."""
    head = "".join(f"<th>{esc(c)}</th>" for c in COLUMNS)
    body = []
    for r in rows:
        cls = "ovkit-row ovkit-selected" if r.selected else "ovkit-row"
        body.append(
            f'<tr class="{cls}" data-device="{esc(r.name)}">'
            f"<td>{_name_cell(r)}</td><td>{esc(r.device_class)}</td><td>{esc(r.description)}</td>"
            f'<td class="num">{r.total_mib:,}</td><td class="num">{r.used_mib:,}</td>'
            f'<td class="num">{r.free_mib:,}</td>'
            f"<td>{usage_bar(r.usage, r.usage_label)} <small>{esc(r.usage_label)}</small></td></tr>"
        )
        for e in r.errors:
            body.append(
                f'<tr class="ovkit-errrow" data-device="{esc(r.name)}"><td></td>'
                f'<td colspan="{len(COLUMNS) - 1}">&#9888; {esc(e)}</td></tr>'
            )
    if not rows:
        body.append(f'<tr><td colspan="{len(COLUMNS)}"><i>(no devices)</i></td></tr>')
    caption = "simulated device set" if simulated else "OpenVINO devices"
    parts = [
        STYLE,
        f'<table class="ovkit-devtable"><caption style="text-align:left">{esc(caption)}</caption>',
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>",
    ]
    if error:
        parts.insert(1, error_box(error))
    return "".join(parts)


def render_table_text(rows: list[DeviceRow], *, simulated: bool = False, error: str | None = None) -> str:
    """The table as fixed-width text (``print`` and non-HTML front ends)."""
    header = ("", "Device", "Class", "Total MiB", "Used MiB", "Free MiB", "Usage", "Description")
    lines = [
        (
            "*" if r.selected else "",
            r.name + (" (sim)" if r.simulated else ""),
            r.device_class,
            f"{r.total_mib:,}",
            f"{r.used_mib:,}",
            f"{r.free_mib:,}",
            f"{r.usage:.0%}",
            r.description,
        )
        for r in rows
    ]
    widths = [
        max(len(h), *(len(line[i]) for line in lines)) if lines else len(h) for i, h in enumerate(header)
    ]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    out = [fmt.format(*header).rstrip()] + [fmt.format(*line).rstrip() for line in lines]
    for r in rows:
        out += [f"  ! {r.name}: {e}" for e in r.errors]
    if not rows:
        out.append("  (no devices)")
    if simulated:
        out.append("(simulated device set; * = selected)")
    if error:
        out.append(f"refresh error: {error}")
    return "\n".join(out)


class DeviceTable(LiveView):
    """The live device table (refreshes itself every ``interval`` seconds unless ``auto_refresh=False``)."""

    def __init__(
        self,
        core: Any = None,
        *,
        interval: float = DEFAULT_INTERVAL_S,
        auto_refresh: bool = True,
        env: Mapping[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        self.rows: list[DeviceRow] = []
        self.snapshot: Snapshot | None = None
        self.error: str | None = None
        self._lock = threading.RLock()
        self.table_html = widgets.HTML(value="")
        super().__init__(
            [self.table_html],
            core=core,
            env=env,
            interval=interval,
            auto_refresh=auto_refresh,
            css_class="ovkit-device-table",
            **kwargs,
        )

    # -- data -----------------------------------------------------------------------------
    def update(self, snapshot: Snapshot) -> None:
        """Show ``snapshot``; a failed snapshot keeps the last rows and shows the error above them."""
        with self._lock:
            if snapshot.error is not None:
                self.error = f"refresh failed at {time.strftime('%H:%M:%S')}: {snapshot.error}"
            else:
                self.error = None
                self.snapshot = snapshot
                self.rows = device_rows(snapshot)
            self._render()

    def to_frame(self) -> pd.DataFrame:
        """The rows currently shown, as a DataFrame."""
        return rows_frame(self.rows)

    @property
    def selected(self) -> str | None:
        return next((r.name for r in self.rows if r.selected), None)

    # -- view -----------------------------------------------------------------------------
    def _simulated(self) -> bool:
        return bool(self.snapshot and self.snapshot.simulated)

    def _render(self) -> None:
        self.table_html.value = render_table_html(self.rows, simulated=self._simulated(), error=self.error)
        r = self.refresher
        self.controls.set_status(
            f"{'paused' if r.paused else 'live'} · {len(self.rows)} devices · refresh {r.last_duration_s * 1000:.1f} ms"
        )

    def _show_error(self, exc: BaseException) -> None:
        with self._lock:
            self.error = f"refresh failed at {time.strftime('%H:%M:%S')}: {error_text(exc)}"
            self._render()

    def _fallback_html(self) -> str:
        return render_table_html(self.rows, simulated=self._simulated(), error=self.error)

    def _fallback_text(self) -> str:
        return render_table_text(self.rows, simulated=self._simulated(), error=self.error)

    def close(self) -> None:
        """Stop the refresh thread, then close the widgets."""
        close_parts(self, "controls", "table_html")
        super().close()
