"""Op explorer: pick one of ``ovkit test-ops``' cases, change shapes and dtype, see the policy, run,
compare, time (on a simulated core every device runs on the real CPU)."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import re
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import ipywidgets as widgets

from ovkit.devices import device_class, physical_device_ids
from ovkit.escape import html_attr as esc
from ovkit.ir import Op
from ovkit.report import Report, figure_png
from ovkit.runtime import Core, is_simulated
from ovkit.widgets.data import error_text
from ovkit.widgets.saved import SavedPictureMixin

if TYPE_CHECKING:
    import pandas as pd

    from ovkit.catalogue.case import Case, Leaf

#: The float types the dtype control offers (``ovkit.upstream.cases.vary`` checks them).
FLOAT_DTYPES: tuple[str, ...] = ("f32", "f16", "bf16")
AS_CATALOGUE = "as catalogue"
STATUS_COLOURS: dict[str, str] = {"OK": "#2f9e44", "FAIL": "#e03131", "not supported": "#adb5bd"}


# -- data ---------------------------------------------------------------------------------
@functools.cache
def ggml_reference_available() -> bool:
    """True when ggml-python imports and loads its library (a broken install means numpy)."""
    try:
        from ovkit import oracle

        return bool(oracle.ggml_available())
    except (ImportError, OSError):
        return False


@functools.cache
def op_catalogue() -> dict[str, tuple[Case, ...]]:
    """The test-ops cases grouped by op key, in catalogue order."""
    from ovkit.testops import build_catalogue

    grouped: dict[str, list[Case]] = {}
    for c in build_catalogue():
        grouped.setdefault(c.op, []).append(c)
    return {op: tuple(cases) for op, cases in grouped.items()}


def parse_shape(text: str) -> tuple[int, ...]:
    """``"8, 64"`` / ``"(8,64)"`` / ``"8x64"`` → ``(8, 64)``; a clear error otherwise."""
    parts = [p for p in re.split(r"[\s,x×()\[\]]+", text.strip()) if p]
    try:
        dims = tuple(int(p) for p in parts)
    except ValueError:
        raise ValueError(f"shape {text!r}: expected positive integers such as '8, 64'") from None
    if not 1 <= len(dims) <= 4 or any(d <= 0 for d in dims):
        raise ValueError(f"shape {text!r}: expected 1 to 4 positive integers (numpy order), such as '8, 64'")
    return dims


def numpy_shape(leaf: Leaf) -> tuple[int, ...]:
    """The leaf's numpy shape without its outer dims of 1 (what the shape box shows)."""
    shape = leaf.shape
    first = next((i for i, d in enumerate(shape) if d != 1), len(shape) - 1)
    return shape[first:]


def customise(
    case: Case, shapes: Mapping[str, Sequence[int]] | None = None, dtype: str | None = None
) -> Case:
    """``case`` with new input shapes (numpy order, by input name) and/or float dtype."""
    from ovkit.catalogue.curated import relabel
    from ovkit.upstream.cases import vary

    return relabel(vary(case, shapes, dtype))


@dataclass(frozen=True, slots=True)
class OpRun:
    """One case on one device: the policy verdict, the comparison with the reference, the time."""

    device: str
    device_class: str
    simulated: bool
    supported: bool
    status: str  # "OK" | "FAIL" | "not supported" | "not run"
    detail: str = ""
    nmse: float | None = None
    max_nmse: float | None = None
    reference: str = ""
    us_per_run: float | None = None


def policy_verdicts(case: Case, devices: Iterable[str]) -> list[tuple[str, bool, str]]:
    """``(device, supported, reason)`` for each device (by its class), without running anything."""
    from ovkit.catalogue.case import ovkit_graph
    from ovkit.catalogue.run import policy_rejection

    g, out = ovkit_graph(case)
    return [(dev, (reason := policy_rejection(g, out, dev)) is None, reason or "") for dev in devices]


def explore(
    case: Case,
    devices: Iterable[str],
    *,
    core: Core | None = None,
    reference: str = "numpy",
    time_it: bool = True,
) -> list[OpRun]:
    """Run ``case`` on every device of ``devices``: verdict, NMSE vs ``reference``, µs per run."""
    from ovkit.catalogue.run import run_case
    from ovkit.testops import perf_case

    runs = []
    for dev in devices:
        r = run_case(case, dev, reference=reference, core=core)  # type: ignore[arg-type]
        timed = time_it and r.status == "OK"
        us = perf_case(case, dev, min_seconds=0.05, max_runs=200, core=core).us_per_run if timed else None
        runs.append(
            OpRun(dev, str(device_class(dev)), is_simulated(core), r.status != "not supported", r.status, r.detail,
                  r.err, r.max_err, r.reference, us)
        )  # fmt: skip
    return runs


