"""Presentation for the walkthrough notebooks: each returns what a cell simply displays, a
:class:`Report` or a matplotlib ``Figure``, with figures formatted by magnitude (``16.0 MiB``)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ovkit.buffers import buffer_type, host_buffer_type
from ovkit.devices import Device, list_devices, physical_device_ids
from ovkit.escape import html_text
from ovkit.memory import format_bytes, process_rss_bytes, unit_for
from ovkit.report import Report, Reported, figure_png, format_duration, png_img
from ovkit.runtime import Core

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure


def _finished(fig: Figure) -> Figure:
    """``fig`` laid out and closed (a cell displays it once, as its result, not twice)."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    plt.close(fig)
    return fig


# -- devices and memory ------------------------------------------------------------------------
def memory_report(devices: Iterable[Device], title: str = "memory per device") -> Report:
    """Each device's ``--list-devices`` total and free beside the live used and free (the figures
    the table, bars, charts and fit check show), with the rule that produced them."""
    rows, notes = [], []
    for d in devices:
        live = d.live
        figures = [format_bytes(n) for n in (d.total_bytes, d.free_bytes, live.used_bytes, live.free_bytes)]
        rows.append(
            (d.name, str(d.device_class), *figures, live.rule.label if live.known else "unknown (see below)")
        )
        notes.append(f"{d.name}: {live.explain()}")
        if d.memory_breakdown:
            parts = ", ".join(f"{k} {format_bytes(v)}" for k, v in d.memory_breakdown.items())
            notes.append(f"{d.name}: OpenVINO allocations by type: {parts}")
        if d.memory_clamped:
            notes.append(f"{d.name}: allocations exceed the total, free clamped to 0")
    columns = ("device", "class", "list total", "list free", "used (live)", "free (live)", "rule")
    return Report(title, columns, tuple(rows), tuple(notes))


def memory_rules_report() -> Report:
    """Where each device class's total and used come from, and the formula (``MEMORY_RULES``)."""
    from ovkit.memory import MEMORY_RULES

    rows = tuple(
        (cls, r.total_property or "host RAM (sysconf)", r.used_property or "-", r.formula)
        for cls, r in MEMORY_RULES.items()
    )
    return Report("memory rules per device class", ("class", "total from", "used from", "formula"), rows)


def memory_chart(machines: Mapping[str, Sequence[Device]]) -> Figure:
    """Used and free memory per device (the live figures, ``Device.live``), one panel per machine
    on one shared axis; a device whose memory is unknown has no bar and says so."""
    import matplotlib.pyplot as plt

    largest = max((d.total_bytes for devs in machines.values() for d in devs), default=0)
    unit, size = unit_for(largest)
    fig, axes = plt.subplots(1, len(machines), figsize=(4.2 * len(machines), 2.8), squeeze=False)
    for ax, (title, devs) in zip(axes[0], machines.items(), strict=True):
        names = [d.name for d in devs]
        used = [(d.live.used_bytes or 0) / size for d in devs]
        free = [(d.live.free_bytes or 0) / size for d in devs]
        ax.barh(names, used, color="tab:red", label="used")
        ax.barh(names, free, left=used, color="tab:green", alpha=0.6, label="free")
        for y, d in enumerate(devs):
            if not d.live.known:
                ax.text(0, y, " unknown", va="center", fontsize=8, color="tab:gray")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel(unit)
        ax.set_xlim(0, largest / size * 1.05 or 1)
        ax.invert_yaxis()
    axes[0][0].legend(loc="lower right", fontsize=8)
    return _finished(fig)


# -- buffers -----------------------------------------------------------------------------------
def buffer_types_report(core: Core | None = None) -> Report:
    """Both buffer types of every physical device: kind, alignment and maximum size."""
    rows = [
        (bt.name, bt.device, str(bt.kind), format_bytes(bt.alignment), format_bytes(bt.max_size))
        for name in physical_device_ids(core)
        for bt in (buffer_type(name), host_buffer_type(name))
    ]
    return Report("buffer types", ("buffer type", "device", "kind", "alignment", "max size"), tuple(rows))


