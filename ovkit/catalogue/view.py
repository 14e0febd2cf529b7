"""The catalogue at a glance: op × status counts and their heatmap.

Statuses, as a person reads them: ``upstream-accepted`` (the backend accepts the case and ovkit
passes it), ``ovkit-only`` (the backend refuses it, ovkit runs and passes it), ``not supported``
(refused and not run, ``policy="upstream"``), ``not translatable`` (ovkit has no builder or
translation yet), ``FAIL`` and ``no case`` (no case builder).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes

CATEGORIES = ("upstream-accepted", "ovkit-only", "not supported", "not translatable", "FAIL", "no case")
COLOURS = ("#2e7d32", "#81c784", "#bbbbbb", "#f0c419", "#d62728", "#ffffff")


def category(status: str, accepted: bool) -> str:
    if status == "OK":
        return "upstream-accepted" if accepted else "ovkit-only"
    return status


def coverage(results: pd.DataFrame) -> pd.DataFrame:
    """Rows per op and category (columns in :data:`CATEGORIES` order), most rows first."""
    import pandas as pd

    cats = [category(s, bool(a)) for s, a in zip(results["status"], results["accepted"], strict=True)]
    t = pd.crosstab(results["op"], pd.Series(cats, index=results.index, name="status"))
    t = t.reindex(columns=list(CATEGORIES), fill_value=0)
    return t.loc[t.sum(axis=1).sort_values(ascending=False).index]


def plot_coverage(ax: Axes, table: pd.DataFrame) -> None:
    """Heatmap op × category: colour = share of the op's rows, text = row count."""
    import numpy as np
    from matplotlib.colors import LinearSegmentedColormap

    counts = table.to_numpy()
    share = counts / np.maximum(1, counts.sum(axis=1, keepdims=True))
    ax.imshow(share, cmap=LinearSegmentedColormap.from_list("share", ["#ffffff", "#1f4e99"]),
              vmin=0, vmax=1, aspect="auto")  # fmt: skip
    for i, j in zip(*np.nonzero(counts), strict=True):
        ax.text(j, i, str(counts[i, j]), ha="center", va="center", fontsize=6,
                color="white" if share[i, j] > 0.55 else "black")  # fmt: skip
    ax.set_yticks(
        range(len(table.index)), [f"{op} ({int(n)})" for op, n in table.sum(axis=1).items()], fontsize=6
    )
    ax.set_xticks(range(len(table.columns)), list(table.columns), fontsize=7, rotation=30, ha="left")
    ax.xaxis.tick_top()
    ax.set_title("test-backend-ops catalogue: rows per op and status (colour: share of the op's rows)",
                 fontsize=8, pad=40)  # fmt: skip
