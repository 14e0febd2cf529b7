"""Allocation charts (matplotlib): used vs free, GPU breakdown, ovkit's buffers, a live time series.

Figures are drawn with matplotlib's object API on an Agg canvas (no pyplot state, safe on the
refresh thread) and shown as PNG ``Image`` widgets updated in place.
"""

from __future__ import annotations

import io
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import ipywidgets as widgets

from ovkit.memory import MIB
from ovkit.widgets._html import error_box, png_img
from ovkit.widgets._refresh import DEFAULT_INTERVAL_S
from ovkit.widgets.controls import LiveView, close_parts
from ovkit.widgets.data import ChartData, MemoryHistory, Snapshot, chart_data, error_text

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

GIB = 1024.0  # MiB per GiB
USED, FREE = "#1c7ed6", "#dee2e6"


def _empty(ax: Axes, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="#868e96")
    ax.set_xticks([])
    ax.set_yticks([])


def _legend(ax: Axes) -> None:
    """The legend outside the axes, on the right (it never hides a bar or a line)."""
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, frameon=False)


def plot_usage(ax: Axes, frame: pd.DataFrame) -> None:
    """Horizontal stacked bars: used and free GiB per device."""
    ax.set_title("Used vs free per device")
    if frame.empty:
        _empty(ax, "no devices")
        return
    labels = [f"{d} (sim)" if s else str(d) for d, s in zip(frame["device"], frame["simulated"], strict=True)]
    used, free = frame["used_mib"] / GIB, frame["free_mib"] / GIB
    ax.barh(labels, used, color=USED, label="used")
    ax.barh(labels, free, left=used, color=FREE, label="free")
    ax.set_xlabel("GiB")
    ax.invert_yaxis()
    _legend(ax)