# -- per-node profiles -------------------------------------------------------------------------
_DEDUP_SUFFIX = re.compile(r"_\d+$")  # OpenVINO's suffix for a repeated node name


@dataclass(frozen=True, slots=True, repr=False)
class NodeProfile(Reported):
    """OpenVINO's per-node timings grouped by the ggml node each OpenVINO layer was built for."""

    device: str
    nodes: tuple[tuple[str, str, float], ...]  # (ggml node, OpenVINO layer types, seconds)
    total_seconds: float = 0.0

    @classmethod
    def from_frame(cls, frame: pd.DataFrame, device: str) -> NodeProfile:
        """From ``Runner.profile()`` (columns ``node``, ``type``, ``real_time_us``)."""
        ran = frame[frame["real_time_us"] > 0]
        by_node = ran.groupby(ran["node"].astype(str).str.replace(_DEDUP_SUFFIX, "", regex=True), sort=False)
        kinds = by_node["type"].agg(lambda t: ", ".join(sorted(set(map(str, t))))).to_dict()
        seconds = by_node["real_time_us"].sum().sort_values(ascending=False, kind="stable") * 1e-6
        nodes = tuple((str(n), str(kinds[n]), float(s)) for n, s in seconds.items())
        return cls(device, nodes, sum(n[2] for n in nodes))

    def report(self) -> Report:
        rows = tuple(
            (name, kinds, format_duration(s), f"{s / self.total_seconds:.0%}")
            for name, kinds, s in self.nodes
        )
        title = f"per-node time on {self.device}: {format_duration(self.total_seconds)} in all"
        return Report(title, ("ggml node", "OpenVINO layers", "time", "share"), rows)

    def chart(self, top: int = 10) -> Figure:
        """The ``top`` slowest ggml nodes as horizontal bars, in µs."""
        import matplotlib.pyplot as plt

        shown = self.nodes[:top][::-1]
        fig, ax = plt.subplots(figsize=(6.5, 0.6 + 0.32 * len(shown)))
        ax.barh([f"{n} ({k})" for n, k, _ in shown], [s * 1e6 for _, _, s in shown], color="tab:blue")
        ax.set_xlabel("time per run (µs)")
        ax.set_title(f"per-node time on {self.device} (PERF_COUNT), slowest first", fontsize=10)
        ax.tick_params(axis="y", labelsize=8)
        return _finished(fig)


# -- memory over a sequence of steps -------------------------------------------------------------
class MemorySteps(Reported):
    """A device's used memory and this process's RSS, recorded at named steps of a notebook."""

    def __init__(self, device: str, *, core: Core | None = None) -> None:
        self.core, self.device = core, device
        self.steps: list[tuple[str, int, int]] = []  # (step, device used bytes, process RSS bytes)

    def record(self, step: str) -> None:
        used = next(d.used_bytes for d in list_devices(core=self.core) if d.name == self.device)
        self.steps.append((step, used, process_rss_bytes()))

    def used(self, step: str) -> int:
        return next(u for s, u, _ in self.steps if s == step)

    def report(self) -> Report:
        (du, dsize) = unit_for(max((u for _, u, _ in self.steps), default=0))
        (ru, rsize) = unit_for(max((r for _, _, r in self.steps), default=0))
        rows = tuple((s, f"{u / dsize:,.1f}", f"{r / rsize:,.1f}") for s, u, r in self.steps)
        columns = ("step", f"{self.device} used ({du})", f"process RSS ({ru})")
        return Report(f"memory at each step ({self.device}: the device's own figure)", columns, rows)

    def chart(self, history: pd.DataFrame) -> Figure:
        """Left: the device's used memory per step; right: ovkit's live buffer bytes over time."""
        import matplotlib.pyplot as plt

        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 2.8))
        unit, size = unit_for(max((u for _, u, _ in self.steps), default=0))
        ax1.plot([s for s, _, _ in self.steps], [u / size for _, u, _ in self.steps], marker="o")
        ax1.set_title(f"{self.device}: used memory (device's own figure)", fontsize=10)
        ax1.set_ylabel(unit)
        ax1.set_ylim(bottom=0)
        ax1.tick_params(axis="x", labelrotation=30)
        if len(history):
            unit, size = unit_for(float(history["live_bytes"].max()))
            for name, part in history.groupby("device"):
                t = part["time"] - history["time"].min()
                ax2.step(t, part["live_bytes"] / size, where="post", label=str(name))
            ax2.legend(fontsize=8)
        ax2.set_title("ovkit buffers: live bytes (allocation record)", fontsize=10)
        ax2.set_xlabel("time (s)")
        ax2.set_ylabel(unit)
        return _finished(fig)


