"""``ovkit.dashboard()``: selector, live device table, allocation charts and op explorer together."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, MutableMapping
from contextlib import AbstractContextManager
from typing import Any

import ipywidgets as widgets

from ovkit.widgets._html import FallbackReprMixin, esc
from ovkit.widgets._refresh import DEFAULT_INTERVAL_S, Refresher
from ovkit.widgets.charts import AllocationCharts
from ovkit.widgets.controls import RefreshControls, close_parts
from ovkit.widgets.data import Snapshot, error_text, take_snapshot
from ovkit.widgets.device_table import DeviceTable
from ovkit.widgets.selector import DeviceSelector, SelectorState


class Dashboard(FallbackReprMixin, widgets.VBox):
    """One refresh thread feeds the table and the charts; the selector re-renders the table at once."""

    def __init__(
        self,
        core: Any = None,
        *,
        interval: float = DEFAULT_INTERVAL_S,
        auto_refresh: bool = True,
        charts: bool = True,
        op_explorer: bool = True,
        env: MutableMapping[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        self.core = core
        self.env = env
        self._lock = threading.RLock()
        self.snapshot: Snapshot | None = None
        self.table = DeviceTable(core, auto_refresh=False, env=env)
        self.charts = AllocationCharts(core, auto_refresh=False, env=env) if charts else None
        self.explorer = _make_explorer(core, self.quiet) if op_explorer else None
        self.selector = DeviceSelector(core, env=env, on_change=self._on_select)
        self.refresher = Refresher(
            self.refresh, interval, on_error=self._show_error, name=f"ovkit-dashboard-{id(self):x}"
        )
        self.controls = RefreshControls(self.refresher)
        title = "ovkit dashboard" + (" — simulated devices" if getattr(core, "simulated", False) else "")
        self.title = widgets.HTML(value=f"<h3>{esc(title)}</h3>")
        self.accordion: widgets.Accordion | None = None
        children: list[widgets.Widget] = [
            self.title,
            self.controls,
            self.selector,
            self.table,
        ]
        if self.charts is not None:
            children.append(self.charts)
        if self.explorer is not None:
            self.accordion = widgets.Accordion(children=[self.explorer])
            self.accordion.set_title(0, "Op explorer")
            children.append(self.accordion)
        super().__init__(children, **kwargs)
        self.add_class("ovkit-dashboard")
        self.refresher.tick()
        if auto_refresh:
            self.refresher.start()

    def refresh(self) -> None:
        """One snapshot for every view: the table and the charts (and the history) update in place."""
        snapshot = take_snapshot(self.core, self.env)
        with self._lock:
            self.snapshot = snapshot
            self.table.update(snapshot)
            if self.charts is not None:
                self.charts.update(snapshot)
        r = self.refresher
        self.controls.set_status(
            f"{'paused' if r.paused else 'live'} · tick {r.ticks + 1} · last refresh {r.last_duration_s * 1000:.0f} ms"
        )

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
        # The table follows the selection right away; the charts catch up on the next tick.
        if hasattr(self, "table"):
            self.table.update(take_snapshot(self.core, self.env))
        explorer = getattr(self, "explorer", None)
        select = getattr(explorer, "device_select", None)
        if select is not None and state.device in select.options:
            select.value = (state.device,)  # the explorer runs where the backend would

    def _show_error(self, exc: BaseException) -> None:
        self.controls.status.value = (
            f'<span class="ovkit-error">refresh failed: {esc(error_text(exc))}</span>'
        )

    def _fallback_html(self) -> str:
        parts = [self.selector._fallback_html(), self.table._fallback_html()]
        if self.charts is not None:
            parts.append(self.charts._fallback_html())
        return "<div>" + "".join(parts) + "</div>"

    def _fallback_text(self) -> str:
        parts = [self.selector._fallback_text(), self.table._fallback_text()]
        if self.charts is not None:
            parts.append(self.charts._fallback_text())
        return "\n\n".join(parts)

    def close(self) -> None:
        """Stop the refresh thread and close every part."""
        close_parts(self, "controls", "selector", "table", "charts", "explorer", "accordion", "title")
        super().close()


def _make_explorer(core: Any, quiet: Callable[[], AbstractContextManager[Any]]) -> widgets.Widget | None:
    """The op explorer when the op catalogue is installed; None otherwise (the dashboard omits it)."""
    try:
        from ovkit.widgets.op_explorer import OpExplorer
    except ImportError:
        return None
    try:
        return OpExplorer(core, quiet=quiet)
    except Exception as exc:
        return widgets.HTML(
            value=f'<span class="ovkit-error">op explorer unavailable: {esc(error_text(exc))}</span>'
        )


def dashboard(core: Any = None, *, interval: float = DEFAULT_INTERVAL_S, **kwargs: Any) -> Dashboard:
    """The ovkit dashboard for ``core`` (default: this machine's OpenVINO devices)."""
    return Dashboard(core, interval=interval, **kwargs)
