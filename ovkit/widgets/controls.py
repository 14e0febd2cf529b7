"""Refresh controls: a pause/resume toggle, an interval box and a status line for a ``Refresher``."""

from __future__ import annotations

from typing import Any

import ipywidgets as widgets

from ovkit.widgets._html import esc
from ovkit.widgets._refresh import MIN_INTERVAL_S, Refresher


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