# -- quantized weights ---------------------------------------------------------------------------
def requant_chart(
    weight_name: str, shape: tuple[int, int], classes: Sequence[str] = ("CPU", "GPU", "NPU")
) -> Figure:
    """Bytes one weight needs per quantized type after each device class's requantization policy."""
    import matplotlib.pyplot as plt
    import pandas as pd

    from ovkit import quant

    need = pd.DataFrame(
        {
            cls: [
                quant.requant_bytes(quant.requant_type(weight_name, cls, q), q, shape)
                for q in quant.QUANT_TYPES
            ]
            for cls in classes
        },
        index=list(quant.QUANT_TYPES),
    )
    f32 = shape[0] * shape[1] * 4
    unit, size = unit_for(f32)
    fig, ax = plt.subplots(figsize=(7, 2.8))
    (need / size).plot.bar(ax=ax)
    ax.axhline(f32 / size, color="gray", ls="--", label="f32")
    ax.set_ylabel(f"{unit} for {shape[0]}×{shape[1]}")
    ax.set_title(f"{weight_name} after the requantization policy of each device class", fontsize=10)
    ax.legend(fontsize=8)
    return _finished(fig)


# -- op coverage (test-ops) ----------------------------------------------------------------------
COVERAGE_CATEGORIES = ("all rejected", "some rejected", "all pass", "FAIL")
COVERAGE_COLOURS = ("#bbbbbb", "#f0c419", "#4caf50", "#d62728")


def type_bucket(types: str) -> str:
    """A case's input types (``"f32/q4_K"``, ``"f16/f32"``) as one heatmap column."""
    parts = types.split("/")
    if any(p.startswith("q") or p == "mxfp4" for p in parts):
        return "quant"
    low = [p for p in parts if p in ("bf16", "f16")]
    return "/".join(low) if low else ("f32" if "f32" in parts else parts[0])


def _coverage_category(statuses: Iterable[str]) -> int:
    """The index of the case statuses' category in :data:`COVERAGE_CATEGORIES`."""
    s = set(statuses)
    return 3 if "FAIL" in s else 2 if s == {"OK"} else int("OK" in s)


def coverage_frame(results: Mapping[str, pd.DataFrame], case_types: Mapping[str, str]) -> pd.DataFrame:
    """Every class's ``test_ops`` rows in one frame with ``device_class`` and a ``dtype`` bucket."""
    import pandas as pd

    every = pd.concat([df.assign(device_class=cls) for cls, df in results.items()], ignore_index=True)
    every["dtype"] = every["case"].map(lambda c: type_bucket(case_types[c]))
    every["op"] = every["op"].str.replace("UNARY.", "").str.replace("GLU.", "")
    return every


