"""Presentation helpers for the walkthrough notebooks: formatted tables and labelled charts.

Each returns something a cell can simply display: a :class:`Report` (HTML in JupyterLab, aligned
text in a terminal or papermill output) or a matplotlib ``Figure``.  Figures are formatted by
magnitude (``16.0 MiB``, ``812 µs``), never as raw floats or byte counts.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ovkit.buffers import buffer_type, host_buffer_type
from ovkit.devices import Device, physical_device_ids
from ovkit.escape import html_attr, html_text
from ovkit.memory import BYTE_UNITS, format_bytes
from ovkit.report import Report, Reported, format_duration
from ovkit.runtime import Core

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure


def byte_scale(largest: float) -> tuple[str, int]:
    """The unit (name, bytes) for a chart axis whose largest value is ``largest`` bytes."""
    return next(((u, s) for u, s in BYTE_UNITS if largest >= 2 * s), ("B", 1))


def _backend_missing(_: str | None) -> str | None:
    from ovkit.upstream.build import UpstreamUnavailableError, require

    try:
        require()
    except UpstreamUnavailableError as exc:
        return str(exc)
    return None


def _ggml_missing(_: str | None) -> str | None:
    from ovkit import oracle
    from ovkit.upstream.build import INSTALL_SCRIPT

    return (
        None
        if oracle.ggml_available()
        else f"ggml-python (ggml itself) is not installed; run {INSTALL_SCRIPT}"
    )


def _llama_missing(_: str | None) -> str | None:
    import importlib.util

    from ovkit.upstream.build import INSTALL_SCRIPT

    if importlib.util.find_spec("llama_cpp") is not None:
        return None
    return f"llama-cpp-python (llama.cpp's CPU build) is not installed; run {INSTALL_SCRIPT}"


def _model_missing(path: str | None) -> str | None:
    from pathlib import Path

    if not path:
        return "no real model file given (a GGUF path in the parameters cell, or papermill -p)"
    return None if Path(path).is_file() else f"the model file {path} does not exist"


def _real_models_missing(names: str | None) -> str | None:
    from ovkit.model.fetch import FETCH_COMMAND, MissingModelError, real_model

    missing = []
    for name in filter(None, (names or "").split(",")):
        try:
            real_model(name)
        except MissingModelError:
            missing.append(name)
    if not missing:
        return None
    return f"{', '.join(missing)} not fetched; run `{FETCH_COMMAND}`"


#: The parts a walkthrough can do without: each gives why it is missing (None: present).
OPTIONAL_PARTS = {
    "backend": _backend_missing,  # the real ggml-openvino backend (scripts/install-upstream)
    "ggml": _ggml_missing,  # ggml-python: ggml's own ops and quantizers, the oracle
    "llama.cpp": _llama_missing,  # llama-cpp-python: llama.cpp itself, the whole-model reference
    "model": _model_missing,  # a real GGUF model file (path)
    "real-models": _real_models_missing,  # ovkit.model.fetch's real models (comma-separated names)
}


def present(part: str, path: str | None = None) -> bool:
    """True when ``part`` (a key of :data:`OPTIONAL_PARTS`) is here; says nothing either way."""
    return _missing(part, path) is None


def _missing(part: str, path: str | None) -> str | None:
    check = OPTIONAL_PARTS.get(part)
    if check is None:
        raise ValueError(f"unknown optional part {part!r}; expected one of {', '.join(OPTIONAL_PARTS)}")
    return check(path)


def optional(part: str, skipped: str, path: str | None = None) -> bool:
    """True when ``part`` (a key of :data:`OPTIONAL_PARTS`) is here; otherwise print one line
    saying what is skipped and why, so Run All goes on without a traceback."""
    missing = _missing(part, path)
    if missing is not None:
        print(f"skipped: {skipped} ({missing})")
    return missing is None


@functools.cache
def can_quantize(qtype: str) -> bool:
    """True when this install quantizes ``qtype``: ggml's quantizer (ggml-python) does every type,
    the ``gguf`` package only some (not the K-quants); asked once per type on one block row."""
    import numpy as np

    from ovkit import quant

    row = np.linspace(-1.0, 1.0, 256, dtype=np.float32)[None, :]  # one block of every type
    try:
        quant.quantize(qtype, row)
    except NotImplementedError:
        return False
    return True


def quantizable(types: Sequence[str], skipped: str) -> list[str]:
    """The ``types`` this install can quantize; the others are named in one ``skipped:`` line."""
    from ovkit.upstream.build import INSTALL_SCRIPT

    missing = [t for t in types if not can_quantize(t)]
    if missing:
        print(
            f"skipped: {skipped} ({', '.join(missing)} need{'' if len(missing) > 1 else 's'} ggml's "
            f"quantizer: ggml-python (ggml itself) is not installed; run {INSTALL_SCRIPT})"
        )
    return [t for t in types if t not in missing]


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
        rows.append(
            (
                d.name,
                str(d.device_class),
                format_bytes(d.total_bytes),
                format_bytes(d.free_bytes),
                format_bytes(live.used_bytes),
                format_bytes(live.free_bytes),
                live.rule.label if live.known else "unknown (see below)",
            )
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
    unit, size = byte_scale(largest)
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
    rows = []
    for name in physical_device_ids(core):
        for bt in (buffer_type(name), host_buffer_type(name)):
            rows.append(
                (bt.name, bt.device, str(bt.kind), format_bytes(bt.alignment), format_bytes(bt.max_size))
            )
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
        groups: dict[str, tuple[set[str], float]] = {}
        for node, kind, us in zip(ran["node"], ran["type"], ran["real_time_us"], strict=True):
            label = _DEDUP_SUFFIX.sub("", str(node))
            kinds, total = groups.get(label, (set(), 0.0))
            groups[label] = (kinds | {str(kind)}, total + us * 1e-6)
        nodes = sorted(((k, ", ".join(sorted(v[0])), v[1]) for k, v in groups.items()), key=lambda r: -r[2])
        return cls(device, tuple(nodes), sum(n[2] for n in nodes))

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
        import psutil

        from ovkit.devices import list_devices

        used = next(d.used_bytes for d in list_devices(core=self.core) if d.name == self.device)
        self.steps.append((step, used, psutil.Process().memory_info().rss))

    def used(self, step: str) -> int:
        return next(u for s, u, _ in self.steps if s == step)

    def report(self) -> Report:
        (du, dsize) = byte_scale(max((u for _, u, _ in self.steps), default=0))
        (ru, rsize) = byte_scale(max((r for _, _, r in self.steps), default=0))
        rows = tuple((s, f"{u / dsize:,.1f}", f"{r / rsize:,.1f}") for s, u, r in self.steps)
        columns = ("step", f"{self.device} used ({du})", f"process RSS ({ru})")
        return Report(f"memory at each step ({self.device}: the device's own figure)", columns, rows)

    def chart(self, history: pd.DataFrame) -> Figure:
        """Left: the device's used memory per step; right: ovkit's live buffer bytes over time."""
        import matplotlib.pyplot as plt

        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 2.8))
        unit, size = byte_scale(max((u for _, u, _ in self.steps), default=0))
        ax1.plot([s for s, _, _ in self.steps], [u / size for _, u, _ in self.steps], marker="o")
        ax1.set_title(f"{self.device}: used memory (device's own figure)", fontsize=10)
        ax1.set_ylabel(unit)
        ax1.set_ylim(bottom=0)
        ax1.tick_params(axis="x", labelrotation=30)
        if len(history):
            unit, size = byte_scale(float(history["live_bytes"].max()))
            for name, part in history.groupby("device"):
                t = part["time"] - history["time"].min()
                ax2.step(t, part["live_bytes"] / size, where="post", label=str(name))
            ax2.legend(fontsize=8)
        ax2.set_title("ovkit buffers: live bytes (allocation record)", fontsize=10)
        ax2.set_xlabel("time (s)")
        ax2.set_ylabel(unit)
        return _finished(fig)


# -- quantized weights ---------------------------------------------------------------------------
def quantized_matmul_table(
    w: Any, x: Any, device: str, types: Sequence[str] | None = None, *, core: Core | None = None
) -> pd.DataFrame:
    """``x @ W.T`` on ``device`` for ``w`` in each quantized type (default: every one): size, bits
    per weight, and NMSE against the dequantized weights (and against ggml's quantized kernels
    when available)."""
    import pandas as pd

    from ovkit import oracle, quant
    from ovkit.graph import Graph

    rows = []
    for qtype in quant.QUANT_TYPES if types is None else types:
        qw = quant.quantize(qtype, w)
        g = Graph()
        got = g.compute(g.mul_mat(g.constant(qw), g.input("x", x.shape)), {"x": x}, device=device, core=core)
        row = {
            "type": qtype,
            "size": format_bytes(qw.nbytes),
            "bits/weight": 8 * qw.nbytes / w.size,
            "NMSE vs dequantized": oracle.nmse(got, x @ qw.dequantize().T),
            "quantization error": oracle.nmse(qw.dequantize(), w),
        }
        if oracle.ggml_available():
            row["NMSE vs ggml"] = oracle.nmse(got, oracle.ggml_mul_mat_quant(qtype, w, x))
        rows.append(row)
    return pd.DataFrame(rows).set_index("type")


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
    unit, size = byte_scale(f32)
    fig, ax = plt.subplots(figsize=(7, 2.8))
    (need / size).plot.bar(ax=ax)
    ax.axhline(f32 / size, color="gray", ls="--", label="f32")
    ax.set_ylabel(f"{unit} for {shape[0]}×{shape[1]}")
    ax.set_title(f"{weight_name} after the requantization policy of each device class", fontsize=10)
    ax.legend(fontsize=8)
    return _finished(fig)


# -- weight release ------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ReleaseDemo:
    """What releasing one f16 weight's host copy did (see :func:`weight_release_demo`)."""

    message: str
    released_bytes: int
    rss_before: int
    rss_after: int
    zeros_after: bool
    results_unchanged: bool
    recompile_error: str

    @property
    def rss_drop(self) -> int:
        return self.rss_before - self.rss_after

    def __str__(self) -> str:
        return "\n".join(
            [
                self.message,
                f"resident memory {format_bytes(self.rss_before)} -> {format_bytes(self.rss_after)}: "
                f"{format_bytes(self.rss_drop)} back to the OS",
                f"host copy reads as zeros now: {self.zeros_after}",
                f"results unchanged: {self.results_unchanged}",
                f"recompile refused: {self.recompile_error}",
            ]
        )

    def __repr__(self) -> str:
        return str(self)


