"""The one judge of a case's output (catalogue.result.judge) and the typed failure kinds the
harnesses tell apart (a gap of ovkit is ``not translatable``, anything else a FAIL)."""

from __future__ import annotations

import numpy as np
import pytest

from ovkit.catalogue import run
from ovkit.catalogue.case import Case, Leaf
from ovkit.catalogue.result import ERROR_KINDS, judge
from ovkit.graph import Graph
from ovkit.ir import GraphError, Op, TranslationGapError


def _case(err: str = "nmse", max_err: float = 1e-7) -> Case:
    return Case("TOP_K", "ne=[4,1,1,1],k=4", (Leaf("a", (4, 1, 1, 1)),), lambda b, x: x["a"], max_err, err)


def test_an_index_set_case_passes_on_the_same_indices_in_another_order() -> None:
    # TOP_K's order is free (test_top_k compares index sets); NMSE would fail the same output
    actual, expected = np.array([3.0, 0.0, 2.0, 1.0]), np.array([0.0, 1.0, 2.0, 3.0])
    ok = judge(_case("index_set", 0.0), actual, expected, "ggml", device="CPU")
    assert (ok.status, ok.err, ok.op, ok.case, ok.device) == (
        "OK",
        0.0,
        "TOP_K",
        "TOP_K(ne=[4,1,1,1],k=4)",
        "CPU",
    )
    assert judge(_case("nmse"), actual, expected).status == "FAIL"
    wrong = judge(_case("index_set", 0.0), np.array([3.0, 0.0, 2.0, 2.0]), expected)
    assert wrong.status == "FAIL" and wrong.detail == "ERR = 0.250000000 > 0.000000000"


def test_the_judge_checks_the_tensor_then_nan_and_inf_then_the_error() -> None:
    c = _case()
    shape = judge(c, np.zeros((2, 2)), np.zeros(4), "ggml")
    assert shape.status == "FAIL" and shape.detail == "shape (2, 2) vs ggml (4,)" and shape.err is None
    assert judge(c, np.zeros((1, 4)), np.zeros(4)).status == "OK"  # the same ggml tensor
    nan = judge(c, np.array([np.nan, 0, 0, 0]), np.zeros(4))
    assert nan.status == "FAIL" and nan.detail.startswith("NaN at index 0")
    both_inf = np.array([np.inf, 1, 2, 3])
    assert judge(c, both_inf, both_inf.copy()).status == "OK"  # matching infs pass, as in C
    far = judge(c, np.array([1.0, 2, 3, 4]), np.array([1.0, 2, 3, 5]), reference="numpy")
    assert far.status == "FAIL" and far.reference == "numpy" and far.err == pytest.approx(1 / 30)


def test_an_unknown_error_kind_is_named() -> None:
    with pytest.raises(
        ValueError, match=r"error kind 'abs' is not known \(expected one of nmse, index_set\)"
    ):
        judge(_case("abs"), np.zeros(4), np.zeros(4))
    assert set(ERROR_KINDS) == {"nmse", "index_set"}


def test_a_node_without_translation_raises_the_typed_gap(monkeypatch: pytest.MonkeyPatch) -> None:
    from ovkit.ops import translate

    g = Graph()
    out = g.add(g.input("a", (4,)), g.input("b", (4,)))
    monkeypatch.delitem(translate.TRANSLATORS, Op.ADD)
    with pytest.raises(TranslationGapError, match="no OpenVINO translation for ADD") as info:
        g.to_model([out])
    assert isinstance(info.value, GraphError) and run._ovkit_gap(info.value)


def test_only_a_missing_builder_on_ovkits_graph_is_a_gap() -> None:
    g = Graph()
    with pytest.raises(AttributeError) as missing:
        g.no_such_builder  # noqa: B018
    with pytest.raises(AttributeError) as elsewhere:
        None.Graph  # type: ignore[attr-defined]  # noqa: B018  ("Graph" in its message, not a gap)
    with pytest.raises(AttributeError) as on_tensor:
        g.input("a", (4,)).no_such_method  # noqa: B018
    assert run._ovkit_gap(missing.value) and run._ovkit_gap(on_tensor.value)
    assert not run._ovkit_gap(elsewhere.value)
    # while building, any GraphError is the builder refusing (a gap); after it, a GraphError is a FAIL
    assert not run._ovkit_gap(GraphError("SOFT_MAX: expected one of ..."))
