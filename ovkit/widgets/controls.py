"""Refresh controls (pause/resume, interval, status line) and ``LiveView``, the base of the views
fed by their own refresh thread.  A stopped view leaves its last drawn picture in its place."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import ipywidgets as widgets

from ovkit.escape import html_attr as esc
from ovkit.runtime import Core
from ovkit.widgets._refresh import DEFAULT_INTERVAL_S, MIN_INTERVAL_S, Refresher, claim
from ovkit.widgets.data import (
    DeviceRow,
    LiveModel,
    MemoryHistory,
    Snapshot,
    error_text,
    rows_frame,
    take_snapshot,
)
from ovkit.widgets.live import PANELS, STYLESHEET, MemoryView
from ovkit.widgets.saved import SavedPictureMixin

if TYPE_CHECKING:
    import pandas as pd


#: The toggle's label and icon per refresher state.
BUTTON_OF_STATE = {
    "live": ("Pause", "pause"),
    "not started": ("Pause", "pause"),
    "paused": ("Paused", "play"),
    "stopped": ("Stopped", "stop"),
}


class RefreshControls(widgets.HBox):
    """Pause/resume and interval (seconds) for one refresher; errors in the interval box are shown."""

    def __init__(self, refresher: Refresher, **kwargs: Any) -> None:
        self.refresher = refresher
        self.pause_button = widgets.ToggleButton(
            tooltip="pause or resume the live refresh", layout=widgets.Layout(width="100px")
        )
        self.interval_box = widgets.BoundedFloatText(
            value=refresher.interval,
            min=MIN_INTERVAL_S,
            max=3600.0,
            step=0.1,
            description="every (s)",
            layout=widgets.Layout(width="170px"),
        )
        self.status = widgets.HTML(value="")
        self.pause_button.observe(self._on_pause, names="value")
        self.interval_box.observe(self._on_interval, names="value")
        super().__init__([self.pause_button, self.interval_box, self.status], **kwargs)
        self.add_class("ovkit-refresh-controls")
        self.show_state(refresher.state)

    def _on_pause(self, change: dict[str, Any]) -> None:
        if change["new"]:
            self.refresher.pause()
        else:
            self.refresher.resume()

    def show_state(self, state: str) -> None:
        """The toggle as the refresher is: Pause while live, Paused, Stopped (then disabled)."""
        label, icon = BUTTON_OF_STATE.get(state, BUTTON_OF_STATE["live"])
        stopped = state == "stopped"
        with self.pause_button.hold_trait_notifications():
            self.pause_button.unobserve(self._on_pause, names="value")
            self.pause_button.value = state == "paused"
            self.pause_button.observe(self._on_pause, names="value")
        self.pause_button.description, self.pause_button.icon = label, icon
        self.pause_button.disabled = self.interval_box.disabled = stopped

    def _on_interval(self, change: dict[str, Any]) -> None:
        try:
            self.refresher.interval = change["new"]
        except ValueError as exc:
            self.status.value = f'<span class="ovkit-error">{esc(exc)}</span>'

    def set_status(self, text: str) -> None:
        self.status.value = f"<small>{esc(text)}</small>"


class LiveView(SavedPictureMixin, widgets.VBox):
    """Base of a view fed by its own refresh thread (``refresh()``: a snapshot, shown by ``view``);
    it replaces the live view of its kind the same cell made."""

    kind = "view"
    panels: tuple[str, ...] = PANELS

    def __init__(
        self,
        *,
        core: Core | None = None,
        env: Mapping[str, str] | None = None,
        interval: float = DEFAULT_INTERVAL_S,
        auto_refresh: bool = True,
        **kwargs: Any,
    ) -> None:
        self.core = core
        self.env = env
        self.error: str | None = None
        self.view = MemoryView(self.panels, LiveModel(), on_drawn=self.save_picture)
        self.refresher = Refresher(
            self.refresh,
            interval,
            on_error=self._show_error,
            on_state=self._on_state,
            name=f"ovkit-{self.kind}-{id(self):x}",
        )
        self._last_drawn = ""
        self.controls = RefreshControls(self.refresher)
        super().__init__([self.controls, self.view] if auto_refresh else [self.view], **kwargs)
        self.add_class(f"ovkit-{self.kind}")
        self.refresher.tick()
        if auto_refresh:
            claim(self.kind, self)
            self.refresher.start()

    @property
    def model(self) -> LiveModel:
        return self.view.model

    @property
    def history(self) -> MemoryHistory:
        return self.view.model.history

    @property
    def rows(self) -> list[DeviceRow]:
        return self.view.model.rows

    @property
    def snapshot(self) -> Snapshot | None:
        return self.view.model.snapshot

    def _simulated(self) -> bool:
        return bool(self.snapshot and self.snapshot.simulated)

    def to_frame(self) -> pd.DataFrame:
        """The device rows currently shown (bytes; None = unknown)."""
        return rows_frame(self.rows)

    def refresh(self) -> None:
        """Read the devices now and update the view in place."""
        self.update(take_snapshot(self.env, core=self.core))

    def update(self, snapshot: Snapshot) -> None:
        """Show ``snapshot``; a failed one keeps the last figures and shows the error."""
        if snapshot.error is not None:
            self._show_error_text(f"refresh failed at {time.strftime('%H:%M:%S')}: {snapshot.error}")
            return
        self.error = None
        self.view.show(snapshot)
        self._last_drawn = time.strftime("%H:%M:%S")
        self._show_status()

    def _show_status(self) -> None:
        r = self.refresher
        took = f"refresh {r.last_duration_s * 1000:.1f} ms"
        if r.state == "stopped":
            took = f"last drawn {self._last_drawn or 'never'}"
        self.controls.set_status(f"{r.state} · {len(self.rows)} devices · {took}")

    def _on_state(self, state: str) -> None:
        self.controls.show_state(state)
        if self.error is None:
            self._show_status()
        if state == "stopped":
            self.freeze()

    def freeze(self) -> None:
        """Put the last drawn state in place of every output showing this view (done on stop)."""
        self.retire(f"{self.kind} stopped; the last state drawn ({self._last_drawn or 'never drawn'}):")

    def saved_html(self) -> str:
        """What the browser last drew (``MemoryView.drawn_html``), else the report."""
        return self.view.drawn_html or self._repr_html_()

    def _saved_style(self) -> str:
        return STYLESHEET.read_text(encoding="utf-8")  # the view's stylesheet

    def _show_error_text(self, text: str) -> None:
        self.error = text
        self.view.tick = {**self.view.tick, "error": text}
        self.controls.status.value = f'<span class="ovkit-error">{esc(text)}</span>'

    def _show_error(self, exc: BaseException) -> None:
        self._show_error_text(f"refresh failed at {time.strftime('%H:%M:%S')}: {error_text(exc)}")
