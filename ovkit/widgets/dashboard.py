"""``ovkit.dashboard()``: selector, the live panels (table, bars, allocations, time series), how
busy each device is (``ovkit.utilisation``), the fit view (``ovkit check``), op explorer."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, MutableMapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import ipywidgets as widgets

from ovkit.report import png_img
from ovkit.runtime import Core
from ovkit.utilisation import Busy, UtilisationMeter, busy_frame
from ovkit.widgets._html import STYLE, esc, html_table, usage_bar
from ovkit.widgets._refresh import DEFAULT_INTERVAL_S
from ovkit.widgets.charts import AllocationCharts
from ovkit.widgets.data import Snapshot, error_text
from ovkit.widgets.device_table import render_table_html, render_table_text
from ovkit.widgets.fit import FitView
from ovkit.widgets.live import PANELS
from ovkit.widgets.selector import DeviceSelector, SelectorState

if TYPE_CHECKING:
    import pandas as pd


class Dashboard(AllocationCharts):
    """One refresh thread feeds every panel (the charts' and the table); the selector moves the
    table's highlight at once."""

    kind = "dashboard"
    panels = PANELS

    def __init__(
        self,
        *,
        core: Core | None = None,
        interval: float = DEFAULT_INTERVAL_S,
        auto_refresh: bool = True,
        charts: bool = True,
        op_explorer: bool = True,
        env: MutableMapping[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        self._lock = threading.RLock()
        self.meter = UtilisationMeter()
        self.busy: list[Busy] = []
        self.busy_panel = widgets.HTML(value="")
        if not charts:
            self.panels = ("table",)
        super().__init__(core=core, env=env, interval=interval, auto_refresh=auto_refresh, **kwargs)
        self.explorer = _make_explorer(self.quiet, core=core) if op_explorer else None
        self.fit = FitView(core=core)  # will a GGUF run on these devices, and what will it take
        self.selector = DeviceSelector(env=env, on_change=self._on_select, core=core)
        title = "ovkit dashboard" + (" — SIMULATED devices" if getattr(core, "simulated", False) else "")
        self.title = widgets.HTML(value=f"<h3>{esc(title)}</h3>")
        sections = {"Will it run here? (ovkit check)": self.fit, "Op explorer": self.explorer}
        shown = {name: w for name, w in sections.items() if w is not None}
        self.accordion = widgets.Accordion(children=list(shown.values()), titles=tuple(shown))
        self.children = [self.title, self.controls, self.selector, self.view, self.busy_panel, self.accordion]

    def update(self, snapshot: Snapshot) -> None:
        with self._lock:
            super().update(snapshot)
            if snapshot.error is None:
                self.busy = self.meter.sample(snapshot.devices)
                self.busy_panel.value = render_busy_html(self.busy)

    def busy_text(self) -> str:
        """The busy panel as text: one line per device (figure, parts, source)."""
        return render_busy_text(self.busy)

    def busy_frame(self) -> pd.DataFrame:
        """How busy each device was over the last refresh interval (share 0..1, None = no figure)."""
        return busy_frame(self.busy)

    @contextlib.contextmanager
    def quiet(self) -> Iterator[None]:
        """Pause the live refresh (and let a running tick finish) for the duration of the block."""
        was_paused = self.refresher.paused
        self.refresher.pause()
        with self._lock:  # waits for a refresh that is under way
            pass
        try:
            yield
        finally:
            if not was_paused:
                self.refresher.resume()

    def _on_select(self, state: SelectorState) -> None:
        # The highlight follows the selection right away (not on the next tick).
        self.refresh()
        explorer = getattr(self, "explorer", None)
        select = getattr(explorer, "device_select", None)
        if select is not None and state.device in select.options:
            select.value = (state.device,)  # the explorer runs where the backend would

    def fallback_html(self, drawn: str = "") -> str:
        """Selector, view (``drawn``: what the browser last drew of it, else rendered here) and busy panel."""
        if not drawn:
            drawn = render_table_html(self.rows, simulated=self._simulated(), error=self.error)
            if "history" in self.panels:
                drawn += png_img(self.to_png(), "memory charts")
        parts = [self.selector.fallback_html(), drawn, render_busy_html(self.busy)]
        return "<div>" + "".join(parts) + "</div>"

    def saved_html(self) -> str:
        """The selector's state, what the browser last drew, and the busy panel."""
        return self.fallback_html(self.view.drawn_html)

    def fallback_text(self) -> str:
        parts = [
            self.selector.fallback_text(),
            render_table_text(self.rows, simulated=self._simulated(), error=self.error),
            render_busy_text(self.busy),
        ]
        return "\n\n".join(parts)


BUSY_TITLE = "busy over the last refresh interval"


def render_busy_html(busy: list[Busy]) -> str:
    """The utilisation panel: a bar and a figure per device, its parts and source (or why none)."""
    rows = [(b.device + (" (sim)" if b.simulated else ""), b.text, b.detail_text, b.source) for b in busy]
    table = html_table(["device", "busy", "parts", "source"], rows, "ovkit-devtable ovkit-busy")
    bars = "".join(
        f"<div>{esc(b.device)} {usage_bar(b.share, b.source)}</div>" for b in busy if b.share is not None
    )
    return f"{STYLE}<div class='ovkit-busy-panel'><b>{esc(BUSY_TITLE)}</b>{bars}{table}</div>"


def render_busy_text(busy: list[Busy]) -> str:
    """The utilisation panel as text, one line per device."""
    lines = [f"[{BUSY_TITLE}]"]
    for b in busy:
        parts = f" ({b.detail_text})" if b.detail_text else ""
        lines.append(f"  {b.device}: {b.text}{parts} · {b.source}")
    return "\n".join(lines)


def _make_explorer(quiet: Callable[[], AbstractContextManager[Any]], *, core: Core | None) -> widgets.Widget:
    """The op explorer (imported on use: the op catalogue is heavy), or why it could not be built."""
    from ovkit.widgets.op_explorer import OpExplorer

    try:
        return OpExplorer(quiet=quiet, core=core)
    except Exception as exc:
        return widgets.HTML(
            value=f'<span class="ovkit-error">op explorer unavailable: {esc(error_text(exc))}</span>'
        )


def dashboard(*, core: Core | None = None, interval: float = DEFAULT_INTERVAL_S, **kwargs: Any) -> Dashboard:
    """The ovkit dashboard for ``core`` (default: this machine's OpenVINO devices); re-running the
    cell replaces the dashboard it showed before (its refresh thread stops)."""
    return Dashboard(core=core, interval=interval, **kwargs)