#: The real backend's row in the results table.
REAL_BACKEND = "OPENVINO0 (real backend)"


def real_backend_status() -> str:
    """``""`` when ``ovkit.upstream`` finds the real backend's build, else why not (naming
    ``scripts/install-upstream``)."""
    from ovkit.upstream.build import UpstreamUnavailableError, require

    try:
        require()
    except UpstreamUnavailableError as exc:
        return str(exc)
    return ""


def real_backend_run(base: Case, shapes: Mapping[str, Sequence[int]], dtype: str | None) -> OpRun:
    """The catalogue case ``base`` with the explorer's edits on the real backend (isolated child):
    its ``supports_op`` verdict and NMSE against ggml's CPU backend."""
    from ovkit.upstream.ops import run_varied

    r = run_varied(base.name, shapes, dtype)
    detail = "; ".join(filter(None, (r.upstream_rejects and f"rejects {r.upstream_rejects}", r.detail)))
    return OpRun(
        REAL_BACKEND,
        "CPU",
        False,
        bool(r.upstream_supported),
        r.upstream_status,
        detail,
        r.upstream_nmse,
        r.max_nmse,
        "ggml",
    )


def runs_frame(runs: Iterable[OpRun]) -> pd.DataFrame:
    """The runs as a DataFrame indexed by device."""
    import pandas as pd

    columns = [f.name for f in dataclasses.fields(OpRun)]
    return pd.DataFrame([dataclasses.asdict(r) for r in runs], columns=columns).set_index("device")


def runs_png(frame: pd.DataFrame, title: str = "") -> bytes:
    """µs per run per device, coloured by verdict (unsupported / failed devices drawn at 0)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(4.8, 2.8), dpi=80)
    fig.subplots_adjust(left=0.16, right=0.97, top=0.82, bottom=0.14)
    ax = fig.add_subplot()
    simulated = bool(frame["simulated"].any())
    ax.set_title(
        (title or "time per run by device")
        + ("\n(simulated: all ran on this host's CPU)" if simulated else ""),
        fontsize=9,
    )
    labels = [f"{d} (sim)" if s else str(d) for d, s in zip(frame.index, frame["simulated"], strict=True)]
    values = frame["us_per_run"].astype(float).fillna(0.0)
    bars = ax.bar(labels, values, color=[STATUS_COLOURS.get(str(s), "#868e96") for s in frame["status"]])
    for bar, status in zip(bars, frame["status"], strict=True):
        if status != "OK":
            ax.annotate(
                str(status), (bar.get_x() + bar.get_width() / 2, 0), ha="center", va="bottom", fontsize=8
            )
    ax.set_ylabel("µs per run")
    return figure_png(fig)


SIMULATED_TIMING = "SIMULATED devices: every device ran on this host's CPU, so these timings are CPU timings"


def shape_note_html(case: Case) -> str:
    """The shapes in both orders: the boxes take numpy order, ggml's ``ne`` is its reverse."""
    parts = ", ".join(f"{esc(lf.name)}: ne = {esc(lf.ne)}" for lf in case.leaves)
    return f"<small>Shapes are numpy order (outermost first); ggml's ne is innermost first &mdash; {parts}</small>"


def runs_report(runs: Sequence[OpRun], png: bytes = b"") -> Report:
    """Each run's verdict, NMSE against the reference and time, with the chart of the times."""
    rows = []
    for r in runs:
        nmse = "" if r.nmse is None else f"{r.nmse:.2e} (max {r.max_nmse:.0e}, {r.reference})"
        us = "" if r.us_per_run is None else f"{r.us_per_run:,.1f}"
        name = f"{r.device} (simulated, runs on CPU)" if r.simulated else r.device
        rows.append((name, r.device_class, r.status, nmse, us, r.detail))
    header = ("Device", "Class", "Verdict", "NMSE vs reference", "µs/run", "Reason / detail")
    notes = (SIMULATED_TIMING,) if any(r.simulated for r in runs) else ()
    return Report("runs", header, tuple(rows), notes, png)


def op_info_html(op: str) -> str:
    """What the catalogue (``ovkit.ops.table``) says about ``op``: translations, notes, gates."""
    from ovkit.ops.coverage import entry_gates
    from ovkit.ops.table import TABLE

    entry = TABLE.get(op.replace(":", "."))  # type: ignore[call-overload]
    if entry is None:
        return ""
    rows = [
        ("builder", ", ".join(f"Graph.{b}" for b in entry.builders)),
        ("parameters", entry.params),
        ("ovkit (opset16)", entry.openvino),
        ("upstream", entry.upstream),
    ]
    if entry.notes:
        rows.append(("notes", entry.notes))
    for gate in entry_gates(entry):
        cls = getattr(gate, "device_class", None)
        rows.append((f"gate{f' ({cls})' if cls else ''}", getattr(gate, "description", str(gate))))
    body = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in rows)
    return f'<details class="ovkit-op-info"><summary>{esc(entry.ggml_name)}</summary><table>{body}</table></details>'


