"""``ovkit test-ops``: the op harness against real ggml (or numpy) on the real CPU device."""

from __future__ import annotations

import json

import pytest

from ovkit import testops
from ovkit.cli import main


def test_cli_lists_ok_and_unsupported_with_reasons(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["test-ops", "-o", "ADD", "-o", "EXP", "-o", "SWIGLU", "--no-progress"])
    out = capsys.readouterr().out
    assert code == 0, out
    lines = out.splitlines()
    assert lines[0].startswith("Testing CPU (mode test, reference ")
    assert any(line.startswith("  ADD(type=f32,ne_a=[10,3,4,1],ne_b=[10,3,4,1]): OK") for line in lines)
    exp = [line for line in lines if line.startswith("  UNARY.EXP(type=f32")]
    assert exp and "not supported [CPU]" in exp[0] and "f32" in exp[0].split("not supported", 1)[1]
    odd = [line for line in lines if "GLU.SWIGLU(type=f32,ne_a=[33," in line]
    assert odd and "not supported" in odd[0] and "even" in odd[0]
    assert "  Backend CPU: OK" in lines
    assert any(line.endswith("not supported") and "tests passed" in line for line in lines)


def test_json_output_and_totals(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["test-ops", "-o", "SCALE", "-o", "EXP", "--json", "--no-progress"])
    payload = json.loads(capsys.readouterr().out)
    assert code == 0
    assert payload["device"] == "CPU" and payload["mode"] == "test"
    statuses = {c["case"]: c["status"] for c in payload["cases"]}
    assert statuses["SCALE(type=f32,ne_a=[10,10,1,1],s=0.5)"] == "OK"
    assert payload["summary"]["not_supported"] == sum(s == "not supported" for s in statuses.values()) >= 1
    assert payload["summary"]["failed"] == 0


