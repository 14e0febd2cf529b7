"""``ovkit test-ops --catalogue test-backend-ops``: test-backend-ops' own rows run against ggml."""

from __future__ import annotations

import dataclasses
import gzip
import re
import sys
from pathlib import Path

import pandas as pd
import pytest

from ovkit.catalogue import backend_ops, run, view
from ovkit.cli import main

ARGSORT = "type=f32,ne=[16,10,10,10],order=0"
#: SET_ROWS with ne[3] = 3: ovkit translates it, upstream's policy refuses it (output ne[3] > 1)
SET_ROWS_NE3 = "type_src=f32,type_dst=f32,type_idx=i64,ne=[3,3,1,1],nr23=[2,3],r=2,v=0"


def _cases(tmp_path: Path, rows: list[tuple[str, str]], gz: bool = False, supported: bool = True) -> Path:
    if supported:  # the shipped file's columns, upstream's verdict included
        text = "op_name,op_params,supported\n" + "".join(f'{op},"{params}",0\n' for op, params in rows)
    else:  # a user's own list
        text = "op_name,op_params\n" + "".join(f'{op},"{params}"\n' for op, params in rows)
    if gz:
        p = tmp_path / "cases.csv.gz"
        p.write_bytes(gzip.compress(text.encode()))
    else:
        p = tmp_path / "cases.csv"
        p.write_text(text)
    return p


def _run_catalogue(cases: Path, *extra: str) -> int:
    """``ovkit test-ops --catalogue test-backend-ops --cases CASES`` in this process, no bar."""
    args = ["test-ops", "--catalogue", "test-backend-ops", "--cases", str(cases), *extra]
    return main([*args, "--workers", "0", "--no-progress"])


