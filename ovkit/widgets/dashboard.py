"""``ovkit.dashboard()``: selector, the live panels (table, bars, allocations, time series), how
busy each device is (``ovkit.utilisation``), the fit view (``ovkit check``), op explorer."""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Callable, Iterator, MutableMapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import ipywidgets as widgets

from ovkit.escape import html_attr as esc
from ovkit.report import Report
from ovkit.runtime import Core
from ovkit.selection import Selection
from ovkit.utilisation import Busy, UtilisationMeter, busy_frame
from ovkit.widgets._refresh import DEFAULT_INTERVAL_S
from ovkit.widgets.charts import AllocationCharts
from ovkit.widgets.data import Snapshot, error_text
from ovkit.widgets.device_table import table_report
from ovkit.widgets.fit import FitView
from ovkit.widgets.live import PANELS
from ovkit.widgets.selector import DeviceSelector

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
        op_explorer: bool = True,
        env: MutableMapping[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        self._lock = threading.RLock()
        self.meter = UtilisationMeter()
        self.busy: list[Busy] = []
        self.busy_panel = widgets.HTML(value="")
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
                self.busy_panel.value = busy_report(self.busy)._repr_html_()

    def busy_text(self) -> str:
        """The busy panel as text: one line per device (figure, parts, source)."""
        return str(busy_report(self.busy))

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

    def _on_select(self, state: Selection | None) -> None:
        # The highlight follows the selection right away (not on the next tick).
        self.refresh()
        explorer = getattr(self, "explorer", None)
        select = getattr(explorer, "device_select", None)
        if select is not None and state is not None and state.device in select.options:
            select.value = (state.device,)  # the explorer runs where the backend would

    def report(self) -> Report:
        """Selector, device table (and charts) and busy panel."""
        table = table_report(self.rows, simulated=self._simulated(), error=self.error)
        table = dataclasses.replace(table, png=self.to_png)
        return Report("ovkit dashboard", parts=(self.selector.report(), table, busy_report(self.busy)))

    def saved_html(self) -> str:
        """The report, with what the browser last drew in place of the table and charts."""
        if not self.view.drawn_html:
            return self._repr_html_()
        selector = self.selector.report()._repr_html_()
        return f"<div>{selector}{self.view.drawn_html}{busy_report(self.busy)._repr_html_()}</div>"


def busy_report(busy: list[Busy]) -> Report:
    """The utilisation panel: each device's figure, its parts and source (or why none)."""
    rows = tuple(
        (b.device + (" (sim)" if b.simulated else ""), b.text, b.detail_text, b.source) for b in busy
    )
    return Report("busy over the last refresh interval", ("device", "busy", "parts", "source"), rows)


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
