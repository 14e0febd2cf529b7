"""``MemoryView``: the browser-drawn live panels (an anywidget; the ES module ships in the package).
Only numbers cross the comm on a refresh (``tick``, the history as float64 bytes); names and rules
go in ``meta`` when the device set changes, so a refresh costs one small message."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import anywidget
import traitlets

from ovkit.widgets.data import LiveModel, Snapshot

STATIC = Path(__file__).parent / "static"
#: The stylesheet of :class:`MemoryView` (the saved pictures of the live views embed it).
STYLESHEET = STATIC / "memory_view.css"
PANELS: tuple[str, ...] = ("table", "bars", "breakdown", "history")
MAX_DRAWN_CHARS = 2_000_000  # a drawn copy larger than this is not kept (a few devices: ~50 kB)


def check_panels(panels: Any) -> list[str]:
    """``panels`` as a list, or a ValueError naming the unknown ones."""
    chosen = [panels] if isinstance(panels, str) else list(panels)
    unknown = [p for p in chosen if p not in PANELS]
    if unknown or not chosen:
        raise ValueError(f"panels {chosen!r}: expected a non-empty selection of {', '.join(PANELS)}")
    return chosen


class MemoryView(anywidget.AnyWidget):
    """The device table, memory bars, allocation breakdown and time series, drawn by the browser."""

    _esm = STATIC / "memory_view.js"
    _css = STYLESHEET
    panels = traitlets.List(traitlets.Unicode(), help="which panels to draw, in order").tag(sync=True)
    meta = traitlets.Dict(help="device names, rules and units (changes with the device set)").tag(sync=True)
    tick = traitlets.Dict(help="the figures of the latest refresh (numbers only)").tag(sync=True)
    history = traitlets.Bytes(b"", help="float64 rows: epoch seconds, used bytes per device").tag(sync=True)

    def __init__(
        self,
        panels: Any = PANELS,
        model: LiveModel | None = None,
        on_drawn: Callable[[], None] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(panels=check_panels(panels), **kwargs)
        self.model = model if model is not None else LiveModel()
        self.drawn_html = ""  # what a browser last drew (its outerHTML), for the saved picture
        self._on_drawn = on_drawn
        self.on_msg(self._on_custom_msg)

    def _on_custom_msg(self, _widget: Any, content: Any, _buffers: Any) -> None:
        """The browser sends what it drew (throttled); keep it and tell the owner."""
        if not isinstance(content, dict) or content.get("kind") != "drawn":
            return
        html = content.get("html")
        if isinstance(html, str) and 0 < len(html) <= MAX_DRAWN_CHARS:
            self.drawn_html = html
            if self._on_drawn is not None:
                self._on_drawn()

    def show(self, snapshot: Snapshot) -> None:
        """Send ``snapshot``'s figures to the browser (one message; meta only when it changed)."""
        meta, tick = self.model.update(snapshot)
        with self.hold_sync():
            if meta != self.meta:
                self.meta = meta
            if "history" in self.panels:
                self.history = self.model.history.array().tobytes()
            self.tick = tick