def weight_release_demo(rows: int, k: int, seed: int = 0) -> ReleaseDemo:
    """Compile a ``rows x k`` f16 matmul on the CPU from an ovkit host weight buffer (zero-copy,
    as upstream), then release the host copy as the engine does on the first cache hit."""
    import numpy as np
    import openvino as ov
    import openvino.opset13 as ops
    import psutil

    from ovkit import buffers, weight_release
    from ovkit.config import read_config
    from ovkit.runtime import default_core

    rng = np.random.default_rng(seed)
    weight_release.reset()
    wbuf = buffers.alloc_buffer("CPU", rows * k * 2, "weights", host=True)
    try:
        wt = wbuf.place("blk.0.ffn_up.weight", (rows, k), "f16")
        wbuf.set_weight(wt, (rng.standard_normal((rows, k)) * 0.05).astype(np.float16))  # registers it
        xin = ops.parameter([1, k], ov.Type.f32, name="x")
        weight = ops.convert(ops.constant(wt.numpy(), shared_memory=True), "f32")
        model = ov.Model([ops.matmul(xin, weight, False, True)], [xin])
        request = default_core().compile_model(model, "CPU").create_infer_request()
        x = rng.standard_normal((1, k)).astype(np.float32)
        before = np.array(request.infer({0: x})[0])
        rss_before = psutil.Process().memory_info().rss
        released = weight_release.on_cache_hit("CPU", read_config({"GGML_OPENVINO_RELEASE_WEIGHTS": "1"}))
        rss_after = psutil.Process().memory_info().rss
        if released is None:
            raise RuntimeError("weight release found no registered host weights to release")
        unchanged = bool(np.array_equal(np.array(request.infer({0: x})[0]), before))
        try:
            weight_release.before_compile("CPU")
            refused = "no (expected WeightsReleasedError)"
        except weight_release.WeightsReleasedError as exc:
            refused = str(exc)
        zeros = not wbuf.data.any()
    finally:
        wbuf.free()
        weight_release.reset()  # a notebook only: a real backend process has no way back
    return ReleaseDemo(
        released.message, released.released_bytes, rss_before, rss_after, zeros, unchanged, refused
    )


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
    s = set(statuses)
    if "FAIL" in s:
        return 3
    if s == {"OK"}:
        return 2
    return 1 if "OK" in s else 0


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
        import base64
        import io

        if hasattr(self.content, "savefig"):
            buf = io.BytesIO()
            self.content.savefig(buf, format="png", dpi=80, bbox_inches="tight")
            data = base64.b64encode(buf.getvalue()).decode("ascii")
            return f'<img alt="{html_attr(self.title)}" src="data:image/png;base64,{data}"/>'
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
    column_classes = [c for c, _ in columns]
    for i in range(1, len(column_classes)):
        if column_classes[i] != column_classes[i - 1]:
            ax.axvline(i - 0.5, color="black", lw=1.5)
    handles = [Patch(color=cmap(i), label=n) for i, n in enumerate(COVERAGE_CATEGORIES)]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)
    what = "op family" if by == "family" else "op"
    ax.set_title(f"test-ops: {what} × input type × device class (white: no case)", fontsize=font + 1, pad=28)
    return _finished(fig)


