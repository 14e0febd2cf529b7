"""What a notebook cell shows for ovkit's public results: formatted text and HTML (units by
magnitude, percentages, times in ms/s), with the raw numbers kept (attributes, ``.frame``,
``raw=True``).  Tiny synthetic models; nothing here compiles except the CLI run."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from ovkit.model import Model, footprint, synthetic
from ovkit.model import placement as pl
from ovkit.model.runner import Generation
from ovkit.report import FrameReport, Report, format_duration, format_share
from ovkit.selection import resolve_device
from ovkit.simulate import SimulatedCore

RAW_FLOAT = re.compile(r"\d\.\d{6,}")  # a float printed with all its digits: never in a repr


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Model:
    # rows of 128 and 256: whole groups of the NPU's Q4_0_128 requant, so every device runs it
    path = synthetic(
        "qwen3", tmp_path_factory.mktemp("m") / "qwen3-q8_0.gguf", n_embd=128, n_ff=256, weight_type="q8_0"
    )
    return Model(path, n_ctx=128)


@pytest.fixture(scope="module")
def laptop_nodes(model: Model) -> pd.DataFrame:
    return pl.node_table(model, pl.targets(SimulatedCore("laptop")), n_prompt=8)


def _both(obj: object) -> tuple[str, str]:
    text, page = repr(obj), obj._repr_html_()  # type: ignore[attr-defined]
    assert not RAW_FLOAT.search(text) and not RAW_FLOAT.search(page), text
    return text, page


def test_model_shows_its_shape_sizes_and_device(model: Model) -> None:
    text, page = _both(model)
    assert "object at 0x" not in text and text.startswith("Model qwen3-q8_0.gguf")
    assert re.search(r"^layers +2$", text, re.M) and re.search(r"^heads \(q / kv\) +4 / 2$", text, re.M)
    assert re.search(r"^weights on CPU +[\d.]+ KiB$", text, re.M), text
    assert "KV cache 64.0 KiB (f16)" in text  # K and V · 2 layers · 128 cells · n_embd_kv 64 · f16
    assert "<table>" in page and "qwen3" in page
    assert model.n_ctx == 128 and model.hp.n_layer == 2  # the raw values stay attributes


def test_generation_shows_times_and_speeds_and_keeps_the_seconds() -> None:
    logits = np.zeros((4, 8), np.float32)
    gen = Generation(
        (1, 2, 3, 4), (5, 6, 7), logits, logits[:2], 0.05680153000002974, 0.0213, 17.594420339999942
    )
    text, page = _both(gen)
    lines = text.splitlines()
    assert lines[0] == "generation: 4 prompt tokens, 3 generated"
    assert re.match(r"prefill +4 +56\.8 ms +70\.4 tok/s$", lines[2]), lines
    assert re.match(r"decode +2 +21\.3 ms +93\.9 tok/s$", lines[3]), lines
    assert re.match(r"compile +17\.6 s +not counted", lines[4]), lines
    assert lines[-1] == "generated ids: 5 6 7"
    assert "56.8 ms" in page and "17.6 s" in page
    assert gen.prefill_s == 0.05680153000002974 and gen.compile_s == 17.594420339999942


def test_fit_in_units_by_magnitude_raw_bytes_kept(model: Model) -> None:
    fit = footprint.fit(model, core=SimulatedCore("laptop"))
    assert isinstance(fit, FrameReport)
    text, page = _both(fit)
    rows = [line for line in text.splitlines() if "(SIMULATED)" in line]
    assert len(rows) == 3 and all(re.search(r"KiB .* GiB +yes +yes +[\d.,]+ GiB$", r) for r in rows), text
    assert not re.search(r"\d{5,}", text)  # no byte counts
    assert "weight" in page and "<td style='text-align: left'>yes</td>" in page
    raw = footprint.fit(model, raw=True, core=SimulatedCore("laptop"))
    assert raw.equals(fit.frame) and raw["kv_cache_bytes"].iloc[0] == 2 * 2 * 128 * 64 * 2


def test_placement_summary_as_percentages(laptop_nodes: pd.DataFrame) -> None:
    s = pl.summary(laptop_nodes)
    text, _ = _both(s)
    assert text.count("100.0 %") == 2 * len(s) and not re.search(r"\b1\.0\b", text), text
    assert re.search(r"^prefill +NPU \(SIMULATED\) +\d+ +\d+ +0 +100\.0 % +100\.0 % +– +yes$", text, re.M), (
        text
    )
    assert s.frame["flops_on_device"].eq(1.0).all()  # the fractions themselves stay in .frame
    assert pl.summary(laptop_nodes, raw=True).equals(s.frame)


def test_no_fallback_is_a_sentence_not_a_bare_header(laptop_nodes: pd.DataFrame) -> None:
    fb = pl.fallbacks(laptop_nodes)
    text, page = _both(fb)
    assert len(fb) == 0 and "none: every node of every graph runs on its device" in text
    assert "CPU (SIMULATED), GPU (SIMULATED), NPU (SIMULATED)" in text
    assert len(text.splitlines()) == 2 and "<table>" not in page  # the title and that sentence
    assert list(pl.fallbacks(laptop_nodes, raw=True).columns)[:2] == ["graph", "device"]


def test_fallbacks_table_when_nodes_fall_back(laptop_nodes: pd.DataFrame) -> None:
    nodes = laptop_nodes.copy()
    first = nodes.index[(nodes["node"] == "inp_embd") & (nodes["class"] == "GPU")]
    nodes.loc[first, "on_device"] = False  # as the GPU gate on 256-wide Q4_K GET_ROWS marks it
    nodes.loc[first, "reason"] = "GET_ROWS of q4_K rows of 256 is rejected"
    fb = pl.fallbacks(nodes)
    text, page = _both(fb)
    assert len(fb) == 2 and text.startswith("nodes that fall back to ggml's CPU backend (2)")
    assert re.search(r"^graph +device +index +node +op +type +ne +reason$", text, re.M)
    assert re.search(r"^decode +GPU \(SIMULATED\) +0 +inp_embd +GET_ROWS .* rejected$", text, re.M), text
    assert "inp_embd" in page and "<table>" in page


def test_resolve_device_in_a_few_lines() -> None:
    sel = resolve_device(env={"GGML_OPENVINO_DEVICE": "GPU", "GGML_OPENVINO_PROFILING": "1"}, log=False)
    text, page = _both(sel)
    assert text.splitlines() == [
        "selected device: CPU",
        "device          CPU (CPU)",
        "because         GGML_OPENVINO_DEVICE='GPU' is not available: fell back",
        f"available       {', '.join(sel.available)}",
        "other settings  GGML_OPENVINO_PROFILING=1",
    ] or sel.available != ("CPU",)
    assert "OvkitConfig(" not in text and "fell back" in page
    assert sel.config.profiling is True and sel.fell_back  # the parsed config stays an attribute


def test_formatters() -> None:
    assert [format_duration(s) for s in (17.594420339999942, 0.0568, 0.000812)] == [
        "17.6 s",
        "56.8 ms",
        "812 µs",
    ]
    assert format_share(1.0) == "100.0 %" and format_share(0.375) == "37.5 %"
    assert str(Report("t", ("", ""), (("a", "1"),))) == "t\na  1"
    with pytest.raises(ValueError, match=r"unknown column kinds \['megabytes'\]"):
        FrameReport("t", pd.DataFrame(), {"x": "megabytes"})


def test_cli_prints_compile_time_next_to_speeds(model: Model, capsys: pytest.CaptureFixture[str]) -> None:
    from ovkit.cli import main

    assert main(["run-model", str(model.gguf.path), "--tokens", "1 5 9", "-n", "2"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("prefill:"))
    assert re.fullmatch(
        r"prefill: [\d,.]+ tok/s +decode: [\d,.]+ tok/s +compile: [\d.]+ (ms|s) \(\d+ shape buckets, not in the speeds\)",
        line,
    ), line
