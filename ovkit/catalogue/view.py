"""The catalogue at a glance: op x status counts and their heatmap (passing cases split into
``upstream-accepted`` and ``ovkit-only``: those the backend refuses).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

CATEGORIES = (
    "upstream-accepted",
    "ovkit-only",
    "not supported",
    "not translatable",
    "FAIL",
    "no case",
)


def coverage(results: pd.DataFrame) -> pd.DataFrame:
    """Rows per op and category, most rows first, of a run (:func:`ovkit.catalogue.run.run`) or a
    classification (:func:`ovkit.catalogue.run.coverage_rows`: translatable counts as passing)."""
    import pandas as pd

    # a passing case is upstream-accepted or ovkit-only
    cats = [
        s if s != "OK" else "upstream-accepted" if a else "ovkit-only"
        for s, a in zip(results["status"], results["accepted"], strict=True)
    ]
    t = pd.crosstab(results["op"], pd.Series(cats, index=results.index, name="status"))
    t = t.reindex(columns=list(CATEGORIES), fill_value=0)
    return t.loc[t.sum(axis=1).sort_values(ascending=False).index]


def coverage_figure(table: pd.DataFrame) -> Figure:
    """Heatmap op x category of a :func:`coverage` table sized to it: colour = share of the op's
    rows, text = row count."""
    import numpy as np
    from matplotlib.colors import LinearSegmentedColormap
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.5, 0.9 + 0.13 * len(table)))
    ax = fig.add_subplot()
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
    fig.tight_layout()
    return fig
