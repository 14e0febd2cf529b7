"""Refresh controls: a pause/resume toggle, an interval box and a status line for a ``Refresher``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import ipywidgets as widgets

from ovkit.widgets._html import FallbackReprMixin, esc
from ovkit.widgets._refresh import MIN_INTERVAL_S, Refresher
from ovkit.widgets.data import Snapshot, take_snapshot


def close_parts(owner: widgets.Widget, *names: str) -> None:
    """Stop ``owner.refresher``, then close the named parts and every widget under ``owner``
    (children, layouts, styles), but not ``owner`` itself.  Parts may be missing: __init__ may
    have failed early, and ipywidgets calls close() again from ``__del__``."""
    refresher = getattr(owner, "refresher", None)
    if refresher is not None:
        refresher.stop()
    roots: list[Any] = [owner]
    for name in names:
        part = getattr(owner, name, None)
        roots += list(part.values()) if isinstance(part, dict) else [part]
    seen: set[int] = set()
    stack = [w for w in roots if isinstance(w, widgets.Widget)]
    while stack:
        w = stack.pop()
        if id(w) in seen:
            continue
        seen.add(id(w))
        for key in w.keys:
            value = getattr(w, key, None)
            values = value if isinstance(value, tuple | list) else (value,)
            stack += [v for v in values if isinstance(v, widgets.Widget)]
        if w is not owner and w.comm is not None:
            w.close()


class RefreshControls(widgets.HBox):
    """Pause/resume and interval (seconds) for one refresher; errors in the interval box are shown."""

    def __init__(self, refresher: Refresher, **kwargs: Any) -> None:
        self.refresher = refresher
        self.pause_button = widgets.ToggleButton(
            value=refresher.paused,
            description="Paused" if refresher.paused else "Pause",
            icon="play" if refresher.paused else "pause",
            tooltip="pause or resume the live refresh",
            layout=widgets.Layout(width="100px"),
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

    def _on_pause(self, change: dict[str, Any]) -> None:
        if change["new"]:
            self.refresher.pause()
        else:
            self.refresher.resume()
        self.pause_button.description = "Paused" if change["new"] else "Pause"
        self.pause_button.icon = "play" if change["new"] else "pause"
        self.set_status("paused" if change["new"] else "live")

    def _on_interval(self, change: dict[str, Any]) -> None:
        try:
            self.refresher.interval = change["new"]
        except ValueError as exc:
            self.status.value = f'<span class="ovkit-error">{esc(exc)}</span>'

    def set_status(self, text: str) -> None:
        self.status.value = f"<small>{esc(text)}</small>"


class LiveView(FallbackReprMixin, widgets.VBox):
    """Base of a view fed by its own refresh thread: ``refresh()`` takes a snapshot and passes it
    to ``update()``; the controls sit above ``body`` unless ``auto_refresh=False``; the first
    tick runs at once."""

    def __init__(
        self,
        body: list[widgets.Widget],
        *,
        core: Any,
        env: Mapping[str, str] | None,
        interval: float,
        auto_refresh: bool,
        css_class: str,
        **kwargs: Any,
    ) -> None:
        self.core = core
        self.env = env
        self.refresher = Refresher(
            self.refresh, interval, on_error=self._show_error, name=f"{css_class}-{id(self):x}"
        )
        self.controls = RefreshControls(self.refresher)
        super().__init__([self.controls, *body] if auto_refresh else body, **kwargs)
        self.add_class(css_class)
        self.refresher.tick()
        if auto_refresh:
            self.refresher.start()

    def refresh(self) -> None:
        """Read the devices now and update the view in place."""
        self.update(take_snapshot(self.core, self.env))

    def update(self, snapshot: Snapshot) -> None:
        raise NotImplementedError

    def _show_error(self, exc: BaseException) -> None:
        raise NotImplementedError