def test_any_failure_gives_exit_code_one(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from dataclasses import replace

    from ovkit.catalogue import curated

    strict = tuple(replace(c, max_err=-1.0) for c in curated.cases())  # nothing passes a negative bound
    monkeypatch.setattr(
        curated, "cases", lambda tag=None: tuple(c for c in strict if tag is None or tag in c.tags)
    )
    code = main(["test-ops", "-o", "SQR", "--no-progress"])
    out = capsys.readouterr().out
    assert code == 1
    assert "SQR(type=f32,ne_a=[10,10,1,1]): FAIL NMSE" in out
    assert "  Backend CPU: FAIL" in out


def test_bad_arguments_are_named(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["test-ops", "-o", "NOPE"]) == 2
    assert "unknown op 'NOPE'" in capsys.readouterr().err
    assert main(["test-ops", "-b", "TPU"]) == 2
    assert "device 'TPU' is not available" in capsys.readouterr().err


def test_dataframes_for_notebooks() -> None:
    df = testops.test_ops(["MUL_MAT", "RMS_NORM"], progress=False, reference="numpy")
    assert list(df.columns[:4]) == ["op", "case", "status", "detail"]
    assert set(df["op"]) == {"MUL_MAT", "RMS_NORM"}
    assert (df["status"] == "OK").all(), df[["case", "detail"]]
    assert (df["reference"] == "numpy").all()
    perf = testops.perf_ops("RMS_NORM", progress=False)
    assert perf.loc[0, "status"] == "OK" and perf.loc[0, "us_per_run"] > 0 and perf.loc[0, "gbps"] > 0
    cat = testops.catalogue_table()
    assert len(cat) == len(testops.build_catalogue()) and cat["case"].is_unique


def test_simulated_gpu_applies_gpu_class_gates(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["test-ops", "--simulate", "laptop", "-b", "GPU", "-o", "DIV", "--no-progress"])
    out = capsys.readouterr().out
    assert code == 0
    assert "Testing GPU" in out
    assert "DIV(type=f32,ne_a=[10,5,3,2],ne_b=[10,1,1,1]): not supported [GPU]" in out


@pytest.mark.slow
def test_every_supported_case_passes_on_cpu(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["test-ops", "--no-progress"])
    out = capsys.readouterr().out
    failures = [line for line in out.splitlines() if ": FAIL" in line]
    assert code == 0 and not failures, "\n".join(failures)
    unsupported = [line for line in out.splitlines() if "not supported [CPU]" in line]
    assert unsupported, "the catalogue includes cases the policy rejects"
    assert all(len(line.split("not supported [CPU]", 1)[1].strip()) > 10 for line in unsupported)


def test_isolate_turns_a_crashing_op_into_fail_lines(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import sys

    from ovkit.catalogue import run

    # A worker that segfaults on SQRT's cases (as a broken translation would) and runs the others.
    crash = (
        "import os, runpy, signal; from ovkit.catalogue import curated; real = curated.find; "
        "curated.find = lambda n: os.kill(os.getpid(), signal.SIGSEGV) if n.startswith('SQRT(') else real(n); "
        "runpy.run_module('ovkit.catalogue.run', run_name='__main__')"
    )
    monkeypatch.setattr(run, "WORKER_COMMAND", (sys.executable, "-c", crash))
    code = main(["test-ops", "--isolate", "-o", "SQR", "-o", "SQRT", "--no-progress"])
    out = capsys.readouterr().out
    assert code == 1
    assert "SQR(type=f32,ne_a=[10,10,1,1]): OK" in out
    assert "SQRT(type=f32,ne_a=[10,10,1,1]): FAIL the worker process crashed (SIGSEGV)" in out


def test_catalogue_covers_every_registered_op() -> None:
    from ovkit.ops.table import ENTRIES

    covered = {c.op for c in testops.build_catalogue()}
    missing = [e.key for e in ENTRIES if e.registered and e.key not in covered]
    assert not missing, f"ops without a test-ops case: {missing}"
    # the table's spelling filters too
    assert {c.op for c in testops.select(testops.build_catalogue(), "UNARY.GELU")} == {"UNARY.GELU"}


def test_simulated_runs_are_labelled(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["test-ops", "--simulate", "laptop", "-b", "NPU", "-o", "SCALE", "--no-progress"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("Testing NPU [SIMULATED laptop")


def test_upstream_hints_report_the_effective_precision() -> None:
    exact = testops.test_ops("MUL_MAT", progress=False, reference="numpy")
    upstream = testops.test_ops("MUL_MAT", progress=False, reference="numpy", hints="upstream")
    assert (exact["status"] == "OK").all() and (upstream["status"] == "OK").all()
    assert set(exact["precision"]) == {"f32"}
    # upstream's naive path asks EXECUTION_MODE=PERFORMANCE for a MUL_MAT graph: the CPU picks its
    # fastest precision (bf16 where the CPU has it), which the harness reads back and reports
    assert upstream["precision"].iloc[0] in ("bf16", "f16", "f32")
    assert (upstream["err"] >= exact["err"]).all()
    with pytest.raises(ValueError, match="hints='fast' is not valid"):
        testops.test_ops("MUL_MAT", progress=False, hints="fast")


def test_perf_vs_ggml_times_both(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["test-ops", "perf", "--vs-ggml", "-o", "ROPE", "--no-progress"])
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("  ROPE("))
    assert code == 0
    assert "us/run" in line and "GB/s" in line and "ggml CPU" in line and line.rstrip().endswith("x)")


def test_perf_json(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["test-ops", "perf", "-o", "MUL", "--json", "--no-progress"])
    payload = json.loads(capsys.readouterr().out)
    assert code == 0 and payload["mode"] == "perf" and payload["summary"]["failed"] == 0
    (row,) = payload["cases"]
    assert row["status"] == "OK" and row["us_per_run"] > 0 and row["gbps"] > 0 and row["gflops"] is None


def test_quantized_weights_as_constants() -> None:
    df = testops.test_ops("GET_ROWS", progress=False).set_index("case")
    q40 = df.loc["GET_ROWS(type=q4_0,ne_a=[256,10,1,1],ne_rows=[5,1,1,1])"]
    assert q40["status"] == "OK" and q40["err"] == 0.0
    q4k = df.loc["GET_ROWS(type=q4_K,ne_a=[256,10,1,1],ne_rows=[5,1,1,1])"]
    assert q4k["status"] == "not supported" and "[rows.q256]" in q4k["detail"]
    mm = testops.test_ops("MUL_MAT", progress=False)
    quantized = mm[mm["case"].str.contains(r"/(?:q\d|mxfp4)", regex=True)]
    assert len(quantized) == 8 and (quantized["status"] == "OK").all(), quantized[["case", "detail"]]


def test_progress_bar_goes_to_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    assert testops.main("test", "SCALE", progress=True) == 0
    captured = capsys.readouterr()
    assert "test-ops test CPU" in captured.err and "case" in captured.err  # tqdm's bar
    assert "test-ops test CPU" not in captured.out and "SCALE(type=f32" in captured.out


def test_case_names_are_unique() -> None:
    for build in (testops.build_catalogue, testops.build_perf_catalogue):
        names = [c.name for c in build()]
        assert len(names) == len(set(names)), [n for n in names if names.count(n) > 1]


def test_the_ggml_comparison_set_runs_as_test_ops(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["test-ops", "--set", "ggml", "-o", "CUMSUM", "--no-progress"])
    lines = capsys.readouterr().out.splitlines()
    assert code == 0
    cases = [x for x in lines if x.startswith("  CUMSUM(")]
    assert len(cases) == 3 and all(": OK (NMSE" in x for x in cases), cases
    assert "CUMSUM(type=f32,ne_a=[200,3,1,1],v=long): OK" in "\n".join(cases)
    assert "  3/3 tests passed, 0 not supported" in lines
