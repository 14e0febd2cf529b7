"""Time per ggml op type, from OpenVINO's per-node counters of a model's prefill and decode runs.

A runtime node carries the ``<OP> 'name'`` labels of the nodes fused into it
(``originalLayersNames``); one with none is charged to the first labelled node downstream, else
to ``(OpenVINO)``.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from ovkit.report import format_duration

if TYPE_CHECKING:
    import pandas as pd

OTHER = "(OpenVINO)"


_LABEL = re.compile(r"^([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)?) (?:'|#)")  # "MUL_MAT 'Qcur-0'", "GLU.SWIGLU #7"


def _tag_of(names: str) -> str | None:
    for name in names.split(","):
        m = _LABEL.match(name.strip())
        if m:
            return m.group(1)
    return None


def op_labels(compiled: Any) -> dict[str, str]:
    """Runtime node name -> the ggml op it computes (see the module docstring)."""
    rt = compiled.get_runtime_model()
    labels: dict[str, str] = {}
    for node in reversed(rt.get_ordered_ops()):
        info = node.get_rt_info()
        names = str(info["originalLayersNames"]) if "originalLayersNames" in info else ""
        label = _tag_of(names + "," + node.get_friendly_name())
        if label is None:
            for out in node.outputs():
                for target in out.get_target_inputs():
                    label = labels.get(target.get_node().get_friendly_name())
                    if label not in (None, OTHER):
                        break
                if label not in (None, OTHER):
                    break
        labels[node.get_friendly_name()] = label or OTHER
    return labels


def op_times(model: Any, *, node_types: bool = False) -> pd.DataFrame:
    """Per graph and ggml op of a ``profiling=True`` model: summed µs of each bucket's last run,
    node count and share; ``node_types``: split by OpenVINO node type and kernel too."""
    import pandas as pd

    frames = []
    for shape, session in model.shaped_sessions():
        if session.runner.runs == 0:
            continue
        prof = session.profile()
        labels = op_labels(session.runner.graph.compiled)
        prof = prof[prof["status"] == "EXECUTED"].copy()
        prof["ggml_op"] = prof["node"].map(labels).fillna(OTHER)
        n_tokens, n_kv = shape.n_tokens, shape.n_kv
        graph = "decode" if n_tokens == 1 else "prefill"
        keys = ["ggml_op", "type", "exec_type"] if node_types else ["ggml_op"]
        grp = prof.groupby(keys, as_index=False).agg(time_us=("real_time_us", "sum"), nodes=("node", "count"))
        grp.insert(0, "graph", f"{graph} n_tokens={n_tokens} n_kv={n_kv}")
        grp["share"] = grp["time_us"] / max(grp["time_us"].sum(), 1e-9)
        frames.append(grp.sort_values("time_us", ascending=False))
    if not frames:
        raise RuntimeError("no profiled run yet: create the Model with profiling=True and run it")
    return pd.concat(frames, ignore_index=True)


def op_time_chart(times: pd.DataFrame) -> Any:
    """Horizontal bars per ggml op, one panel per graph; the axis unit (µs/ms/s) follows the
    panel's largest bar, each bar is labelled by its own magnitude."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    graphs = list(dict.fromkeys(times["graph"]))
    height = 0.35 * times["ggml_op"].nunique() + 1.5
    fig, grid = plt.subplots(1, len(graphs), figsize=(5.5 * len(graphs), height), squeeze=False)
    for a, graph in zip(grid[0], graphs, strict=True):
        sub = times[times["graph"] == graph].sort_values("time_us")
        top = float(sub["time_us"].max())
        unit, div = ("s", 1e6) if top >= 1e6 else ("ms", 1e3) if top >= 1e3 else ("µs", 1.0)
        bars = a.barh(sub["ggml_op"], sub["time_us"] / div, color="#3b75af")
        a.bar_label(bars, labels=[format_duration(v / 1e6) for v in sub["time_us"]], padding=3, fontsize=8)
        a.set_title(graph, fontsize=10)
        a.set_xlabel(f"time per run ({unit})")
        a.xaxis.set_major_locator(MaxNLocator(4))
        a.set_xlim(0, top / div * 1.35)
    fig.tight_layout()
    return fig
