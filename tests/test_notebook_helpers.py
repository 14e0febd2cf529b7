"""ovkit.notebook: what the walkthrough cells print is formatted by magnitude and readable."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from ovkit import engine, notebook
from ovkit.buffers import SIZE_MAX
from ovkit.graph import Graph


def test_bytes_and_durations_by_magnitude() -> None:
    assert [notebook.format_bytes(n) for n in (0, 512, 1536, 16 << 20, 3 << 29)] == [
        "0 B",
        "512 B",
        "1.5 KiB",
        "16.0 MiB",
        "1.5 GiB",
    ]
    assert notebook.format_bytes(SIZE_MAX) == "unlimited" and notebook.format_bytes(None) == "unknown"
    assert [notebook.format_duration(s) for s in (2.5, 0.0647492019999163, 0.000812, 3e-7)] == [
        "2.50 s",
        "64.7 ms",
        "812 µs",
        "0.30 µs",
    ]
    assert notebook.byte_scale(16 << 20) == ("MiB", 1 << 20) and notebook.byte_scale(3 << 30)[0] == "GiB"


def test_report_renders_as_text_and_escaped_html() -> None:
    r = notebook.Report("title", ("name", "size"), (("<b>", "1.0 KiB"),), ("a note",))
    assert str(r).splitlines() == ["title", "name  size", "<b>   1.0 KiB", "a note"]
    assert "&lt;b&gt;" in r._repr_html_() and "<b>" not in r._repr_html_().replace("<b>title</b>", "")
    assert str(notebook.Report("empty", ("a",), ())) == "empty\na"


def test_profile_names_ggml_nodes_with_times_in_microseconds() -> None:
    """A real PERF_COUNT profile reads as ggml nodes (not MatMul_16 / real_time_us)."""
    g = Graph()
    x = g.input("x", (8, 64))
    y = g.soft_max(g.mul_mat(g.constant(np.ones((64, 64), np.float32), name="w"), g.rms_norm(x, 1e-6)))
    profiled = engine.RunConfig(inference_precision="f32", profiling=True)
    engine.compute_graph(g, [y], {"x": np.ones((8, 64), np.float32)}, "CPU", config=profiled)
    prof = notebook.NodeProfile.from_frame(engine.get_engine().last_profile(), "CPU")
    names = [n for n, _, _ in prof.nodes]
    assert {"MUL_MAT #3", "RMS_NORM #2", "SOFT_MAX #4"} <= set(names), names
    assert (
        all(s > 0 for _, _, s in prof.nodes)
        and abs(sum(s for *_, s in prof.nodes) - prof.total_seconds) < 1e-12
    )
    text = str(prof)
    assert "µs" in text or "ms" in text
    assert "real_time_us" not in text and "MatMul_" not in text
    assert prof.chart().axes[0].get_xlabel() == "time per run (µs)"


def test_profile_groups_the_layers_of_one_ggml_node() -> None:
    frame = pd.DataFrame(
        {
            "node": ["x", "UNARY.GELU #3", "UNARY.GELU #3_7", "ADD #1"],
            "type": ["Parameter", "Subgraph", "IsFinite", "Eltwise"],
            "real_time_us": [0.0, 30.0, 10.0, 5.0],
        }
    )
    prof = notebook.NodeProfile.from_frame(frame, "CPU")
    assert [(n, k) for n, k, _ in prof.nodes] == [
        ("UNARY.GELU #3", "IsFinite, Subgraph"),
        ("ADD #1", "Eltwise"),
    ]
    assert [s for *_, s in prof.nodes] == pytest.approx([40e-6, 5e-6])
    assert prof.report().column("share") == ["89%", "11%"]


def test_cache_stats_read_as_a_sentence() -> None:
    stats = engine.CacheStats(1, 2, 0, 2, 0.0647492019999163, 2, 64, True)
    assert str(stats) == (
        "compiled-graph cache: hits 1, misses 2 (33% hit rate), evictions 0, compiles 2 in 64.7 ms, entries 2 of 64"
    )


def test_every_test_backend_ops_op_has_a_family() -> None:
    """The summaries group by op family: no op of the shipped catalogue falls into "other"."""
    from ovkit.catalogue import run as catalogue

    ops = {r.op for r in catalogue.read_rows()}
    assert {op for op in ops if notebook.op_family(op) == "other"} == set()
    assert notebook.op_family("UNARY.EXP") == notebook.op_family("EXP") == "activations (unary)"
    assert notebook.op_family("GLU.SWIGLU") == "gated (GLU)" and notebook.op_family("NOT_AN_OP") == "other"
    assert len(notebook.OP_FAMILIES) <= 12  # a summary, not the table again


def test_collapsed_shows_its_title_and_holds_the_whole_content() -> None:
    import matplotlib.pyplot as plt
    import pandas as pd

    frame = pd.DataFrame({"op": ["ADD"] * 3, "note": ["x" * 300, "<b>", "y"]})
    folded = notebook.Collapsed("every row <3", frame.style.format(escape="html"))
    page = folded._repr_html_()
    assert page.startswith("<details><summary>every row &lt;3</summary>") and "x" * 300 in page
    assert "&lt;b&gt;" in page and repr(folded) == "every row <3 (collapsed)"
    fig, _ = plt.subplots()
    plt.close(fig)
    assert 'src="data:image/png;base64,' in notebook.Collapsed("a figure", fig)._repr_html_()


def test_coverage_heatmap_by_family_has_a_row_per_family() -> None:
    import pandas as pd

    every = pd.DataFrame(
        {
            "op": ["ADD", "SUB", "MUL_MAT", "EXP", "ADD"],
            "device_class": ["CPU", "CPU", "CPU", "GPU", "GPU"],
            "dtype": ["f32"] * 5,
            "status": ["OK", "OK", "OK", "not supported", "OK"],
        }
    )
    fig = notebook.coverage_heatmap(every, by="family")
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert labels == ["activations (unary)", "arithmetic", "matrix products"]
    assert "op family" in fig.axes[0].get_title()
    with pytest.raises(ValueError, match="by 'dtype'"):
        notebook.coverage_heatmap(every, by="dtype")