#: ggml's ops by family, for summaries (unary and GLU sub-ops by their own names); data, not rules.
OP_FAMILIES: dict[str, tuple[str, ...]] = {
    "matrix products": ("MUL_MAT", "MUL_MAT_ID", "MUL_MAT_HADAMARD", "OUT_PROD"),
    "attention": ("FLASH_ATTN_EXT", "SOFT_MAX", "SOFT_MAX_BACK", "ROPE", "ROPE_BACK", "DIAG_MASK_INF",
                  "LIGHTNING_INDEXER"),
    "normalisation": ("NORM", "RMS_NORM", "RMS_NORM_BACK", "L2_NORM"),
    "arithmetic": ("ADD", "ADD1", "ADD_ID", "SUB", "MUL", "DIV", "SCALE", "SQR", "SQRT", "LOG", "SIN",
                   "COS", "CLAMP", "ACC"),
    "activations (unary)": ("ABS", "CEIL", "ELU", "EXP", "EXPM1", "FLOOR", "GELU", "GELU_ERF",
                            "GELU_QUICK", "HARDSIGMOID", "HARDSWISH", "LEAKY_RELU", "NEG", "RELU",
                            "ROUND", "SGN", "SIGMOID", "SILU", "SILU_BACK", "SOFTPLUS", "STEP", "TANH",
                            "TRUNC", "XIELU"),
    "gated (GLU)": ("GEGLU", "GEGLU_ERF", "GEGLU_QUICK", "REGLU", "SWIGLU", "SWIGLU_OAI"),
    "reductions, sorting": ("SUM", "SUM_ROWS", "MEAN", "ARGMAX", "ARGSORT", "TOP_K", "CUMSUM",
                            "COUNT_EQUAL"),
    "copies, views, indexing": ("CPY", "DUP", "CONT", "RESHAPE", "VIEW", "PERMUTE", "TRANSPOSE",
                                "GET_ROWS", "GET_ROWS_BACK", "SET_ROWS", "SET", "CONCAT", "REPEAT",
                                "REPEAT_BACK", "PAD", "PAD_REFLECT_1D", "ROLL", "FILL", "ARANGE", "DIAG",
                                "TRI"),
    "convolution, pooling": ("CONV_2D", "CONV_2D_DW", "CONV_3D", "CONV_TRANSPOSE_1D",
                             "CONV_TRANSPOSE_2D", "IM2COL", "IM2COL_3D", "COL2IM_1D", "POOL_1D",
                             "POOL_2D", "UPSCALE", "TIMESTEP_EMBEDDING"),
    "recurrent, state-space": ("SSM_CONV", "SSM_SCAN", "RWKV_WKV6", "RWKV_WKV7", "GATED_DELTA_NET",
                               "GATED_LINEAR_ATTN", "SOLVE_TRI", "DSV4_HC_PRE", "DSV4_HC_POST"),
    "training": ("OPT_STEP_SGD", "CROSS_ENTROPY_LOSS_BACK"),
}  # fmt: skip
_FAMILY_OF = {op: family for family, ops in OP_FAMILIES.items() for op in ops}


def op_family(op: object) -> str:
    """The family of a ggml op name (``"UNARY.EXP"``, ``"EXP"`` and ``Op.EXP`` alike); "other" if
    :data:`OP_FAMILIES` does not name it."""
    name = str(getattr(op, "value", op)).rsplit(".", 1)[-1]
    return _FAMILY_OF.get(name, "other")


class Collapsed:
    """``content`` (a DataFrame, Styler or Figure) behind a ``<details>`` toggle in HTML, so a
    notebook shows its summary first; the text form is the title and the content's text."""

    def __init__(self, title: str, content: Any) -> None:
        self.title, self.content = title, content

    def _inner_html(self) -> str:
        if hasattr(self.content, "savefig"):
            return png_img(figure_png(self.content), self.title)
        to_html = getattr(self.content, "to_html", None)
        return str(to_html()) if callable(to_html) else f"<pre>{html_text(str(self.content))}</pre>"

    def _repr_html_(self) -> str:
        return f"<details><summary>{html_text(self.title)}</summary>{self._inner_html()}</details>"

    def __repr__(self) -> str:
        return f"{self.title} (collapsed)"