def perf_table(rows: Iterable[Any]) -> pd.DataFrame:
    """``testops.perf_case`` results as a table: time per run, and GFLOPS or GB/s."""
    import pandas as pd

    return pd.DataFrame(
        [
            {
                "op": r.op,
                "case": r.case,
                "status": r.status,
                "µs/run": r.us_per_run,
                "GFLOPS": r.gflops,
                "GB/s": r.gbps,
            }
            for r in rows
        ]
    )


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


def perf_cases_within(cases: Iterable[Any], max_mib: float, max_gflop: float) -> list[Any]:
    """The perf cases with at most ``max_mib`` MiB of inputs and ``max_gflop`` GFLOP of work."""
    import numpy as np

    from ovkit.catalogue.case import PLAIN_TYPES

    def input_bytes(c: Any) -> int:
        return sum(
            int(np.prod(lf.ne)) * np.dtype(PLAIN_TYPES.get(lf.dtype, np.float32)).itemsize for lf in c.leaves
        )

    return [c for c in cases if input_bytes(c) <= max_mib * (1 << 20) and c.flops <= max_gflop * 1e9]


# -- GGUF ----------------------------------------------------------------------------------------
def tiny_llama_tensors(
    n_layers: int, n_embd: int, n_ff: int, n_vocab: int, qtype: str, down_qtype: str, seed: int = 0
) -> dict[str, Any]:
    """Random llama-style weights with llama.cpp's tensor names: matrices quantized to ``qtype``
    (``ffn_down`` and the output head to ``down_qtype``, as mixed quantizations do), norms f32."""
    import numpy as np

    from ovkit import quant

    rng = np.random.default_rng(seed)

    def weight(name: str, rows: int, cols: int, qt: str) -> Any:
        w = (rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(np.float32)
        return quant.quantize(qt, w, name=name)

    tensors: dict[str, Any] = {"token_embd.weight": weight("token_embd.weight", n_vocab, n_embd, qtype)}
    for i in range(n_layers):
        b = f"blk.{i}."
        tensors[b + "attn_norm.weight"] = np.ones(n_embd, np.float32)
        for part in ("attn_q", "attn_k", "attn_v", "attn_output"):
            tensors[b + part + ".weight"] = weight(b + part + ".weight", n_embd, n_embd, qtype)
        tensors[b + "ffn_norm.weight"] = np.ones(n_embd, np.float32)
        tensors[b + "ffn_gate.weight"] = weight(b + "ffn_gate.weight", n_ff, n_embd, qtype)
        tensors[b + "ffn_up.weight"] = weight(b + "ffn_up.weight", n_ff, n_embd, qtype)
        tensors[b + "ffn_down.weight"] = weight(b + "ffn_down.weight", n_embd, n_ff, down_qtype)
    tensors["output_norm.weight"] = np.ones(n_embd, np.float32)
    tensors["output.weight"] = weight("output.weight", n_vocab, n_embd, down_qtype)
    return tensors


def fit_table(model: Any, machines: Mapping[str, Any]) -> Report:
    """``model.fit_check`` on every machine (name → core), sizes by magnitude."""
    rows = []
    for machine, core in machines.items():
        for r in model.fit_check(core).to_dict("records"):
            need, free = format_bytes(r["weight_bytes"]), format_bytes(r["free_bytes"])
            rows.append((machine, r["device"], r["class"], need, free, "yes" if r["fits"] else "NO"))
    columns = ("machine", "device", "class", "weights need", "free", "fits")
    return Report(f"does {model.path.name} fit?", columns, tuple(rows))


def layer_matmul_table(
    model: Any, layer: int, x: Any, device: str, *, core: Core | None = None
) -> pd.DataFrame:
    """One layer's seven matmuls run from their quantized blocks on ``device``: NMSE against the
    dequantized weights (``ffn_down`` after SwiGLU, as the layer computes it) and against ggml."""
    import numpy as np
    import pandas as pd

    from ovkit import oracle
    from ovkit.graph import Graph

    prefix = f"blk.{layer}."
    w = {n[len(prefix) :].split(".")[0]: model.constant(n) for n in model.tensors if n.startswith(prefix)}
    w = {k: v for k, v in w.items() if "norm" not in k}
    g = Graph()
    xin = g.input("x", x.shape)
    c = {k: g.constant(v) for k, v in w.items()}
    outs = {k: g.mul_mat(c[k], xin) for k in w if k != "ffn_down"}
    outs["ffn_down"] = g.mul_mat(c["ffn_down"], g.swiglu_split(outs["ffn_gate"], outs["ffn_up"]))
    got = dict(zip(outs, g.compute(list(outs.values()), {"x": x}, device=device, core=core), strict=True))

    def silu(z: Any) -> Any:
        return z / (1 + np.exp(-z))

    act = silu(got["ffn_gate"]) * got["ffn_up"]  # ffn_down's input, as the device computed it
    rows = []
    for k in outs:
        src = act if k == "ffn_down" else x
        row = {"matmul": k, "type": w[k].dtype, "shape": w[k].shape}
        row["NMSE vs dequantized"] = oracle.nmse(got[k], src @ w[k].dequantize().T)
        if oracle.ggml_available():
            blocks = oracle.QuantArray(w[k].dtype, w[k].shape, w[k].raw)
            row["NMSE vs ggml"] = oracle.nmse(got[k], oracle.ggml_call("mul_mat", blocks, src))
        rows.append(row)
    return pd.DataFrame(rows).set_index("matmul")


# -- device selection ----------------------------------------------------------------------------
def supports_op_matrix(
    op: Any, *, core: Core | None = None
) -> tuple[pd.DataFrame, dict[str, dict[str, Any]]]:
    """``supports_op`` of every device for ``op`` with each device selected in turn: the yes/no
    matrix (rows: the selection) and every decision with its reason."""
    import pandas as pd

    from ovkit.selection import Backend, resolve_device

    physical = physical_device_ids(core)
    decisions = {}
    for selected in physical:
        backend = Backend(
            resolve_device(env={"GGML_OPENVINO_DEVICE": selected}, log=False, core=core), core=core
        )
        decisions[selected] = {name: backend.supports_op(name, op) for name in physical}
    matrix = pd.DataFrame(
        {f"selected {s}": {n: "yes" if d else "no" for n, d in row.items()} for s, row in decisions.items()}
    ).T
    return matrix.rename_axis(columns=f"supports_op(device, {op.op})"), decisions
