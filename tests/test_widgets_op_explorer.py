"""The op explorer, headless: catalogue cases, policy verdicts, runs on (simulated) devices, chart."""

from __future__ import annotations

import pytest

from ovkit.simulate import SimulatedCore
from ovkit.widgets.op_explorer import (
    REAL_BACKEND,
    OpExplorer,
    customise,
    explore,
    op_catalogue,
    parse_shape,
    policy_verdicts,
)

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def explorer():
    e = OpExplorer(core=SimulatedCore("laptop"))
    yield e
    e.close()


def test_catalogue_lists_test_ops_cases() -> None:
    cat = op_catalogue()
    assert {"ADD", "MUL_MAT", "UNARY.GELU", "GLU.SWIGLU", "SOFT_MAX"} <= set(cat)
    assert all(c.op == op for op, cases in cat.items() for c in cases)


def test_parse_shape() -> None:
    assert parse_shape("8, 64") == (8, 64) == parse_shape("(8,64)") == parse_shape("8x64")
    with pytest.raises(ValueError, match=r"shape '8, -1': expected 1 to 4 positive integers"):
        parse_shape("8, -1")
    with pytest.raises(ValueError, match=r"shape 'eight': expected positive integers"):
        parse_shape("eight")


def test_customise_relabels_and_rejects_unknown_inputs() -> None:
    base = op_catalogue()["MUL_MAT"][0]
    c = customise(base, {"a": (16, 128), "b": (4, 128)}, "f16")
    assert c.name.startswith("MUL_MAT(type=f16,ne_a=[128,16,1,1],ne_b=[128,4,1,1]")
    with pytest.raises(ValueError, match=r"no input named \['z'\]"):
        customise(base, {"z": (1,)})
    with pytest.raises(ValueError, match="dtype 'f64'"):
        customise(base, dtype="f64")


def test_policy_verdict_with_reason(explorer) -> None:
    explorer.op_dropdown.value = "UNARY.EXP"
    verdicts = dict((d, (ok, r)) for d, ok, r in explorer.verdicts)
    assert verdicts["CPU"][0] is False and "EXP" in verdicts["CPU"][1]
    html = explorer.verdict_html.get_state()["value"]
    assert explorer.report().parts[0].rows[0][:2] == ("CPU", "not supported") and "not supported" in html
    explorer.dtype_dropdown.value = "f16"  # upstream accepts EXP with an f16 output
    assert explorer.verdicts == [("CPU", True, "")]


def test_run_on_every_device_compares_and_charts(explorer) -> None:
    explorer.shape_texts["a"].value = "16, 128"
    explorer.shape_texts["b"].value = "4, 128"
    runs = explorer.run(every_device=True)
    frame = explorer.to_frame()
    assert list(frame.index) == ["CPU", "GPU", "NPU"]  # the simulated GPU and NPU run on the CPU
    assert (frame["status"] == "OK").all() and frame["simulated"].all()
    assert (frame["nmse"] < frame["max_nmse"]).all()
    assert all(r.us_per_run is not None and r.us_per_run > 0 for r in runs)
    assert bytes(explorer.chart.value).startswith(PNG)
    html = explorer.result_html.get_state()["value"]
    assert html.count("simulated, runs on CPU") == 3 and "ne_a=[128,16,1,1]" in explorer.case.name
    assert [r[2] for r in explorer.report().parts[1].rows] == ["OK"] * 3 and "OK" in str(explorer)


def test_bad_shape_is_shown_not_raised(explorer) -> None:
    explorer.shape_texts["b"].value = "4, 100"  # k does not match a's
    assert "GraphError" in explorer.verdict_html.value and "MUL_MAT" in explorer.verdict_html.value
    explorer.shape_texts["b"].value = "four"
    assert "shape 'four'" in explorer.verdict_html.value
    assert explorer.run() == [] and "shape" in explorer.result_html.value


def test_explore_function_reports_unsupported_devices() -> None:
    exp = op_catalogue()["UNARY.EXP"][0]
    runs = explore(exp, ["CPU", "GPU"], time_it=False, core=SimulatedCore("laptop"))
    assert [r.status for r in runs] == ["not supported", "not supported"]
    assert all("EXP" in r.detail for r in runs)
    assert policy_verdicts(exp, ["NPU"])[0][1] is False


def test_shows_what_the_catalogue_says_about_the_op(explorer) -> None:
    explorer.op_dropdown.value = "UNARY.GELU"
    info = explorer.info_html.get_state()["value"]
    assert "GGML_UNARY_OP_GELU" in info and "Graph.gelu" in info and "upstream" in info


def test_real_backend_row_beside_ovkit(explorer) -> None:
    assert not explorer.real_backend_missing and not explorer.real_backend_check.disabled
    explorer.op_dropdown.value = "ADD"
    explorer.real_backend_check.value = True
    explorer.run()
    frame = explorer.to_frame()
    assert list(frame.index) == ["CPU", REAL_BACKEND]
    real = frame.loc[REAL_BACKEND]
    assert real["status"] == "OK" and real["reference"] == "ggml" and real["nmse"] <= real["max_nmse"]
    assert REAL_BACKEND in explorer.result_html.get_state()["value"]
    explorer.dtype_dropdown.value = "bf16"  # the edit reaches the real backend's row, judged
    explorer.run()
    real = explorer.to_frame().loc[REAL_BACKEND]
    # by its own bf16 arithmetic: rounded otherwise than ggml on AVX2 CPUs (FAIL), ggml's on an
    # AMD EPYC with avx512_bf16 (OK, NMSE 0)
    assert real["status"] == ("OK" if real["nmse"] <= real["max_nmse"] else "FAIL"), real
    assert "ADD(type=bf16" in str(explorer)
    assert explorer.report().parts[1].rows[-1][:3] == (REAL_BACKEND, "CPU", real["status"])


def test_without_the_real_backend_the_option_names_the_script(monkeypatch) -> None:
    from ovkit.upstream import build

    monkeypatch.setattr(build, "ggml_python_build", lambda: None)
    e = OpExplorer(core=SimulatedCore("laptop"))
    try:
        assert e.real_backend_check.disabled
        assert "scripts/install-upstream" in e.real_backend_note.value
        e.real_backend_check.value = True  # a disabled box set from code still runs ovkit alone
        assert [r.device for r in e.run()] == ["CPU"]
    finally:
        e.close()