def _breakdown_table(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.pivot_table(index="device", columns="kind", values="mib", aggfunc="sum", fill_value=0)


def _breakdown_xmax(table: pd.DataFrame) -> float:
    """The x limit, set explicitly so a live update and a fresh drawing agree."""
    return max(1.0, float(table.sum(axis=1).max()) * 1.05)


def plot_gpu_breakdown(ax: Axes, frame: pd.DataFrame) -> None:
    """Stacked bars per GPU device by ``GPU_MEMORY_STATISTICS`` key (MiB)."""
    ax.set_title("GPU allocations by type")
    if frame.empty:
        _empty(ax, "no GPU allocations reported")
        return
    table = _breakdown_table(frame)
    left = [0.0] * len(table.index)
    for kind in table.columns:
        values = list(table[kind])
        ax.barh([str(i) for i in table.index], values, left=left, label=str(kind))
        left = [a + b for a, b in zip(left, values, strict=True)]
    ax.set_xlim(0, _breakdown_xmax(table))
    ax.set_xlabel("MiB")
    _legend(ax)


def plot_buffers(ax: Axes, frame: pd.DataFrame) -> None:
    """ovkit's own buffers: MiB per usage (weights / KV / compute), stacked by device."""
    ax.set_title("ovkit buffers by usage")
    if frame.empty:
        _empty(ax, "no ovkit buffers allocated")
        return
    table = frame.pivot_table(index="usage", columns="device", values="bytes", aggfunc="sum", fill_value=0)
    bottom = [0.0] * len(table.index)
    for device in table.columns:
        values = [v / MIB for v in table[device]]
        ax.bar([str(i) for i in table.index], values, bottom=bottom, label=str(device))
        bottom = [a + b for a, b in zip(bottom, values, strict=True)]
    ax.set_ylabel("MiB")
    _legend(ax)


def plot_history(ax: Axes, frame: pd.DataFrame) -> None:
    """Used memory per device over time (GiB; CPU is host RAM in use)."""
    ax.set_title("Used memory over time")
    if len(frame) < 1:
        _empty(ax, "waiting for samples")
        return
    for device in frame.columns:
        ax.plot(frame.index, frame[device] / GIB, label=str(device), marker="." if len(frame) < 3 else None)
    ax.set_xlabel("seconds")
    ax.set_ylabel("GiB")
    _legend(ax)


# The charts as data: name -> (ChartData field, plot function).
CHARTS: dict[str, tuple[str, Callable[[Any, Any], None]]] = {
    "usage": ("usage", plot_usage),
    "gpu_breakdown": ("gpu_breakdown", plot_gpu_breakdown),
    "buffers": ("buffers", plot_buffers),
    "history": ("history", plot_history),
}


def make_figure(name: str, frame: pd.DataFrame, size: tuple[float, float] = (5.6, 3.0)) -> Figure:
    """A standalone matplotlib Figure for chart ``name`` (notebooks can show or save it)."""
    from matplotlib.figure import Figure

    if name not in CHARTS:
        raise ValueError(f"unknown chart {name!r} (expected one of: {', '.join(CHARTS)})")
    fig = Figure(figsize=size, dpi=80)
    fig.subplots_adjust(left=0.19, right=0.8, top=0.88, bottom=0.17)
    CHARTS[name][1](fig.add_subplot(), frame)
    return fig


def figure_png(fig: Figure) -> bytes:
    """``fig`` as PNG bytes, drawn on an Agg canvas (no pyplot: safe off the main thread)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    if not isinstance(fig.canvas, FigureCanvasAgg):
        FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def render_png(name: str, frame: pd.DataFrame) -> bytes:
    """Chart ``name`` drawn to PNG bytes on an Agg canvas (thread-safe: no pyplot)."""
    return figure_png(make_figure(name, frame))


# -- live updates: move the artists of a kept figure instead of drawing a new one ------------
def _usage_key(frame: pd.DataFrame) -> Any:
    return ("usage", tuple(frame["device"]), tuple(frame["simulated"])) if len(frame) else None


def _update_usage(ax: Axes, frame: pd.DataFrame) -> None:
    used, free = list(frame["used_mib"] / GIB), list(frame["free_mib"] / GIB)
    used_bars, free_bars = ax.containers[0], ax.containers[1]
    for bar, u in zip(used_bars, used, strict=True):
        bar.set_width(u)
    for bar, u, f in zip(free_bars, used, free, strict=True):
        bar.set_x(u)
        bar.set_width(f)
    ax.relim()
    ax.autoscale_view()


def _history_key(frame: pd.DataFrame) -> Any:
    return ("history", tuple(frame.columns), len(frame) < 3) if len(frame) else None


def _update_history(ax: Axes, frame: pd.DataFrame) -> None:
    for line, device in zip(ax.get_lines(), frame.columns, strict=True):
        line.set_data(frame.index, frame[device] / GIB)
    ax.relim()
    ax.autoscale_view()


def _breakdown_key(frame: pd.DataFrame) -> Any:
    if frame.empty:
        return None
    table = _breakdown_table(frame)
    return ("gpu_breakdown", tuple(table.index), tuple(table.columns))


def _update_breakdown(ax: Axes, frame: pd.DataFrame) -> None:
    table = _breakdown_table(frame)
    left = [0.0] * len(table.index)
    for bars, kind in zip(ax.containers, table.columns, strict=True):
        values = [float(v) for v in table[kind]]
        for bar, x, w in zip(bars, left, values, strict=True):
            bar.set_x(x)
            bar.set_width(w)
        left = [a + b for a, b in zip(left, values, strict=True)]
    ax.set_xlim(0, _breakdown_xmax(table))


# name -> (structure key of a frame, in-place update); charts without an entry are redrawn.
LIVE_UPDATES: dict[str, tuple[Callable[[Any], Any], Callable[[Any, Any], None]]] = {
    "usage": (_usage_key, _update_usage),
    "gpu_breakdown": (_breakdown_key, _update_breakdown),
    "history": (_history_key, _update_history),
}


class LiveChart:
    """One chart's figure, kept between refreshes: while the structure (devices, series) stays
    the same only the artists move, which halves the cost of a live redraw."""

    def __init__(self, name: str) -> None:
        if name not in CHARTS:
            raise ValueError(f"unknown chart {name!r} (expected one of: {', '.join(CHARTS)})")
        self.name = name
        self.figure: Figure | None = None
        self.key: Any = None
        self.full_draws = 0

    def render(self, frame: pd.DataFrame) -> bytes:
        live = LIVE_UPDATES.get(self.name)
        key = live[0](frame) if live else None
        if live is None or key is None or key != self.key or self.figure is None:
            self.figure = make_figure(self.name, frame)
            self.key = key
            self.full_draws += 1
        else:
            live[1](self.figure.axes[0], frame)
        return figure_png(self.figure)


class AllocationCharts(LiveView):
    """The four allocation charts, live; unchanged data is not redrawn."""

    def __init__(
        self,
        core: Any = None,
        *,
        interval: float = DEFAULT_INTERVAL_S,
        auto_refresh: bool = True,
        history: MemoryHistory | None = None,
        env: Mapping[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        self.history = history if history is not None else MemoryHistory()
        self.data: ChartData | None = None
        self.error: str | None = None
        self.renders: dict[str, int] = dict.fromkeys(CHARTS, 0)
        self._pngs: dict[str, bytes] = {}
        self._drawn: dict[str, Any] = {}
        self._live = {name: LiveChart(name) for name in CHARTS}
        self._lock = threading.RLock()
        self.images = {
            name: widgets.Image(format="png", layout=widgets.Layout(width="448px")) for name in CHARTS
        }
        for name, image in self.images.items():
            image.add_class(f"ovkit-chart-{name}")
        self.error_html = widgets.HTML(value="")
        self.grid = widgets.GridBox(
            list(self.images.values()),
            layout=widgets.Layout(grid_template_columns="repeat(2, 470px)"),
        )
        super().__init__(
            [self.error_html, self.grid],
            core=core,
            env=env,
            interval=interval,
            auto_refresh=auto_refresh,
            css_class="ovkit-charts",
            **kwargs,
        )

    def update(self, snapshot: Snapshot) -> None:
        """Record ``snapshot`` in the history and redraw the charts whose data changed."""
        with self._lock:
            if snapshot.error is not None:
                self._show_error_text(f"refresh failed: {snapshot.error}")
                return
            self.history.record(snapshot)
            self.data = chart_data(snapshot, self.history)
            for name, (field_name, _) in CHARTS.items():
                frame = getattr(self.data, field_name)
                previous = self._drawn.get(name)
                if previous is not None and previous.equals(frame):
                    continue
                png = self._live[name].render(frame)
                self._pngs[name] = png
                self._drawn[name] = frame.copy()
                self.images[name].value = png
                self.renders[name] += 1
            self.error = "; ".join(self.data.notes) or None
            self.error_html.value = error_box(self.error) if self.error else ""

    def frames(self) -> dict[str, pd.DataFrame]:
        """The frames currently drawn, by chart name."""
        return {name: frame.copy() for name, frame in self._drawn.items()}

    def _show_error_text(self, text: str) -> None:
        self.error = text
        self.error_html.value = error_box(text)

    def _show_error(self, exc: BaseException) -> None:
        with self._lock:
            self._show_error_text(f"refresh failed: {error_text(exc)}")

    def _fallback_html(self) -> str:
        parts = [png_img(self._pngs.get(name, b""), name) for name in CHARTS]
        if self.error:
            parts.insert(0, error_box(self.error))
        return "<div>" + "".join(parts) + "</div>"

    def _fallback_text(self) -> str:
        lines = ["Allocation charts"]
        if self.error:
            lines.append(f"error: {self.error}")
        for name, frame in self._drawn.items():
            lines.append(f"[{name}]")
            lines.append(frame.tail(5).to_string() if len(frame) else "  (empty)")
        return "\n".join(lines)

    def close(self) -> None:
        """Stop the refresh thread, then close the widgets."""
        close_parts(self, "controls", "images", "error_html", "grid")
        super().close()


__all__ = ["CHARTS", "AllocationCharts", "LiveChart", "make_figure", "render_png"]
