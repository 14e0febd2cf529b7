"""Small HTML pieces shared by the widgets; every runtime string goes through ``esc``
(:func:`ovkit.escape.html_attr`, right both between tags and in a quoted attribute value)."""

from __future__ import annotations

import base64
from collections.abc import Iterable
from typing import Any

from ovkit.escape import html_attr as esc

# Usage colours as data (gpuwidget's info/warning/danger at 50/80 %).
USAGE_COLOURS: tuple[tuple[float, str], ...] = ((0.8, "#d9534f"), (0.5, "#f0ad4e"), (0.0, "#5cb85c"))
SELECTED_BG = "#fff3bf"

STYLE = f"""<style>
.ovkit-devtable {{border-collapse: collapse; font-family: sans-serif; font-size: 13px;}}
.ovkit-devtable th, .ovkit-devtable td {{padding: 3px 8px; border-bottom: 1px solid #ddd; text-align: left;}}
.ovkit-devtable td.num {{text-align: right; font-variant-numeric: tabular-nums;}}
.ovkit-devtable tr.ovkit-selected td {{background: {SELECTED_BG}; font-weight: bold;}}
.ovkit-devtable tr.ovkit-errrow td {{color: #a94442; font-size: 12px; border-bottom: 1px solid #ddd;}}
.ovkit-tag {{font-size: 10px; padding: 1px 4px; border-radius: 3px; margin-left: 4px; font-weight: normal;}}
.ovkit-tag-sel {{background: #1c7ed6; color: white;}}
.ovkit-tag-sim {{background: #e9ecef; color: #495057; border: 1px dashed #868e96;}}
.ovkit-bar {{display: inline-block; width: 120px; height: 10px; background: #eee; vertical-align: middle;}}
.ovkit-bar > div {{height: 100%;}}
.ovkit-error {{color: #a94442; font-family: monospace; white-space: pre-wrap;}}
.ovkit-warn {{color: #8a6d3b;}}
</style>"""


def usage_bar(fraction: float, title: str = "") -> str:
    """A CSS bar filled to ``fraction`` (0..1)."""
    pct = max(0.0, min(1.0, fraction)) * 100
    colour = next(c for limit, c in USAGE_COLOURS if fraction >= limit)
    return (
        f'<span class="ovkit-bar" title="{esc(title)}">'
        f'<div style="width:{pct:.1f}%;background:{colour}"></div></span>'
    )


def html_table(
    header: Iterable[str], rows: Iterable[Iterable[Any]], css_class: str = "ovkit-devtable"
) -> str:
    """A plain escaped table (for fallbacks)."""
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{esc(css_class)}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def error_box(message: object) -> str:
    return f'<div class="ovkit-error">{esc(message)}</div>'


class FallbackReprMixin:
    """Adds text/html and text/plain to a widget's mime bundle, for print/nbconvert/non-widget UIs."""

    def fallback_html(self) -> str:
        """The widget as HTML, for a page without the widget front end."""
        raise NotImplementedError

    def fallback_text(self) -> str:
        """The widget as plain text (``print``, text exporters)."""
        raise NotImplementedError

    def _repr_html_(self) -> str:
        return self.fallback_html()

    def __str__(self) -> str:
        return self.fallback_text()

    def __repr__(self) -> str:
        return self.fallback_text()

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        try:
            bundle = dict(super()._repr_mimebundle_(**kwargs) or {})  # type: ignore[misc]
        except Exception:  # no widget front end (or a test harness that forbids it)
            bundle = {}
        bundle["text/plain"] = self.fallback_text()
        bundle["text/html"] = self.fallback_html()
        return bundle | self.png_bundle()

    def png_bundle(self) -> dict[str, str]:
        """A chart's static image (``to_png``) for nbconvert/papermill outputs, else nothing."""
        to_png = getattr(self, "to_png", None)
        return {"image/png": base64.b64encode(to_png()).decode("ascii")} if callable(to_png) else {}
