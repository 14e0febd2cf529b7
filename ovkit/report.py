"""Readable results, one format for every layer: small tables of formatted strings as text and HTML
(:class:`Report`), records displayed through one (:class:`Reported`), and :class:`FrameReport`."""

from __future__ import annotations

import base64
import io
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ovkit.escape import html_attr, html_text
from ovkit.memory import format_bytes

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

TIME_UNITS = (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6))


def format_duration(seconds: float) -> str:
    """A duration in the largest unit it reaches: ``1.25 s``, ``64.7 ms``, ``812 µs``."""
    unit, size = next(((u, s) for u, s in TIME_UNITS if abs(seconds) >= s), TIME_UNITS[-1])
    value = seconds / size
    return f"{value:,.{0 if abs(value) >= 100 else 1 if abs(value) >= 10 else 2}f} {unit}"


def format_share(fraction: float) -> str:
    """A fraction as a percentage: ``100.0 %``, ``37.5 %`` (never a bare ``1.0``)."""
    return f"{fraction * 100:.1f} %"


def format_rate(per_second: float, unit: str = "tok/s") -> str:
    """A rate with separators: ``1,234.5 tok/s`` (``–`` when nothing was timed)."""
    return f"{per_second:,.1f} {unit}" if math.isfinite(per_second) else f"– {unit}"


def figure_png(fig: Figure) -> bytes:
    """``fig`` as PNG bytes, drawn on an Agg canvas (no pyplot: safe off the main thread)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    if not isinstance(fig.canvas, FigureCanvasAgg):
        FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def png_img(png: bytes, alt: str) -> str:
    """An inline ``<img>`` for a PNG (a chart in an HTML result or fallback)."""
    if not png:
        return f"<p>{html_text(alt)}: no image</p>"
    return (
        f'<img alt="{html_attr(alt)}" src="data:image/png;base64,{base64.b64encode(png).decode("ascii")}"/>'
    )


#: How a column kind is shown; FrameReport's ``kinds`` name one per formatted column.
FORMATS: dict[str, Callable[[Any], str]] = {
    "bytes": format_bytes,
    "share": format_share,
    "seconds": format_duration,
    "count": lambda v: f"{int(v):,}",
    "bool": lambda v: "yes" if v else "no",
}


@dataclass(frozen=True, slots=True)
class Report:
    """A small table of already formatted strings, with a title and footnotes; in HTML also a
    picture (``png``, or the function drawing it: only the HTML draws it), and further reports
    (``parts``) below it: one record, shown as text or HTML."""

    title: str
    columns: tuple[str, ...] = ()
    rows: tuple[tuple[str, ...], ...] = ()
    notes: tuple[str, ...] = ()
    png: bytes | Callable[[], bytes] = b""
    parts: tuple[Report, ...] = ()

    def __str__(self) -> str:
        return "\n\n".join([self._text(), *map(str, self.parts)])

    def _text(self) -> str:
        if not self.columns:
            return "\n".join([self.title, *self.notes])
        widths = [max([len(c), *(len(r[i]) for r in self.rows)]) for i, c in enumerate(self.columns)]

        def line(cells: Sequence[str]) -> str:
            return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

        header = [line(self.columns)] if any(self.columns) else []  # a key-value table has none
        body = [*header, *(line(r) for r in self.rows)]
        return "\n".join([self.title, *body, *self.notes])

    __repr__ = __str__

    def _repr_html_(self) -> str:
        esc = html_text
        left = "style='text-align: left'"  # inline: JupyterLab right-aligns table cells
        head = "".join(f"<th {left}>{esc(c)}</th>" for c in self.columns)
        body = "".join("<tr>" + "".join(f"<td {left}>{esc(v)}</td>" for v in r) + "</tr>" for r in self.rows)
        thead = f"<thead><tr>{head}</tr></thead>" if any(self.columns) else ""
        table = f"<table>{thead}<tbody>{body}</tbody></table>" if self.columns else ""
        notes = "".join(f"<div class='ovkit-note'>{esc(n)}</div>" for n in self.notes)
        png = self.png() if callable(self.png) else self.png
        picture = png_img(png, self.title) if png else ""
        parts = "".join(p._repr_html_() for p in self.parts)
        return f"<div class='ovkit-report'><b>{esc(self.title)}</b>{table}{notes}{picture}{parts}</div>"

    def column(self, name: str) -> list[str]:
        i = self.columns.index(name)
        return [r[i] for r in self.rows]


class Reported:
    """Base of the records a cell displays through their :meth:`report` (text and HTML)."""

    __slots__ = ()

    def report(self) -> Report:
        raise NotImplementedError

    def __str__(self) -> str:
        return str(self.report())

    def __repr__(self) -> str:
        return str(self)

    def _repr_html_(self) -> str:
        return self.report()._repr_html_()


@dataclass(frozen=True, slots=True, repr=False)
class FrameReport(Reported):
    """A DataFrame of raw numbers shown with each column formatted by its kind (``kinds``: column ->
    a key of :data:`FORMATS`); ``labels`` rename, ``hidden`` columns are not shown."""

    title: str
    frame: pd.DataFrame
    kinds: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    hidden: tuple[str, ...] = ()
    empty: str = "(none)"
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        unknown = sorted(set(self.kinds.values()) - FORMATS.keys())
        if unknown:
            raise ValueError(f"unknown column kinds {unknown}; expected one of {sorted(FORMATS)}")

    def __len__(self) -> int:
        return len(self.frame)

    def report(self) -> Report:
        if self.frame.empty:
            return Report(self.title, (), (), (self.empty, *self.notes))
        shown = [c for c in self.frame.columns if c not in self.hidden]
        fmts = [FORMATS.get(self.kinds.get(c, ""), str) for c in shown]
        rows = tuple(
            tuple(fmt(v) or "–" for fmt, v in zip(fmts, values, strict=True))  # "–": nothing
            for values in self.frame[shown].itertuples(index=False, name=None)
        )
        return Report(self.title, tuple(self.labels.get(c, c) for c in shown), rows, self.notes)
