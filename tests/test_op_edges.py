"""Ops at their edges: out-of-range indices, degenerate parameters, late edits, infinities.

Each test is a regression test for a case that once computed garbage or crashed: indices outside
their table are refused before OpenVINO sees them (naming op, index and bound), and the edge
cases ggml accepts compute ggml's numbers on the device and in reference mode.
"""

from __future__ import annotations

import numpy as np
import pytest

from ovkit import oracle
from ovkit.graph import Graph, GraphError
from ovkit.ops.bounds import IndexRangeError

RNG = np.random.default_rng(11)


def _f32(*shape: int) -> np.ndarray:
    return RNG.uniform(-1, 1, shape).astype(np.float32)


# ---------------------------------------------------------------------------- index operands
def _get_rows(g: Graph) -> tuple[object, dict[str, np.ndarray]]:
    a, i = g.input("a", (3, 4)), g.input("i", (2,), "i32")
    return g.get_rows(a, i), {"a": _f32(3, 4), "i": np.array([0, 5], np.int32)}


def _set_rows(g: Graph) -> tuple[object, dict[str, np.ndarray]]:
    a, b, c = g.input("a", (8, 4)), g.input("b", (2, 4)), g.input("c", (2,), "i64")
    return g.set_rows(a, b, c), {"a": _f32(8, 4), "b": _f32(2, 4), "c": np.array([1, 100], np.int64)}


def _mul_mat_id(g: Graph) -> tuple[object, dict[str, np.ndarray]]:
    w, x, ids = g.input("w", (2, 3, 8)), g.input("x", (2, 1, 8)), g.input("ids", (2, 1), "i32")
    return g.mul_mat_id(w, x, ids), {
        "w": _f32(2, 3, 8),
        "x": _f32(2, 1, 8),
        "ids": np.array([[1], [5]], np.int32),
    }


def _add_id(g: Graph) -> tuple[object, dict[str, np.ndarray]]:
    a, b, ids = g.input("a", (2, 1, 4)), g.input("b", (3, 4)), g.input("ids", (2, 1), "i32")
    return g.add_id(a, b, ids), {"a": _f32(2, 1, 4), "b": _f32(3, 4), "ids": np.array([[0], [7]], np.int32)}


INDEX_CASES = {
    "get_rows": (_get_rows, "GET_ROWS", "index 5", "3 rows"),
    "set_rows": (_set_rows, "SET_ROWS", "index 100", "8 rows"),
    "mul_mat_id": (_mul_mat_id, "MUL_MAT_ID", "index 5", "2 experts"),
    "add_id": (_add_id, "ADD_ID", "index 7", "3 bias rows"),
}


@pytest.mark.parametrize("name", INDEX_CASES)
@pytest.mark.parametrize("mode", ["device", "reference"])
def test_an_input_index_outside_its_table_is_refused_naming_op_index_and_bound(name: str, mode: str) -> None:
    build, op, index, bound = INDEX_CASES[name]
    g = Graph()
    out, data = build(g)
    with pytest.raises(IndexRangeError) as err:
        g.compute(out, data, mode=mode)  # type: ignore[arg-type]
    msg = str(err.value)
    assert op in msg and index in msg and bound in msg, msg


def test_in_range_indices_still_compute_and_a_constant_index_is_checked_at_build() -> None:
    g = Graph()
    out, data = _get_rows(g)
    data["i"] = np.array([2, 0], np.int32)
    got = g.compute(out, data)
    np.testing.assert_array_equal(got, data["a"][[2, 0]])
    a = g.input("t", (3, 4))
    with pytest.raises(GraphError, match=r"constant index -1 .* 3 rows"):
        g.get_rows(a, g.constant(np.array([1, -1], np.int32)))


# ---------------------------------------------------------------------------- im2col, rope
def test_im2col_stride_zero_is_refused_at_build() -> None:
    g = Graph()
    k, x = g.input("k", (2, 1, 3, 3), "f16"), g.input("x", (1, 1, 8, 8))
    with pytest.raises(GraphError, match="IM2COL: operand s0: expected s0 >= 1, given 0"):
        g.im2col(k, x, 0, 1, 1, 1, 1, 1, True, "f32")


def _agree_with_ggml(program: object, data: dict[str, np.ndarray], max_nmse: float = 1e-7) -> np.ndarray:
    """The program's device translation and reference both match real ggml; returns ggml's result."""
    g = Graph()
    leaves = {
        n: g.input(n, v.shape, "f16" if v.dtype == np.float16 else "i32" if v.dtype == np.int32 else "f32")
        for n, v in data.items()
    }
    out = program(g, leaves)  # type: ignore[operator]
    want = np.asarray(oracle.ggml_program(program, data))  # type: ignore[arg-type]
    for got in (g.compute(out, data, "CPU", policy=False), g.compute(out, data, mode="reference")):
        verdict = oracle.compare(np.asarray(got), want, max_nmse)
        assert verdict.ok, verdict
    return want


@pytest.mark.parametrize("is_2d", [True, False])
def test_im2col_with_negative_dilation_matches_ggml(is_2d: bool) -> None:
    def program(b: object, t: dict) -> object:
        return b.im2col(t["k"], t["x"], 1, 2, 1, 0, -1, -1, is_2d, "f32")  # type: ignore[attr-defined]

    k = np.zeros((2, 3, 3, 3) if is_2d else (2, 3, 3), np.float16)
    x = _f32(1, 3, 9, 10) if is_2d else _f32(2, 3, 10)
    _agree_with_ggml(program, {"k": k, "x": x})


def test_rope_with_zero_dims_returns_its_input_as_ggml() -> None:
    def program(b: object, t: dict) -> object:
        return b.rope_ext(t["x"], t["pos"], None, 0, 0, 0, 10000.0, 1.0, 0.0, 1.0, 0.0, 0.0)  # type: ignore[attr-defined]

    x = _f32(3, 2, 8)
    want = _agree_with_ggml(program, {"x": x, "pos": np.arange(3, dtype=np.int32)})
    np.testing.assert_array_equal(want, x)


# ---------------------------------------------------------------------------- soft_max
def test_sinks_created_after_their_soft_max_node_are_used() -> None:
    def program(b: object, t: dict) -> object:
        sm = b.soft_max_ext(t["x"], None, 0.5, 0.0)  # type: ignore[attr-defined]
        sinks = b.scale(t["s"], 1.0)  # a tensor made after the soft_max node
        b.soft_max_add_sinks(sm, sinks)  # type: ignore[attr-defined]
        return sm

    want = _agree_with_ggml(program, {"x": _f32(1, 4, 3, 6), "s": _f32(4)}, 1e-6)
    assert (want.sum(axis=-1) < 0.99).all()  # the sinks took part of every row's mass


def test_soft_max_row_with_plus_inf_is_all_nan_as_ggml() -> None:
    g = Graph()
    x = g.input("x", (2, 4))
    out = g.soft_max(x)
    data = {"x": np.array([[np.inf, 1, 2, 3], [0, 1, 2, 3]], np.float32)}
    want = np.asarray(oracle.ggml_call("soft_max", data["x"]))
    assert np.isnan(want[0]).all() and not np.isnan(want[1]).any()
    for got in (
        g.compute(out, data, "CPU", policy=False),
        g.compute(out, data),
        g.compute(out, data, mode="reference"),
    ):
        assert np.isnan(got[0]).all(), got
        np.testing.assert_allclose(got[1], want[1], rtol=1e-6)
