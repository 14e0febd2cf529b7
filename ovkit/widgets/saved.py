"""The saved picture: every ovkit widget is followed by a plain-HTML copy of what it shows, kept
current (``update_display``), so a reopened notebook (no widget model) still shows it; CSS shows
exactly one of the two."""

from __future__ import annotations

import base64
import contextlib
import time
import uuid
from typing import Any

import ipywidgets as widgets

from ovkit.escape import html_attr as esc
from ovkit.report import Reported

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
SAVED_CLASS = "ovkit-saved"

# The widget output is the one right before its saved picture.  It is drawn when its renderer holds
# a widget view (a child with the class jupyter-widgets); before that it says "Loading widget...",
# and without a model "Error displaying widget: model not found" (text, no child).
_CHILD = ".jp-OutputArea-child"
_DRAWN = ":has(> .jp-OutputArea-output > .jupyter-widgets)"
SAVED_CSS = (
    f"{_CHILD}{_DRAWN} + {_CHILD}:has(.{SAVED_CLASS}) {{display: none;}}\n"
    f"{_CHILD}:not({_DRAWN}):has(+ {_CHILD} .{SAVED_CLASS}) {{display: none;}}\n"
    f".{SAVED_CLASS} > .ovkit-saved-caption {{color: var(--jp-ui-font-color2, #616161);}}\n"
)


def close_parts(owner: widgets.Widget) -> None:
    """Stop ``owner.refresher``, then close every widget held in ``owner``'s attributes and under
    them, but not ``owner`` itself (it may run twice: ipywidgets calls close() from ``__del__``)."""
    refresher = getattr(owner, "refresher", None)
    if refresher is not None:
        refresher.stop()
    seen: set[int] = set()
    stack: list[Any] = [owner]
    while stack:
        w = stack.pop()
        if id(w) in seen:
            continue
        seen.add(id(w))
        values = [getattr(w, key, None) for key in w.keys] + (list(vars(w).values()) if w is owner else [])
        for value in values:
            if isinstance(value, dict):  # parts by name (the explorer's shape boxes)
                value = list(value.values())
            parts = value if isinstance(value, tuple | list) else (value,)
            stack += [v for v in parts if isinstance(v, widgets.Widget)]
        if w is not owner and w.comm is not None:
            w.close()


class SavedPictureMixin(Reported):
    """Displays the widget, then its saved picture, each under a display id: :meth:`save_picture`
    brings the picture up to date, :meth:`retire` puts it in the widget's place for good.  Its
    :meth:`report` is its text and HTML (for ``print``, nbconvert, front ends without widgets)."""

    _shown: list[tuple[str, str]]  # (widget output, saved picture) display ids, per display

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        try:
            bundle = dict(super()._repr_mimebundle_(**kwargs) or {})  # type: ignore[misc]
        except Exception:  # no widget front end (or a test harness that forbids it)
            bundle = {}
        bundle["text/plain"] = str(self)
        bundle["text/html"] = self._repr_html_()
        return bundle | self.png_bundle()

    def png_bundle(self) -> dict[str, str]:
        """A chart's static image (``to_png``) for nbconvert/papermill outputs, else nothing."""
        to_png = getattr(self, "to_png", None)
        return {"image/png": base64.b64encode(to_png()).decode("ascii")} if callable(to_png) else {}

    def saved_html(self) -> str:
        """The picture to save: the widget's report (live views: what the browser drew)."""
        return self._repr_html_()

    def _saved_style(self) -> str:
        """CSS the saved picture needs when no widget of its kind is drawn on the page."""
        return ""

    def _picture(self, caption: str, saved: bool = True) -> dict[str, Any]:
        css = (SAVED_CSS if saved else "") + self._saved_style()
        return {
            "text/plain": f"{caption}\n{self}",
            "text/html": (
                f"<div class='{SAVED_CLASS if saved else 'ovkit-frozen'}'><style>{css}</style>"
                f"<small class='ovkit-saved-caption'>{esc(caption)}</small>{self.saved_html()}</div>"
            ),
        }

    def _ipython_display_(self, **kwargs: Any) -> None:
        from IPython.display import display

        widget = widgets.Widget._repr_mimebundle_(self)
        if not widget or WIDGET_MIME not in widget:
            display(self._repr_mimebundle_(), raw=True)  # no widget front end: the fallback only
            return
        ids = (uuid.uuid4().hex, uuid.uuid4().hex)
        self._shown = [*getattr(self, "_shown", []), ids]
        note = f"{type(self).__name__}: a live widget; the output after it is its saved picture"
        display({WIDGET_MIME: widget[WIDGET_MIME], "text/plain": note}, raw=True, display_id=ids[0])
        display(self._saved_bundle(), raw=True, display_id=ids[1])

    def _saved_bundle(self) -> dict[str, Any]:
        return self._picture(
            f"saved picture of this {type(self).__name__}, as drawn at {time.strftime('%H:%M:%S')}; "
            "its kernel is gone: run the cell again for the live widget"
        )

    def _update(self, index: int, bundle: dict[str, Any]) -> None:
        from IPython.display import update_display

        for ids in getattr(self, "_shown", []):
            with contextlib.suppress(Exception):  # no kernel to send to (a plain script)
                update_display(bundle, raw=True, display_id=ids[index])

    def save_picture(self) -> None:
        """Bring every saved picture of this widget up to date (:meth:`saved_html`)."""
        if getattr(self, "_shown", None):
            self._update(1, self._saved_bundle())

    def retire(self, caption: str) -> None:
        """Replace each displayed widget by its picture under ``caption`` (and empty its saved
        picture): the page and the saved notebook keep that state without a widget model."""
        if not getattr(self, "_shown", None):
            return
        self._update(0, self._picture(caption, saved=False) | self.png_bundle())
        self._update(1, {"text/html": ""})

    def close(self) -> None:
        """Stop the widget's refresh thread (if any), then close it and every widget it holds."""
        close_parts(self)
        super().close()  # type: ignore[misc]