def test_cli_prints_a_line_per_case_and_totals_per_op(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cases = _cases(
        tmp_path,
        [("ARGSORT", ARGSORT), ("SET_ROWS", SET_ROWS_NE3), ("TOP_K", "type=f32,ne=[16,10,1,1],k=3,ties=0")],
    )
    code = _run_catalogue(cases)
    out = capsys.readouterr().out
    assert code == 0, out
    assert f"  ARGSORT({ARGSORT}): OK" in out
    line = next(x for x in out.splitlines() if x.startswith("  SET_ROWS("))
    assert "not supported [CPU]" in line and "ne[3]" in line  # the policy's reason
    assert re.search(r"^ARGSORT\s+1\s+0\s+0\s+0\s+0\s+1\s+100\.0$", out, re.M), out  # totals per op
    assert "  Backend CPU: OK" in out


def test_policy_none_runs_what_upstream_refuses(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cases = _cases(tmp_path, [("SET_ROWS", SET_ROWS_NE3)], gz=True)
    code = _run_catalogue(cases, "--policy", "none")
    out = capsys.readouterr().out
    assert code == 0 and f"  SET_ROWS({SET_ROWS_NE3}): OK" in out, out


def _fail_every_argsort(monkeypatch: pytest.MonkeyPatch) -> None:
    """ARGSORT cases whose bound no error meets: a wrong result, as far as the run can tell."""
    real = backend_ops.BUILDERS["ARGSORT"]

    def strict(op: str, params: str, p: dict[str, object]) -> backend_ops.Case:
        return dataclasses.replace(real(op, params, p), max_err=-1.0)

    monkeypatch.setitem(backend_ops.BUILDERS, "ARGSORT", strict)


def test_a_wrong_result_is_a_fail_and_exit_code_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _fail_every_argsort(monkeypatch)
    cases = _cases(tmp_path, [("ARGSORT", ARGSORT)])
    code = _run_catalogue(cases)
    out = capsys.readouterr().out
    assert code == 1
    assert f"  ARGSORT({ARGSORT}): FAIL NMSE" in out and "  Backend CPU: FAIL" in out


def test_a_case_list_without_verdicts_gets_the_policys(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cases = _cases(tmp_path, [("ARGSORT", ARGSORT), ("SET_ROWS", SET_ROWS_NE3)], supported=False)
    code = _run_catalogue(cases)
    out = capsys.readouterr().out
    assert code == 0, out
    assert "the backend's verdict: ovkit's copy of its supports_op" in out
    assert f"  ARGSORT({ARGSORT}): OK" in out and "not supported [CPU]" in out


def test_worker_processes_give_the_same_verdicts(tmp_path: Path) -> None:
    rows = [run.Row("ARGSORT", ARGSORT), run.Row("SET_ROWS", SET_ROWS_NE3), run.Row("CONV_3D_X", "a=1")]
    df = run.run(rows, policy="upstream", workers=2, progress=False).set_index("op")
    assert df.loc["ARGSORT", "status"] == "OK" and bool(df.loc["ARGSORT", "accepted"])
    assert df.loc["SET_ROWS", "status"] == "not supported" and not df.loc["SET_ROWS", "accepted"]
    assert df.loc["CONV_3D_X", "status"] == "no case" and "no case builder" in df.loc["CONV_3D_X", "detail"]


def test_bad_case_lists_are_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.csv"
    assert main(["test-ops", "--catalogue", "test-backend-ops", "--cases", str(missing)]) == 2
    assert "nope.csv" in capsys.readouterr().err
    bad = tmp_path / "bad.csv"
    bad.write_text("name,params\nADD,x\n")
    assert main(["test-ops", "--catalogue", "test-backend-ops", "--cases", str(bad)]) == 2
    assert "op_name" in capsys.readouterr().err
    assert main(["test-ops", "--catalogue", "test-backend-ops", "-o", "NOPE"]) == 2
    assert "unknown op 'NOPE'" in capsys.readouterr().err


def test_worker_count_is_bounded_by_the_cores(capsys: pytest.CaptureFixture[str]) -> None:
    import os

    top = 2 * (os.cpu_count() or 1)
    for n in (top + 1, 100_000, -1):
        assert main(["test-ops", "--catalogue", "test-backend-ops", "--workers", str(n)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [f"ovkit: error: --workers {n}: expected 0 (in this process) to {top} (twice the "
                       f"{top // 2} cores)"], err  # fmt: skip
    with pytest.raises(ValueError, match=f"workers={top + 1}: expected 0"):
        run.run([], workers=top + 1)


def test_stratified_sample_keeps_every_op() -> None:
    rows = run.read_rows()
    sample = run.stratified(rows, 2000)
    assert 2000 <= len(sample) < 2600
    assert {r.op for r in sample} == {r.op for r in rows}


def test_coverage_view_counts_each_status_per_op() -> None:
    results = pd.DataFrame(
        {
            "op": ["ADD", "ADD", "ADD", "CONV_2D"],
            "status": ["OK", "OK", "FAIL", "not translatable"],
            "accepted": [True, False, True, False],
        }
    )
    t = view.coverage(results)
    assert list(t.columns) == list(view.CATEGORIES)
    assert t.loc["ADD", "upstream-accepted"] == 1 and t.loc["ADD", "ovkit-only"] == 1
    assert t.loc["ADD", "FAIL"] == 1 and t.loc["CONV_2D", "not translatable"] == 1
    assert list(t.index) == ["ADD", "CONV_2D"]


def test_a_crashing_worker_costs_only_its_case(monkeypatch: pytest.MonkeyPatch) -> None:
    # every worker aborts (as a native assert would) on its first case: each case is a FAIL
    # naming the signal, a new worker takes the next one, and the run finishes
    # and saying why on stderr, as ggml's asserts do
    said = "sys.stderr.write('/src/ggml.c:7717: GGML_ASSERT(imatrix != NULL) failed\\n'); sys.stderr.flush()"
    crash = f"import os, sys; sys.stdin.readline(); {said}; os.abort()"
    monkeypatch.setattr(run, "WORKER_COMMAND", (sys.executable, "-c", crash))
    rows = [run.Row("ARGSORT", ARGSORT), run.Row("SET_ROWS", SET_ROWS_NE3)]
    df = run.run(rows, policy="none", isolate=True, progress=False)
    assert list(df["status"]) == ["FAIL", "FAIL"]
    assert all(
        d == "the worker process crashed (SIGABRT): ggml.c:7717: GGML_ASSERT(imatrix != NULL) failed"
        for d in df["detail"]
    )


def test_get_rows_of_an_unbatched_q5_k_weight_matches_ggml() -> None:
    """A q5_K table of shape (1, 1, m, k) gathers its rows as ggml does (it once failed to reshape)."""
    row = run.Row("GET_ROWS", "type=q5_K,n=256,m=5,r=4,be1=1,be2=1,v=0")
    result = run.run_row(row, policy="none")
    assert result.status == "OK", result.detail


#: The CI sample: at least 2,000 rows across every op of the shipped file, run as a user runs
#: ``ovkit test-ops --catalogue test-backend-ops --policy none --sample 2000`` (the whole file is
#: ``python benchmarks/bench_catalogue.py``).
CI_SAMPLE = 2000


@pytest.mark.slow
def test_a_stratified_sample_passes_every_case_ovkit_claims() -> None:
    """No FAIL among the rows ovkit translates, and every row the backend accepts passes."""
    rows = run.read_rows()
    df = run.run(run.stratified(rows, CI_SAMPLE), policy="none", workers=2, progress=False)
    assert len(df) >= CI_SAMPLE and set(df["op"]) == {r.op for r in rows}

    def listing(d: pd.DataFrame) -> str:
        return "\n".join(
            f"  {c}: {s} {x}" for c, s, x in zip(d["case"], d["status"], d["detail"], strict=True)
        )

    fails = df[df["status"] == "FAIL"]
    assert fails.empty, f"{len(fails)} of {len(df)} rows FAIL:\n{listing(fails)}"
    accepted = df[df["accepted"]]
    missed = accepted[accepted["status"] != "OK"]
    assert missed.empty, (
        f"{len(missed)} of {len(accepted)} upstream-accepted rows do not pass:\n{listing(missed)}"
    )


#: test-backend-ops' long-KV prefill rows outside the shipped half (head size 128 and 256, 512 query
#: rows, a mask): ovkit's SDPA form, which the CPU plugin miscomputed on AVX-512 (NMSE 1.0)
LONG_PREFILL_ATTENTION = [
    f"hsk={hs},hsv={hs},nh={nh},nr23=[{r},1],kv={kv},nb=512,mask=1,sinks=0,max_bias=0.000000,"
    "logit_softcap=0.000000,prec=f32,type_K=f16,type_V=f16,permute=[0,1,2,3]"
    for hs, nh, r, kv in [(128, 8, 4, 4096), (256, 4, 6, 4096), (256, 4, 6, 16384)]
]


@pytest.mark.slow
def test_long_prefill_attention_rows_pass(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The held-out rows that failed on AVX-512 machines pass as a user runs them."""
    assert not any(p in {r.params for r in run.read_rows()} for p in LONG_PREFILL_ATTENTION)
    assert (
        _run_catalogue(
            _cases(tmp_path, [("FLASH_ATTN_EXT", p) for p in LONG_PREFILL_ATTENTION]), "--policy", "none"
        )
        == 0
    )
    assert "3/3 tests passed; 0 FAIL" in capsys.readouterr().out


def test_an_inner_node_the_policy_refuses_is_not_supported() -> None:
    """As test-backend-ops' test mode asks every node: this CONT's output is accepted, the bf16
    transpose feeding it is not (the CPU policy's bf16 views), so the case is not run."""
    r = run.run_row(run.Row("CONT", "type=bf16,ne=[2,3,5,7],use_view_slice=0"), policy="upstream")
    assert r.accepted and r.status == "not supported", r
    assert "(every node asked) TRANSPOSE" in r.detail
