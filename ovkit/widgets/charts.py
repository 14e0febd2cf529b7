"""Allocation charts: memory bars, allocations by type and the time series, live in the browser
(``MemoryView``); matplotlib draws the same figures on the same axes as a static PNG."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

from ovkit.memory import format_bytes, unit_for
from ovkit.report import Report, figure_png
from ovkit.widgets.axes import Axis, fit_axis
from ovkit.widgets.controls import LiveView
from ovkit.widgets.data import RSS_ROW, LiveModel, rows_frame

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

USED, FREE = "#1976d2", "#e0e0e0"
KIND_COLOURS = ("#1976d2", "#388e3c", "#f57c00", "#90caf9", "#e57373", "#9e9e9e")


def _value_axis(ax: Axes, axis: Axis, horizontal: bool) -> None:
    ticks = axis.ticks()
    values, labels = [v for v, _ in ticks], [label for _, label in ticks]
    if horizontal:
        ax.set_xlim(0, axis.top)
        ax.set_xticks(values, labels)
        ax.set_xlabel(axis.unit)
    else:
        ax.set_ylim(0, axis.top)
        ax.set_yticks(values, labels)
        ax.set_ylabel(axis.unit)


def plot_bars(ax: Axes, model: LiveModel) -> None:
    """Used and free per device, each bar scaled to its own total (labels in its unit)."""
    ax.set_title("Memory per device (used / free)", fontsize=9, loc="left")
    names = [r.name for r in model.rows]
    for i, r in enumerate(model.rows):
        if r.total_bytes is None or r.used_bytes is None:
            ax.text(0.01, i, f"unknown: {r.explain[:60]}", va="center", fontsize=7)
            continue
        frac = r.used_bytes / r.total_bytes if r.total_bytes else 0.0
        ax.barh(i, frac, color=USED)
        ax.barh(i, 1 - frac, left=frac, color=FREE)
        unit = unit_for(r.total_bytes)
        ax.text(1.02, i, f"{format_bytes(r.used_bytes, unit)} of {format_bytes(r.total_bytes, unit)}",
                va="center", fontsize=7)  # fmt: skip
    ax.set_yticks(range(len(names)), names, fontsize=8)
    ax.set_xlim(0, 1.7)  # the value labels sit right of the bars, inside the axes
    ax.set_xticks([])
    ax.invert_yaxis()
    for side in ("top", "right", "bottom"):
        ax.spines[side].set_visible(False)


def plot_breakdown(ax: Axes, model: LiveModel) -> None:
    """This process's OpenVINO allocations by type per device, and its RSS, on one stable axis."""
    ax.set_title("This process: OpenVINO allocations by type, and RSS", fontsize=9, loc="left")
    frame = model.breakdown_frame().replace({"kind": {"rss": "process RSS"}})
    has_kinds = not frame.empty
    if not has_kinds:  # an empty row still shows where the figures will be
        frame.loc[0] = (RSS_ROW, "process RSS", 0)
    stacked = frame.pivot_table("bytes", "row", "kind", "sum", sort=False, fill_value=0)
    stacked = stacked.reindex(columns=frame["kind"].unique())
    colours: dict[Any, Any] = dict(zip(stacked.columns, itertools.cycle(KIND_COLOURS), strict=False))
    stacked.plot.barh(stacked=True, ax=ax, color=colours, width=0.8, legend=False, ylabel="")
    ax.invert_yaxis()
    _value_axis(ax, model.breakdown_axis or fit_axis(stacked.sum(axis=1).max()), horizontal=True)
    ax.tick_params(labelsize=7)
    if has_kinds:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)


def plot_history(ax: Axes, model: LiveModel, device: str) -> None:
    """Used bytes of one device over the kept history, on the axis the live view shows."""
    frame = model.history.frame()
    row = next((r for r in model.rows if r.name == device), None)
    ax.set_title(f"{device} · {row.rule if row else ''}", fontsize=8, loc="left")
    if device in frame.columns and len(frame):
        t = frame.index - frame.index[-1]
        ax.plot(t, frame[device], color=USED, linewidth=1.2, marker="." if len(frame) < 3 else None)
    _value_axis(ax, model.history_axes.get(device) or fit_axis(0), horizontal=False)
    ax.set_xlabel("seconds before now", fontsize=7)
    ax.tick_params(labelsize=7)


def static_figure(model: LiveModel, title: str = "") -> Figure:
    """The live panels as one matplotlib Figure (bars, breakdown, a time series per device)."""
    from matplotlib.figure import Figure

    devices = [r.name for r in model.rows]
    per_row = 3
    history_rows = max(1, -(-len(devices) // per_row))
    fig = Figure(figsize=(10, 2.6 + 2.0 * history_rows), dpi=80, layout="constrained")
    grid = fig.add_gridspec(1 + history_rows, per_row * 2)
    plot_bars(fig.add_subplot(grid[0, :per_row]), model)
    plot_breakdown(fig.add_subplot(grid[0, per_row:]), model)
    for k, device in enumerate(devices):
        r, c = divmod(k, per_row)
        plot_history(fig.add_subplot(grid[1 + r, 2 * c : 2 * c + 2]), model, device)
    if title:
        fig.suptitle(title, fontsize=10, x=0.01, ha="left")
    return fig


def chart_title(model: LiveModel) -> str:
    snap = model.snapshot
    if snap is not None and snap.simulated:
        return "SIMULATED device set (ovkit.simulate): everything runs on this host's CPU"
    return "OpenVINO devices of this machine"


class AllocationCharts(LiveView):
    """The memory bars, allocations by type and time series, live (drawn by the browser)."""

    kind = "charts"
    panels: tuple[str, ...] = ("bars", "breakdown", "history")

    def frames(self) -> dict[str, pd.DataFrame]:
        """The figures the panels draw: memory bars, allocations by type, the history (bytes)."""
        return {
            "bars": rows_frame(self.rows)[["used_bytes", "free_bytes", "total_bytes", "simulated", "rule"]],
            "breakdown": self.model.breakdown_frame(),
            "history": self.history.frame(),
        }

    def to_png(self) -> bytes:
        """The panels as a static PNG (matplotlib, same axes as the live view)."""
        return figure_png(static_figure(self.model, chart_title(self.model)))

    def report(self) -> Report:
        """The figures the panels show, and the panels as a picture (drawn only for HTML)."""
        memory = tuple(
            (r.name, format_bytes(r.used_bytes), format_bytes(r.total_bytes), r.rule) for r in self.model.rows
        )
        this_process = tuple(
            f"{row} · {'process RSS' if kind == 'rss' else kind}: {format_bytes(nbytes)}"
            for row, kind, nbytes in self.model.breakdown_frame().itertuples(index=False, name=None)
        )
        error = (f"error: {self.error}",) if self.error else ()
        notes = (*error, *this_process, f"history: {len(self.history.frame())} samples kept")
        title = f"Allocation charts ({chart_title(self.model)})"
        return Report(title, ("device", "used", "of", "rule"), memory, notes, self.to_png)


__all__ = ["AllocationCharts", "static_figure"]
