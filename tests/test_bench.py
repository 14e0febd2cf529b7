"""``ovkit bench``: llama-bench's pp/tg table for ovkit and its baselines, one run, load recorded."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ovkit.model.bench import BenchError, BenchReport, BenchResult, BenchSettings, bench, load_limits
from ovkit.model.synthetic import synthetic

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("bench") / "tiny-q8_0.gguf"
    return synthetic("llama", path, n_embd=64, n_layer=1, n_vocab=512, weight_type="q8_0")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"precision": "bf17"}, "precision 'bf17' is not one of exact, device"),
        ({"against": ("llama.cpp", "vllm")}, "--against 'vllm' is not one of"),
        ({"reps": 0}, "reps=0 must be >= 1"),
        ({"threads": 0}, "threads=0 must be >= 1"),
        ({"n_prompt": 0, "n_gen": 0}, "nothing to measure"),
    ],
)
def test_bad_settings_name_the_value(tiny: Path, kwargs: dict, message: str) -> None:
    with pytest.raises(BenchError, match=message.replace("(", r"\(")):
        BenchSettings(tiny, **kwargs)


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(BenchError, match="nope.gguf: no such model file"):
        BenchSettings(tmp_path / "nope.gguf")


def _report(load_before: float, load_after: float, cores: int = 2) -> BenchReport:
    s = BenchSettings(Path(__file__), n_prompt=8, n_gen=4, reps=2, against=("llama.cpp",))
    results = (
        BenchResult("ovkit", "pp8", 8, "f32", (0.1, 0.2)),
        BenchResult("llama.cpp", "pp8", 8, "ggml CPU kernels", (0.4, 0.4)),
        BenchResult("ovkit", "tg4", 4, "f32", (1.0, 1.0)),
        BenchResult("llama.cpp", "tg4", 4, "ggml CPU kernels", error="llama.cpp failed (signal 4)"),
    )
    return BenchReport(s, results, (load_before, 0, 0), (load_after, 0, 0), cores, 1024)


def test_figures_are_mean_and_spread_of_the_repetitions() -> None:
    r = _report(0.1, 2.0)
    pp = r.results[0]
    assert pp.tok_s == (80.0, 40.0) and pp.mean == 60.0 and pp.std == pytest.approx(28.284, rel=1e-4)
    assert r.ratio("pp8", "ovkit", "llama.cpp") == pytest.approx(3.0)
    assert r.ratio("tg4", "ovkit", "llama.cpp") is None  # the baseline failed: no ratio at all
    md = r.to_markdown()
    assert "| ovkit | f32 | 2 | 1 | pp8 | 60.00 ± 28.28 |" in md
    assert "ovkit / llama.cpp pp8: 3.00x" in md and "tg4:" not in md.split("|")[-1]
    assert "load average before 0.10" in md
    assert "llama.cpp did not run: llama.cpp failed (signal 4)" in md


def test_a_busy_machine_is_called_out() -> None:
    before, after = load_limits(threads=2, cores=2)
    assert not any("busy" in w for w in _report(before - 0.1, after - 0.1).warnings())
    assert any("busy" in w for w in _report(before + 0.1, 0.0).warnings())
    assert any("busy" in w for w in _report(0.0, after + 0.1).warnings())


def test_csv_and_json_carry_every_row() -> None:
    r = _report(0.1, 0.2)
    lines = r.format("csv").splitlines()
    assert lines[0].startswith("side,precision,threads,fa,test,t/s,stddev,reps,error") and len(lines) == 5
    data = json.loads(r.format("json"))
    assert data["times_s"]["ovkit pp8"] == [0.1, 0.2] and data["load_before"][0] == 0.1
    with pytest.raises(BenchError, match="output format 'xml'"):
        r.format("xml")


@pytest.mark.slow
def test_every_side_runs_every_test_the_same_number_of_times(tiny: Path) -> None:
    report = bench(BenchSettings(tiny, n_prompt=16, n_gen=4, reps=2, against=("llama.cpp", "upstream")))
    got = {(r.side, r.test): r for r in report.results}
    assert set(got) == {(side, t) for side in ("ovkit", "llama.cpp", "upstream") for t in ("pp16", "tg4")}
    for r in got.values():
        assert not r.error and len(r.times_s) == 2 and all(t > 0 for t in r.times_s)
    assert got[("ovkit", "pp16")].precision == "f32"
    # the real backend's precision as OpenVINO names it, not the repr of an openvino.Type
    assert re.fullmatch(r"OpenVINO CPU default \((f32|bf16|f16)\)", str(got[("upstream", "pp16")].precision))
    assert len(report.load_before) == 3 and report.model_bytes == tiny.stat().st_size
    # every side's greedy check is as long as llama.cpp's (ovkit's was one token short)
    assert len({len(r.greedy) for r in report.runs}) == 1 and report.runs[0].greedy


@pytest.mark.slow
def test_the_command_prints_json_and_fails_clearly(tiny: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    ok = subprocess.run(
        [
            sys.executable,
            "-m",
            "ovkit",
            "bench",
            str(tiny),
            "-p",
            "8",
            "-n",
            "2",
            "-r",
            "1",
            "--against",
            "none",
            "-o",
            "json",
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    assert ok.returncode == 0, ok.stderr
    rows = json.loads(ok.stdout)["results"]
    assert [(r["side"], r["test"]) for r in rows] == [("ovkit", "pp8"), ("ovkit", "tg2")]
    bad = subprocess.run(
        [sys.executable, "-m", "ovkit", "bench", str(tiny), "--precision", "fp8"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert bad.returncode == 2 and "precision 'fp8' is not one of exact, device" in bad.stderr