def verdicts_report(verdicts: Sequence[tuple[str, bool, str]]) -> Report:
    """The policy's verdict per device, with the reason for a refusal."""
    rows = tuple((d, "supported" if ok else "not supported", reason) for d, ok, reason in verdicts)
    return Report("supports_op", ("device", "verdict", "reason"), rows)


# -- widget -------------------------------------------------------------------------------
class OpExplorer(SavedPictureMixin, widgets.VBox):
    """Choose an op and case, edit shapes/dtype, pick devices; check the policy, run, compare."""

    def __init__(
        self,
        *,
        core: Core | None = None,
        op: str | None = None,
        quiet: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext,
        **kwargs: Any,
    ) -> None:
        self.core = core
        self.quiet = quiet  # entered around runs: a dashboard pauses its refresh so timings are fair
        self.catalogue = op_catalogue()
        self.case: Case | None = None
        self.runs: list[OpRun] = []
        self.verdicts: list[tuple[str, bool, str]] = []
        self.error: str | None = None
        self._lock = threading.Lock()
        try:
            devices = physical_device_ids(core)
        except Exception as exc:
            devices = []
            self.error = error_text(exc)
        ops = list(self.catalogue)
        self.op_dropdown = widgets.Dropdown(
            options=ops, value=op or (Op.MUL_MAT if Op.MUL_MAT in ops else ops[0]), description="Op"
        )
        self.case_dropdown = widgets.Dropdown(description="Case", layout=widgets.Layout(width="640px"))
        self.dtype_dropdown = widgets.Dropdown(options=[AS_CATALOGUE, *FLOAT_DTYPES], description="dtype")
        self.shape_box = widgets.VBox()
        self.shape_texts: dict[str, widgets.Text] = {}
        self.device_select = widgets.SelectMultiple(
            options=devices, description="Devices", rows=min(4, max(1, len(devices)))
        )
        # ggml itself is the oracle when ggml-python works here; numpy is the fallback
        refs = ["ggml", "numpy"] if ggml_reference_available() else ["numpy"]
        self.reference_dropdown = widgets.Dropdown(options=refs, description="Reference")
        self.real_backend_missing = real_backend_status()
        self.real_backend_check = widgets.Checkbox(
            False, description="also the real backend (OPENVINO0)", disabled=bool(self.real_backend_missing),
            style={"description_width": "initial"},
        )  # fmt: skip
        self.real_backend_note = widgets.HTML(
            f"<small>&#9888; real backend unavailable: {esc(self.real_backend_missing)}</small>"
            if self.real_backend_missing
            else ""
        )
        self.check_button = widgets.Button(description="Check policy", icon="check")
        self.run_button = widgets.Button(description="Run", icon="play", button_style="primary")
        self.run_all_button = widgets.Button(
            description="Run on every device", icon="forward", layout=widgets.Layout(width="auto")
        )
        self.verdict_html, self.info_html, self.result_html, self.shape_note = map(widgets.HTML, [""] * 4)
        # hidden until the first run: an empty Image shows a broken-image icon
        self.chart = widgets.Image(format="png", layout=widgets.Layout(width="480px", display="none"))
        self.chart.add_class("ovkit-op-chart")
        self.result_html.add_class("ovkit-op-results")
        self.op_dropdown.observe(self._on_op, names="value")
        self.case_dropdown.observe(self._on_case, names="value")
        for control in (self.dtype_dropdown, self.device_select):
            control.observe(lambda _: self.check(), names="value")
        self.check_button.on_click(lambda _: self.check())
        self.run_button.on_click(lambda _: self.run())
        self.run_all_button.on_click(lambda _: self.run(every_device=True))
        self.top_row = widgets.HBox([self.op_dropdown, self.dtype_dropdown, self.reference_dropdown])
        self.button_row = widgets.HBox([self.check_button, self.run_button, self.run_all_button])
        real = widgets.HBox([self.real_backend_check, self.real_backend_note])
        rows = [self.top_row, self.case_dropdown, self.info_html, self.shape_box, self.shape_note]
        rows += [self.device_select, real, self.button_row, self.verdict_html, self.result_html, self.chart]
        super().__init__(rows, **kwargs)
        self.add_class("ovkit-op-explorer")
        if devices:
            self.device_select.value = (self._selected_device(devices),)
        self._on_op({"new": self.op_dropdown.value})

    # -- state ----------------------------------------------------------------------------
    def _selected_device(self, devices: Sequence[str]) -> str:
        from ovkit.selection import resolve_device

        try:
            dev = resolve_device(log=False, core=self.core).device
        except Exception:
            return devices[0]
        return dev if dev in devices else devices[0]

    def _on_op(self, change: dict[str, Any]) -> None:
        cases = self.catalogue[change["new"]]
        self.info_html.value = op_info_html(change["new"])
        self.case_dropdown.options = [(c.name, i) for i, c in enumerate(cases)]
        self.case_dropdown.value = 0
        self._on_case({"new": 0})

    def _on_case(self, change: dict[str, Any]) -> None:
        if change["new"] is None:
            return
        base = self.catalogue[self.op_dropdown.value][change["new"]]
        for text in self.shape_texts.values():
            for w in (text.layout, text.style, text):
                w.close()
        self.shape_texts = {
            i.name: widgets.Text(
                ", ".join(str(d) for d in numpy_shape(i)), description=f"{i.name} ({i.dtype}) numpy shape",
                continuous_update=False, style={"description_width": "initial"},
            )
            for i in base.leaves
        }  # fmt: skip
        for text in self.shape_texts.values():
            text.observe(lambda _: self.check(), names="value")
        self.shape_box.children = list(self.shape_texts.values())
        self.runs = []  # results of another case would mislead
        self.result_html.value = ""
        self.chart.value = b""
        self.chart.layout.display = "none"
        self.check()

    def _edits(self) -> tuple[Case, dict[str, tuple[int, ...]], str | None]:
        """The selected catalogue case, and the shapes and dtype from the controls."""
        base = self.catalogue[self.op_dropdown.value][self.case_dropdown.value or 0]
        shapes = {name: parse_shape(text.value) for name, text in self.shape_texts.items()}
        dtype = None if self.dtype_dropdown.value == AS_CATALOGUE else self.dtype_dropdown.value
        return base, shapes, dtype

    def current_case(self) -> Case:
        """The selected catalogue case with the shapes and dtype from the controls."""
        return customise(*self._edits())

    def _devices(self, every: bool) -> list[str]:
        return list(self.device_select.options if every else self.device_select.value)

    # -- actions --------------------------------------------------------------------------
    def check(self) -> list[tuple[str, bool, str]]:
        """Build the case and show the policy's verdict per chosen device (nothing runs)."""
        with self._lock:
            try:
                self.case = self.current_case()
                self.shape_note.value = shape_note_html(self.case)
                self.verdicts = policy_verdicts(self.case, self._devices(False))
                self.error = None
            except Exception as exc:
                self.verdicts = []
                self.error = error_text(exc)
            self._render_verdicts()
            return self.verdicts

    def run(self, every_device: bool = False) -> list[OpRun]:
        """Run on the chosen devices (or all of them), compare with the reference and time it."""
        with self._lock:
            devices = self._devices(every_device)
            self.result_html.value = f"<i>running on {esc(', '.join(devices)) or 'no device'}…</i>"
            try:
                self.case = self.current_case()
                with self.quiet():
                    self.runs = explore(
                        self.case, devices, reference=self.reference_dropdown.value, core=self.core
                    )
                    if self.real_backend_check.value and not self.real_backend_missing:
                        self.runs.append(real_backend_run(*self._edits()))
                self.error = None
            except Exception as exc:
                self.runs = []
                self.error = error_text(exc)
            self._render_runs()
            return self.runs

    # -- view -----------------------------------------------------------------------------
    def _render_verdicts(self) -> None:
        self.verdict_html.value = (self._error_report() or verdicts_report(self.verdicts))._repr_html_()
        self.save_picture()

    def _render_runs(self) -> None:
        self.result_html.value = (self._error_report() or runs_report(self.runs))._repr_html_()
        if not self.error and self.runs and self.case is not None:
            self.chart.value = runs_png(runs_frame(self.runs), self.case.name[:60])
            self.chart.layout.display = ""
        self.save_picture()

    def to_frame(self) -> pd.DataFrame:
        return runs_frame(self.runs)

    def _error_report(self) -> Report | None:
        return Report("error", notes=(self.error,)) if self.error else None

    def report(self) -> Report:
        parts = [verdicts_report(self.verdicts)]
        if self.runs:
            parts.append(runs_report(self.runs, bytes(self.chart.value)))
        error = (f"error: {self.error}",) if self.error else ()
        return Report(
            f"Op explorer: {self.case.name if self.case else '(no case)'}", notes=error, parts=tuple(parts)
        )
