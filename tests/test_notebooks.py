"""The walkthrough notebooks, run top to bottom in a real Jupyter kernel.

Each notebook runs once per session, in JupyterLab in Chromium, and is saved there with its
widget state (``notebook_runs``; the browser-side checks of the same run are in
``tests/test_browser_notebooks.py``); the tests then assert on what a reader looks at: the
device lines, the op results, that charts produced PNG images and that widget models were saved.
Papermill runs (other parameters) use a kernel of their own.
"""

from __future__ import annotations

import ast
import base64
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jupytext
import nbclient
import nbformat
import pytest
from notebook_runs import NB_DIR, NOTEBOOKS, NotebookRuns, kernel_env

import ovkit

WIDGET_STATE = "application/vnd.jupyter.widget-state+json"

pytestmark = [pytest.mark.notebooks]


@pytest.fixture
def executed(notebook_runs: NotebookRuns) -> Callable[[str], Any]:
    """``executed("01-devices")`` → the notebook as JupyterLab saved it (each runs once)."""
    return lambda name: notebook_runs.notebook(name, "full")


def run_papermill(name: str, tmp_path: Path, **parameters: Any) -> Any:
    """Notebook ``name`` executed by papermill with ``parameters``."""
    import papermill

    out = tmp_path / f"{name}.ipynb"
    papermill.execute_notebook(
        str(NB_DIR / f"{name}.ipynb"),
        str(out),
        parameters=parameters,
        kernel_name="python3",
        progress_bar=False,
        cwd=str(NB_DIR),
    )
    return nbformat.read(out, as_version=4)


def cell(nb: Any, tag: str) -> Any:
    """The one cell tagged ``tag`` (``# %% tags=["tag"]`` in the notebook's ``.py`` source)."""
    found = [c for c in nb.cells if tag in c.metadata.get("tags", [])]
    if len(found) != 1:
        raise AssertionError(f"expected one cell tagged {tag!r} in the notebook, found {len(found)}")
    return found[0]


def text(nb: Any, tag: str, stream: str | None = None) -> str:
    """Everything a cell printed (stdout/stderr) and its text/plain results, joined."""
    parts = []
    for out in cell(nb, tag).outputs:
        if out.output_type == "stream" and stream in (None, out.name):
            parts.append(out.text)
        elif stream is None and "data" in out and "text/plain" in out.data:
            parts.append(out.data["text/plain"].rstrip("\n") + "\n")  # one output, one line
    return "".join(parts)


def html(nb: Any, tag: str) -> str:
    return "".join(o.data.get("text/html", "") for o in cell(nb, tag).outputs if "data" in o)


def pngs(nb: Any, tag: str) -> list[str]:
    return [o.data["image/png"] for o in cell(nb, tag).outputs if "data" in o and "image/png" in o.data]


def widget_states(nb: Any, model_name: str) -> list[dict[str, Any]]:
    """The saved state of every widget model of one kind (``HTMLModel``, ``DropdownModel`` ...)."""
    models = nb.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    return [m["state"] for m in models.values() if m["model_name"] == model_name]


def live_tables(nb: Any) -> list[tuple[list[str], str | None]]:
    """``(device names, highlighted device)`` of every saved browser-drawn device table."""
    tables = []
    for m in widget_states(nb, "AnyModel"):
        if "table" in m.get("panels", []):
            names = [d["name"] for d in m["meta"]["devices"]]
            selected = m["tick"].get("selected", -1)
            tables.append((names, names[selected] if selected >= 0 else None))
    return tables


# ---------------------------------------------------------------------------------------------
# Static checks: committed without outputs, a parameters cell first, in step with the .py source
# ---------------------------------------------------------------------------------------------