def coverage_heatmap(every: pd.DataFrame, by: str = "op") -> Figure:
    """op (``by="family"``: op family) × input type × device class: all pass, some rejected,
    all rejected, or a failure (the family's cell: over every case of its ops)."""
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    if by not in ("op", "family"):
        raise ValueError(f"coverage_heatmap by {by!r}: expected 'op' or 'family'")
    if by == "family":
        every = every.assign(op=every["op"].map(op_family))
    font = 10 if by == "family" else 8
    classes = list(dict.fromkeys(every["device_class"]))
    cats = every.groupby(["op", "device_class", "dtype"])["status"].agg(_coverage_category)
    grid = cats.unstack(["device_class", "dtype"])
    pairs: list[tuple[str, str]] = list(grid.columns)  # type: ignore[arg-type]  # a MultiIndex
    columns = sorted(pairs, key=lambda k: (classes.index(k[0]), k[1]))
    grid = grid.reindex(columns=columns)
    # a family summary is few rows in readable type; the labels and legend need a wider frame
    width = 1.0 + 0.55 * grid.shape[1] if by == "op" else max(6.0, 2.5 + 0.6 * grid.shape[1])
    fig, ax = plt.subplots(figsize=(width, 0.8 + (0.26 if by == "op" else 0.34) * grid.shape[0]))
    cmap = ListedColormap(list(COVERAGE_COLOURS))
    ax.imshow(np.ma.masked_invalid(grid.to_numpy(dtype=float)), cmap=cmap, vmin=0, vmax=3, aspect="auto")
    ax.set_yticks(range(len(grid.index)), grid.index, fontsize=font)
    ax.set_xticks(range(grid.shape[1]), [f"{c}\n{t}" for c, t in columns], fontsize=font)
    ax.xaxis.tick_top()
    for i in range(1, len(columns)):
        if columns[i][0] != columns[i - 1][0]:  # a line between two device classes
            ax.axvline(i - 0.5, color="black", lw=1.5)
    handles = [Patch(color=cmap(i), label=n) for i, n in enumerate(COVERAGE_CATEGORIES)]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)
    what = "op family" if by == "family" else "op"
    ax.set_title(f"test-ops: {what} × input type × device class (white: no case)", fontsize=font + 1, pad=28)
    return _finished(fig)


def perf_table(rows: Iterable[Any]) -> pd.DataFrame:
    """``testops.perf_case`` results as a table: time per run, and GFLOPS or GB/s."""
    import pandas as pd

    columns = ("op", "case", "status", "us_per_run", "gflops", "gbps")
    frame = pd.DataFrame([{c: getattr(r, c) for c in columns} for r in rows], columns=list(columns))
    return frame.rename(columns={"us_per_run": "µs/run", "gflops": "GFLOPS", "gbps": "GB/s"})


def perf_chart(perf: pd.DataFrame, device: str) -> Figure:
    """Time per run of each timed case on a log axis, labelled with its rate."""
    import matplotlib.pyplot as plt
    import pandas as pd

    ok = perf[perf["status"] == "OK"]
    fig, ax = plt.subplots(figsize=(7, 0.5 + 0.3 * len(ok)))
    colours = ["tab:blue" if pd.notna(g) else "tab:orange" for g in ok["GFLOPS"]]
    ax.barh(ok["case"].str.slice(0, 60), ok["µs/run"], color=colours)
    ax.set_xscale("log")
    ax.set_xlabel("time per run (µs, log scale)")
    ax.invert_yaxis()
    for y, (us, gflops, gbps) in enumerate(zip(ok["µs/run"], ok["GFLOPS"], ok["GB/s"], strict=True)):
        rate = f"{gflops:,.1f} GFLOPS" if pd.notna(gflops) else f"{gbps:,.1f} GB/s"
        ax.text(us * 1.08, y, rate, va="center", fontsize=7)
    if len(ok):
        ax.set_xlim(right=ok["µs/run"].max() * 12)
    ax.set_title(f"time per op on {device} (blue: compute-bound, orange: memory-bound)", fontsize=9)
    ax.tick_params(axis="y", labelsize=7)
    return _finished(fig)


def fit_table(model: Any, machines: Mapping[str, Any]) -> Report:
    """``model.fit_check`` on every machine (name → core), sizes by magnitude."""
    rows = []
    for machine, core in machines.items():
        for r in model.fit_check(core).to_dict("records"):
            need, free = format_bytes(r["weight_bytes"]), format_bytes(r["free_bytes"])
            rows.append((machine, r["device"], r["class"], need, free, "yes" if r["fits"] else "NO"))
    columns = ("machine", "device", "class", "weights need", "free", "fits")
    return Report(f"does {model.path.name} fit?", columns, tuple(rows))