def test_walkthroughs_in_order() -> None:
    names = [p.stem for p in NOTEBOOKS]
    assert names == [
        "01-devices",
        "02-selecting-a-device",
        "03-compute-graphs",
        "04-memory-and-allocations",
        "05-op-coverage",
        "06-gguf",
        "07-models",
        "08-real-models",
    ], names


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_committed_without_outputs_and_parameters_first(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    code_cells = [c for c in nb.cells if c.cell_type == "code"]
    assert "parameters" in code_cells[0].metadata.get("tags", []), "first code cell must be tagged parameters"
    assert all(not c.outputs and c.execution_count is None for c in code_cells), "strip the outputs"
    assert nb.metadata["kernelspec"]["name"] == "python3"
    assert "widgets" not in nb.metadata


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_papermill_sees_every_parameter(path: Path) -> None:
    """Every assignment in the ``parameters`` cell can be overridden with ``papermill -p``."""
    import papermill

    nb = nbformat.read(path, as_version=4)
    source = next(c.source for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    assigned = [n.targets[0].id for n in ast.parse(source).body if isinstance(n, ast.Assign)]
    assert assigned and list(papermill.inspect_notebook(str(path))) == assigned


def _cells(nb: Any) -> list[tuple[str, str, list[str]]]:
    return [(c.cell_type, c.source, c.metadata.get("tags", [])) for c in nb.cells]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_matches_its_py_source(path: Path) -> None:
    """The ``.ipynb`` holds exactly the cells of its jupytext ``.py`` (run ``jupytext --sync``)."""
    source = path.with_suffix(".py")
    assert source.exists(), f"{path.name} has no {source.name}: notebooks are written as percent scripts"
    py, ipynb = jupytext.read(source), nbformat.read(path, as_version=4)
    hint = f"{path.name} and {source.name} disagree: run `jupytext --sync notebooks/{source.name}`"
    assert _cells(ipynb) == _cells(py), hint
    assert ipynb.metadata["kernelspec"] == py.metadata["kernelspec"], hint


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_code_cells_have_unique_tags(path: Path) -> None:
    """Every code cell has a tag naming it, used once, so tests never depend on cell order."""
    code = [c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]
    untagged = [c.source.splitlines()[0] for c in code if not c.metadata.get("tags")]
    assert untagged == [], f"untagged code cells in {path.name}: {untagged}"
    tags = [t for c in code for t in c.metadata["tags"]]
    assert len(tags) == len(set(tags)), sorted({t for t in tags if tags.count(t) > 1})


def test_kernel_python3_is_this_interpreter() -> None:
    """CI needs no ``ipykernel install``: ``python3`` resolves to the running interpreter."""
    nb = nbformat.v4.new_notebook()
    nb.cells.append(nbformat.v4.new_code_cell("import sys; print(sys.executable)"))
    nbclient.NotebookClient(nb, timeout=60, kernel_name="python3").execute(env=kernel_env())
    printed = nb.cells[0].outputs[0].text.strip()
    assert Path(printed).resolve() == Path(sys.executable).resolve()


# ---------------------------------------------------------------------------------------------
# 01-devices
# ---------------------------------------------------------------------------------------------

LAPTOP_LIST = """Available devices:
  CPU: Intel(R) Core(TM) Ultra 7 258V (31623 MiB, 31623 MiB free)
  GPU: Intel(R) Arc(TM) Graphics (iGPU) (29276 MiB, 29276 MiB free)
  NPU: Intel(R) AI Boost (NPU 4000) (31623 MiB, 31623 MiB free)"""


@pytest.mark.slow
def test_01_devices_prints_the_exact_list(executed: Callable[[str], Any]) -> None:
    nb = executed("01-devices")
    expected = ovkit.format_device_list(ovkit.list_devices())
    assert text(nb, "result").rstrip("\n") == expected
    assert re.search(r"^  CPU: .+ \(\d+ MiB, \d+ MiB free\)$", expected, re.M)
    cli = text(nb, "cli-compare")
    assert cli.count("identical to format_device_list: True") == 3, cli
    assert LAPTOP_LIST in cli
    assert "  GPU.1: Intel(R) Arc(TM) A770 Graphics (dGPU) (16384 MiB, 14784 MiB free)" in cli


@pytest.mark.slow
def test_01_devices_explains_memory(executed: Callable[[str], Any]) -> None:
    nb = executed("01-devices")
    per_device = text(nb, "memory-per-device")
    # list total/free beside the live figures (CPU used = RAM - MemAvailable, never "0 used"),
    # by magnitude with the rule, never raw byte counts
    m = re.search(
        r"^CPU +CPU +([\d.,]+) GiB +([\d.,]+) GiB +([\d.,]+) (MiB|GiB) +[\d.,]+ GiB +host RAM − MemAvailable$",
        per_device,
        re.M,
    )
    assert m and m.group(1) == m.group(2) and float(m.group(3)) > 0, per_device
    assert "--list-devices prints free = total for CPU" in per_device and not re.search(r"\d{7}", per_device)
    rules = text(nb, "memory-rules")
    assert "GPU_MEMORY_STATISTICS" in rules and "NPU_DEVICE_ALLOC_MEM_SIZE" in rules
    tables = html(nb, "simulated-tables")
    assert "GPU.1" in tables and "Intel(R) AI Boost (NPU 4000)" in tables
    errors = text(nb, "error-profiles")
    assert "  GPU: Intel(R) Arc(TM) Graphics (iGPU) (0 MiB, 0 MiB free)" in errors
    failed = html(nb, "error-profiles")
    assert "GPU_DEVICE_TOTAL_MEM_SIZE property as no supported devices found" in failed
    assert re.search(r"^GPU +GPU +0 B +0 B +unknown +unknown +unknown", errors, re.M), errors
    assert "(8192 MiB, 0 MiB free)" in errors


@pytest.mark.slow
def test_01_devices_draws_the_memory_chart(executed: Callable[[str], Any]) -> None:
    images = pngs(executed("01-devices"), "memory-chart")
    assert len(images) == 1 and len(images[0]) > 1000


@pytest.mark.slow
def test_01_devices_shows_the_live_table_widget(executed: Callable[[str], Any]) -> None:
    nb = executed("01-devices")
    views = [o for o in cell(nb, "live-table").outputs if "data" in o]
    assert "application/vnd.jupyter.widget-view+json" in views[0].data
    tables = live_tables(nb)
    assert len(tables) == 2, "the live table and the dashboard's must be in the saved widget state"
    assert tables == [([d.name for d in ovkit.list_devices()], "CPU")] * 2


@pytest.mark.slow
def test_01_devices_dashboard_shows_how_busy_each_device_is(executed: Callable[[str], Any]) -> None:
    nb = executed("01-devices")
    views = [o for o in cell(nb, "dashboard").outputs if "data" in o]
    assert "application/vnd.jupyter.widget-view+json" in views[0].data
    busy = text(nb, "busy")
    assert re.search(r"^CPU +\d+% +this process \d+% +/proc/stat, /proc/self/stat$", busy, re.M), busy


@pytest.mark.slow
def test_01_devices_on_a_simulated_machine_with_papermill(tmp_path: Path) -> None:
    """``papermill -p profile laptop``: the whole notebook describes the simulated laptop."""
    nb = run_papermill("01-devices", tmp_path, profile="laptop", device="GPU", live_refresh=False)
    assert "machine: simulated 'laptop'" in text(nb, "setup")
    assert text(nb, "result").rstrip("\n") == LAPTOP_LIST
    assert "selected device: GPU" in text(nb, "device-table")
    assert [highlighted for _, highlighted in live_tables(nb)] == ["GPU", "GPU"]  # table, dashboard
    busy = text(nb, "busy")
    assert re.search(
        r"^GPU \(sim\) +simulated: not measured +simulated device: no busy counter", busy, re.M
    ), busy
    assert "where the simulated devices run" in busy


# ---------------------------------------------------------------------------------------------
# 02-selecting-a-device
# ---------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_02_selection_rules(executed: Callable[[str], Any]) -> None:
    nb = executed("02-selecting-a-device")
    assert "unset -> CPU | fell back: False" in text(nb, "default")
    # ovkit's log lines as cell outputs: the warning and the hint marked, the routine line plain
    warn = text(nb, "gpu-on-workstation").splitlines()
    assert warn[:3] == [
        "warning: GGML OpenVINO Backend: device GPU is not available, fallback to CPU",
        "hint: this machine lists numbered devices: use 'GPU.0' or 'GPU.1'",
        "OpenVINO: using device CPU",
    ], warn
    assert "ovkit-log-warning" in html(nb, "gpu-on-workstation") and not text(
        nb, "gpu-on-workstation", "stderr"
    )
    result = text(nb, "result").splitlines()
    assert "'GPU'      -> CPU (fallback)" in result
    assert "'gpu'      -> CPU (fallback)" in result
    assert "'GPU.1'    -> GPU.1" in result
    assert "'GPU.1 '   -> CPU (fallback)" in result
    near = html(nb, "near-misses")
    assert "device ids are case-sensitive: use 'GPU'" in near
    assert "this machine lists numbered devices: use 'GPU.0' or 'GPU.1'" in near
    assert "environment unchanged: True" in text(nb, "using-device")


@pytest.mark.slow
def test_02_selector_widget_moves_the_highlight(executed: Callable[[str], Any]) -> None:
    nb = executed("02-selecting-a-device")
    steps = text(nb, "selector-steps", "stdout")
    assert "GGML_OPENVINO_DEVICE = 'GPU' -> CPU" in steps
    assert "  hint: this machine lists numbered devices: use 'GPU.0' or 'GPU.1'" in steps
    assert "os.environ: GPU.1 | highlighted: GPU.1" in steps
    # The saved widget state is the final one: GPU.1 chosen in the dropdown and highlighted.
    dropdowns = widget_states(nb, "DropdownModel")
    assert [d["_options_labels"][d["index"]] for d in dropdowns] == ["GPU.1"]
    assert dropdowns[0]["_options_labels"] == ["(unset)", "CPU", "GPU.0", "GPU.1"]
    ((_, highlighted),) = live_tables(nb)
    assert highlighted == "GPU.1"
    status = [h["value"] for h in widget_states(nb, "HTMLModel") if "GGML_OPENVINO_DEVICE = " in h["value"]]
    assert status == [status[0]] and "GGML_OPENVINO_DEVICE = 'GPU.1' -&gt; GPU.1</b>" in status[0]


@pytest.mark.slow
def test_02_non_selected_devices_support_no_op(executed: Callable[[str], Any]) -> None:
    nb = executed("02-selecting-a-device")
    out = text(nb, "supports-op", "stdout")
    assert "asked CPU    -> False: device CPU is not the selected device GPU.1" in out
    assert "asked GPU.0  -> False: device GPU.0 is not the selected device GPU.1" in out
    assert re.search(r"asked GPU.1  -> False: GET_ROWS: .*bf16.*\[get_rows.gpu_bf16\]", out), out
    matrix = html(nb, "supports-op")
    # Only the CPU row says yes, on the diagonal: one "yes" in the whole matrix.
    assert matrix.count("<td>yes</td>") == 1 and matrix.count("<td>no</td>") == 8, matrix


@pytest.mark.slow
def test_02_compute_follows_the_selection(executed: Callable[[str], Any]) -> None:
    nb = executed("02-selecting-a-device")
    out = text(nb, "running", "stdout")
    assert "selected GPU.0: gelu ran, result (2, 8)" in out and "selected GPU.1: gelu ran" in out
    table = html(nb, "running")
    assert "<td>GPU.0</td>" in table and "<td>GPU.1</td>" in table  # one compiled graph per device


@pytest.mark.slow
def test_02_runs_with_papermill_parameters(tmp_path: Path) -> None:
    """``papermill -p device GPU.1 -p profile laptop``: the parameters reach the notebook."""
    nb = run_papermill("02-selecting-a-device", tmp_path, device="GPU.1", profile="laptop")
    err = text(nb, "default")
    if "GPU.1" in ovkit.resolve_device(log=False, env={}).available:
        assert "OpenVINO: using device GPU.1" in err
    else:
        assert "GGML OpenVINO Backend: device GPU.1 is not available, fallback to CPU" in err
    assert "simulated laptop: ['AUTO', 'NPU', 'CPU', 'HETERO', 'GPU', 'MULTI']" in text(nb, "setup")


# ---------------------------------------------------------------------------------------------
# 03-compute-graphs
# ---------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_03_first_graph_matches_reference_and_ggml(executed: Callable[[str], Any]) -> None:
    nb = executed("03-compute-graphs")
    assert "MUL_MAT  shape (3, 4)  ne (4, 3, 1, 1)  f32" in text(nb, "first-graph")
    check = text(nb, "check")
    assert "numpy b @ a.T + bias" in check and "ovkit reference" in check
    from ovkit import oracle

    if oracle.ggml_available():
        assert "ggml CPU backend" in check
    assert "False" not in check and check.count("True") >= 2


@pytest.mark.slow
def test_03_errors_and_policy(executed: Callable[[str], Any]) -> None:
    nb = executed("03-compute-graphs")
    error = text(nb, "build-error")
    assert "GraphError: MUL_MAT: operand b: expected ne[0] == a.ne[0] = 8, given ne [7, 3, 1, 1]" in error
    out = text(nb, "errors")
    assert "div on CPU: ok, shape (5, 10)" in out
    assert re.search(r"div on GPU: UnsupportedOpError: .*\[div.gpu_per_channel\]", out), out
    assert "reference mode: (5, 10)" in out


@pytest.mark.slow
def test_03_cache_and_profiling(executed: Callable[[str], Any]) -> None:
    nb = executed("03-compute-graphs")
    # After reset_stats: first run compiles, the same structure hits, a new shape compiles.
    assert "compiled-graph cache: hits 1, misses 2 (33% hit rate), evictions 0, compiles 2 in " in text(
        nb, "cache"
    )
    profile = text(nb, "profile")  # timings grouped by the ggml node each OpenVINO layer came from
    assert re.search(r"^MUL_MAT #\d+ +FullyConnected +[\d.]+ (µs|ms) ", profile, re.M), profile
    assert "RMS_NORM #" in profile and "SOFT_MAX #" in profile and "Multiply_" not in profile
    assert len(pngs(nb, "profile-chart")) == 1


@pytest.mark.slow
def test_03_transformer_block_with_stateful_kv_cache(executed: Callable[[str], Any]) -> None:
    nb = executed("03-compute-graphs")
    ops = text(nb, "block-build").split("ops: ")[1].strip().split(", ")
    assert {"FLASH_ATTN_EXT", "ROPE", "SET_ROWS", "MUL_MAT"} <= set(ops), ops
    assert "stateful execution: True" in text(nb, "block-stateful")
    decoded = text(nb, "block-decode")
    assert "cache rows filled after prompt and each decoded token: [6, 7, 8, 9, 10]" in decoded
    assert "after reset_state: cache_k all zero: True" in text(nb, "cache-heatmap")
    assert len(pngs(nb, "cache-heatmap")) == 1
    result = text(nb, "result")
    assert "all pass: True" in result, result


@pytest.mark.slow
def test_03_runs_on_a_simulated_gpu_with_papermill(tmp_path: Path) -> None:
    """``papermill -p profile laptop -p device GPU``: every check holds under the GPU class policy."""
    nb = run_papermill("03-compute-graphs", tmp_path, device="GPU", profile="laptop")
    assert "running on GPU (simulated laptop, computed on this CPU)" in text(nb, "setup")
    assert "all pass: True" in text(nb, "result")


# ---------------------------------------------------------------------------------------------
# 04-memory-and-allocations
# ---------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_04_buffer_types_and_allocation_record(executed: Callable[[str], Any]) -> None:
    nb = executed("04-memory-and-allocations")
    assert "look-alike 'GPU': ovkit's = False, kind = None" in text(nb, "buffer-types")
    types = html(nb, "buffer-types")
    assert "GPU_HOST" in types and "NPU_HOST" in types
    assert ">unlimited</td>" in types and "18446744073709551615" not in types  # SIZE_MAX, said in words
    buffers = text(nb, "buffers")
    assert "view shares memory: True" in buffers
    assert "simulated GPU: host memory" in buffers  # the KV cache of a simulated GPU says so
    assert "ovkit buffers still live: 0" in text(nb, "result")


@pytest.mark.slow
def test_04_device_memory_rises_with_graphs_and_returns(executed: Callable[[str], Any]) -> None:
    nb = executed("04-memory-and-allocations")
    rows = re.findall(r"^(start|layer \d+|cache cleared)\s+([\d.]+)\s+[\d.]+$", text(nb, "clear"), re.M)
    used = [float(v) for _, v in rows]
    assert [name for name, _ in rows] == [
        "start",
        "layer 0",
        "layer 1",
        "layer 2",
        "layer 3",
        "cache cleared",
    ]
    steps = [b - a for a, b in zip(used[:4], used[1:5], strict=True)]
    assert all(abs(step - 4.0) < 0.01 for step in steps), used  # one 1024 x 1024 f32 weight each
    assert used[-1] == used[0]


@pytest.mark.slow
def test_04_charts_are_drawn(executed: Callable[[str], Any]) -> None:
    nb = executed("04-memory-and-allocations")
    assert len(pngs(nb, "history-chart")) == 1 and len(pngs(nb, "requant")) == 1
    # the live charts are drawn by the browser from numbers: the saved model holds the panels,
    # the latest figures and the history buffer (float64 rows: time, used bytes per device)
    models = nb.metadata["widgets"][WIDGET_STATE]["state"]
    (charts,) = [
        m for m in models.values() if m["model_name"] == "AnyModel" and "history" in m["state"]["panels"]
    ]
    assert charts["state"]["panels"] == ["bars", "breakdown", "history"]
    assert charts["state"]["tick"]["devices"]
    (history,) = [b for b in charts.get("buffers", []) if b["path"] == ["history"]]
    assert len(base64.b64decode(history["data"])) >= 8 * 2 * (1 + len(charts["state"]["meta"]["devices"]))


@pytest.mark.slow
def test_04_quantized_matmul_matches(executed: Callable[[str], Any]) -> None:
    nb = executed("04-memory-and-allocations")
    m = re.search(r"worst NMSE vs dequantized weights ([\d.e+-]+) over (\d+) types", text(nb, "result"))
    assert m, text(nb, "result")
    assert float(m.group(1)) < 5e-4 and int(m.group(2)) == 8  # test-backend-ops' mul_mat threshold


@pytest.mark.slow
def test_04_weight_release(executed: Callable[[str], Any]) -> None:
    nb = executed("04-memory-and-allocations")
    out = text(nb, "release")
    assert "ggml_openvino_release_weight_buffers: released 16 MB of host weight buffers (1 buffers)" in out
    assert "host copy reads as zeros now: True" in out and "results unchanged: True" in out
    assert "recompile refused: ggml-openvino: a new graph needs to be compiled" in out
    m = re.search(r"weight release: (\d+) MiB released, RSS fell by (-?\d+) MiB", text(nb, "result"))
    assert m and int(m.group(1)) == 16 and int(m.group(2)) >= 0.9 * 16, text(nb, "result")


# ---------------------------------------------------------------------------------------------
# 05-op-coverage
# ---------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_05_op_table_lists_every_registered_op(executed: Callable[[str], Any]) -> None:
    nb = executed("05-op-coverage")
    m = re.search(
        r"(\d+) entries .*: (\d+) registered upstream, (\d+) translated by ovkit", text(nb, "op-table")
    )
    assert m and int(m.group(3)) >= int(m.group(2)) >= 49, text(nb, "op-table")
    table = html(nb, "op-table")  # every row shown, none elided
    assert (
        all(op in table for op in ("FLASH_ATTN_EXT", "ROPE", "SWIGLU", "GELU"))
        and "<td>...</td>" not in table
    )
    # the summary per op family first, the full table behind a toggle
    assert -1 < table.index("matrix products") < table.index("<details><summary>the full op table: ")
    assert "global.exp_f32" in html(nb, "gates") and "<details><summary>every gate: " in html(nb, "gates")


@pytest.mark.slow
def test_05_test_ops_pass_on_every_device_class(executed: Callable[[str], Any]) -> None:
    nb = executed("05-op-coverage")
    cpu = text(nb, "test-cpu")
    m = re.search(r"(\d+)/(\d+) tests passed, (\d+) not supported", cpu)
    assert m and m.group(1) == m.group(2) and int(m.group(1)) > 50, cpu
    assert "  Backend CPU: OK" in cpu
    result = text(nb, "result").splitlines()
    for cls in ("CPU", "GPU", "NPU"):
        line = next(r for r in result if r.startswith(cls + ":"))
        ok, ran = re.search(r"(\d+)/(\d+) supported cases pass", line).groups()  # type: ignore[union-attr]
        assert ok == ran and line.endswith(" 0 FAIL"), line


@pytest.mark.slow
def test_05_rejections_carry_reasons(executed: Callable[[str], Any]) -> None:
    reasons = text(executed("05-op-coverage"), "reasons", "stdout")
    gpu = reasons.split("GPU:")[1].split("NPU:")[0]
    assert "[div.gpu_per_channel]" in gpu and "[div.gpu_per_channel]" not in reasons.split("GPU:")[0]
    assert "UNARY EXP with an f32 output is rejected [global.exp_f32]" in reasons


@pytest.mark.slow
def test_05_heatmap_and_perf(executed: Callable[[str], Any]) -> None:
    nb = executed("05-op-coverage")
    assert len(pngs(nb, "heatmap")) == 1 and len(pngs(nb, "perf-chart")) == 1  # by family, per op folded
    assert "<details><summary>per op: " in html(nb, "heatmap")
    m = re.search(r"perf on CPU: (\d+) cases timed, statuses \{'OK': (\d+)\}", text(nb, "result"))
    assert m and m.group(1) == m.group(2) and int(m.group(1)) >= 5, text(nb, "result")


def test_05_catalogue_view_over_the_whole_list(executed: Callable[[str], Any]) -> None:
    nb = executed("05-op-coverage")
    summary = text(nb, "catalogue-coverage", "stdout")
    m = re.search(
        r"(\d+) rows: (\d+) upstream-accepted, (\d+) ovkit-only, (\d+) not translatable, (\d+) no case",
        summary,
    )
    assert m and int(m.group(1)) == 9747 == sum(int(m.group(i)) for i in range(2, 6)), summary
    assert len(pngs(nb, "catalogue-coverage")) == 1
    assert "<details><summary>per op: " in html(nb, "catalogue-coverage")
    ran = text(nb, "catalogue-run", "stdout")
    assert ran.count(": OK") >= 6 and ": FAIL" not in ran, ran


# ---------------------------------------------------------------------------------------------
# 06-gguf
# ---------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_06_writes_and_inspects_a_gguf(executed: Callable[[str], Any]) -> None:
    nb = executed("06-gguf")
    assert re.search(r"wrote tiny.gguf: [\d.]+ (KiB|MiB), 21 tensors", text(nb, "write"))
    assert "architecture: llama" in text(nb, "inspect")
    tensors = html(nb, "inspect")
    assert "blk.0.ffn_down.weight" in tensors and "q6_K" in tensors and "q4_0" in tensors
    assert len(pngs(nb, "bytes-chart")) == 1
    corrupt = text(nb, "corrupt").splitlines()
    assert [line.split(":")[0] for line in corrupt] == ["truncated.gguf", "header-only.gguf"]
    assert all("GGUFError" in line for line in corrupt)


@pytest.mark.slow
def test_06_fit_check_per_device(executed: Callable[[str], Any]) -> None:
    result = text(executed("06-gguf"), "result")
    assert "does not fit on: simulated gpu-overcommit/GPU, simulated gpu-overcommit/NPU" in result
    assert "fits on: this machine/CPU, simulated laptop/CPU, simulated laptop/GPU" in result


@pytest.mark.slow
def test_06_check_names_the_gpu_cap_and_draws_the_memory(executed: Callable[[str], Any]) -> None:
    nb = executed("06-gguf")
    table = text(nb, "check") + html(nb, "check")
    assert "fails at context creation" in table and "7,516,192,768" in table and "#29124 (open)" in table
    assert len(pngs(nb, "check")) == 1
    fits = text(nb, "check-fits").splitlines()
    assert fits[0].startswith("-c 65536: GPU fails at context creation")
    assert fits[1] == "-c 16384: GPU runs"


@pytest.mark.slow
def test_06_layer_matmuls_from_quantized_blocks(executed: Callable[[str], Any]) -> None:
    result = text(executed("06-gguf"), "result")
    m = re.search(r"(\d+) quantized matmuls, worst NMSE vs dequantized ([\d.e+-]+)", result)
    assert m and int(m.group(1)) == 7 and float(m.group(2)) < 5e-4, result
    from ovkit import oracle

    if oracle.ggml_available():
        m = re.search(r"worst NMSE vs ggml ([\d.e+-]+)", result)
        assert m and float(m.group(1)) < 5e-4, result


def test_01_lists_the_real_backend_next_to_ovkit(executed: Callable[[str], Any]) -> None:
    out = text(executed("01-devices"), "upstream-lists")
    assert "  OPENVINO0: OpenVINO Runtime (" in out  # the installed backend, llama-bench's text
    assert "ovkit (the PRD), simulated 'laptop':" in out and "  GPU: " in out
    assert "why they differ" in out and "registers one device" in out


def test_05_runs_cases_three_ways_and_the_live_agreement(executed: Callable[[str], Any]) -> None:
    nb = executed("05-op-coverage")
    table = html(nb, "upstream-three-way")
    assert "upstream_nmse" in table and "MUL_MAT" in table and "not supported" in table
    assert "agreement: 100.00 %" in text(nb, "upstream-agreement")


# ---------------------------------------------------------------------------------------------
# 07-models
# ---------------------------------------------------------------------------------------------


def test_07_model_fit_placement_run_compare_profile(executed: Callable[[str], Any]) -> None:
    nb = executed("07-models")
    assert "(SIMULATED)" in html(nb, "fit") and "NPU" in html(nb, "fit")
    rejected = html(nb, "placement-rejected")
    assert "inp_embd" in rejected and "256" in rejected and "GPU (SIMULATED)" in rejected
    live = re.search(r"agrees with ovkit's policy on (\d+)/(\d+) nodes", text(nb, "placement-live"))
    assert live and int(live[1]) > 0.9 * int(live[2]), text(nb, "placement-live")
    assert "live_supports_op" in html(nb, "placement-live")
    assert "this process (RSS)" in html(nb, "live-memory-after") and pngs(nb, "live-memory")
    assert "prefill" in text(nb, "run") and "tok/s" in text(nb, "run")
    agree = re.search(r"greedy tokens agree on (\d+)/17; max NMSE ([0-9.e+-]+)", text(nb, "compare"))
    assert agree and int(agree[1]) >= 12 and float(agree[2]) < 2e-3 and pngs(nb, "compare")
    assert "MUL_MAT" in html(nb, "profile") and pngs(nb, "profile")


# ---------------------------------------------------------------------------------------------
# 08-real-models
# ---------------------------------------------------------------------------------------------


def test_08_real_models_fit_placement_answers_nodes_and_the_failing_node(
    executed: Callable[[str], Any],
) -> None:
    nb = executed("08-real-models")
    assert "smollm2-135m:" in text(nb, "setup") and "gemma3-270m:" in text(nb, "setup")
    assert text(nb, "fit").count("(SIMULATED)") >= 6  # three simulated devices per model
    live = {
        m[1]: (int(m[2]), int(m[3]))
        for m in re.finditer(
            r"(\S+): live supports_op agrees with ovkit's policy on (\d+)/(\d+)", text(nb, "placement-live")
        )
    }
    assert live["smollm2-135m"][0] == live["smollm2-135m"][1]  # Q4_1 and Q8_0: every node agrees
    assert 0 < live["gemma3-270m"][0] < live["gemma3-270m"][1]  # its Q5_0 matmuls: refused upstream
    assert "MUL_MAT" in html(nb, "placement-live")
    run = text(nb, "run")
    assert "Paris" in run and "stopped at end of turn" in run  # SmolLM2's own chat template
    assert "no chat template" in run and "tok/s" in run  # Gemma's file has none: a plain prompt
    nodes = text(nb, "compare")
    assert "ovkit: first node past 0.01: none" in nodes and "upstream: first node past" in nodes
    assert pngs(nb, "compare")
    failure = text(nb, "failure")
    assert "SET_ROWS 'cache_v_l0" in failure and "as a single-op case: SET_ROWS," in failure
    assert "1/1 verdicts agree" in failure  # the case runs three ways through ovkit test-ops


def test_08_every_runtime_side_by_side(executed: Callable[[str], Any]) -> None:
    """Section 6: ovkit, llama.cpp, the real backend and GenAI on SmolLM2, each in its own
    process: a row per side with its memory and speeds, the chart drawn."""
    nb = executed("08-real-models")
    table = html(nb, "runtimes")
    for side in ("ovkit", "llama.cpp", "upstream", "genai"):
        assert f"<th>{side}</th>" in table, side
    assert "peak RSS MiB" in table and "decode tok/s" in table and "greedy vs llama.cpp" in table
    assert pngs(nb, "runtimes")
