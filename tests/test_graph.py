"""The ggml-style Graph builder: build-time errors, ggml view semantics, ops on the real CPU."""

from __future__ import annotations

import numpy as np
import pytest

from ovkit.graph import Graph, GraphError, UnsupportedOpError

RNG = np.random.default_rng(1234)


def rand(*shape: int, dtype: type = np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


def nmse(actual: np.ndarray, expected: np.ndarray) -> float:
    a = np.asarray(actual, np.float64)
    e = np.asarray(expected, np.float64)
    return float(((a - e) ** 2).sum() / max((e**2).sum(), 1e-300))


def run_both(
    g: Graph, outs: object, inputs: dict[str, np.ndarray]
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    dev = g.compute(outs, inputs, device="CPU")
    ref = g.compute(outs, inputs, mode="reference")
    if not isinstance(dev, list):
        return [dev], [ref]
    return dev, ref


# ---------------------------------------------------------------------------- build-time errors
def test_add_rejects_non_repeatable_operand_naming_op_operand_and_shapes() -> None:
    g = Graph()
    a = g.input("a", (4, 6))
    b = g.input("b", (4, 4))
    with pytest.raises(
        GraphError, match=r"ADD: operand b ne \[4, 4, 1, 1\] cannot be repeated to a ne \[6, 4, 1, 1\]"
    ):
        g.add(a, b)


def test_mul_mat_rejects_mismatched_inner_dim_at_build_time() -> None:
    g = Graph()
    with pytest.raises(
        GraphError, match=r"MUL_MAT: operand b: expected ne\[0\] == a.ne\[0\] = 8, given ne \[7, 3, 1, 1\]"
    ):
        g.mul_mat(g.input("w", (5, 8)), g.input("x", (3, 7)))


def test_mul_mat_rejects_transposed_weight() -> None:
    g = Graph()
    w = g.transpose(g.input("w", (8, 5)))
    with pytest.raises(GraphError, match="MUL_MAT: operand a: expected a non-transposed"):
        g.mul_mat(w, g.input("x", (3, 8)))


def test_reshape_of_non_contiguous_view_is_rejected() -> None:
    g = Graph()
    t = g.transpose(g.input("a", (4, 6)))
    with pytest.raises(GraphError, match="RESHAPE: operand a: expected a contiguous tensor"):
        g.reshape_1d(t, 24)


def test_view_outside_its_buffer_is_rejected() -> None:
    g = Graph()
    a = g.input("a", (4, 6))
    with pytest.raises(GraphError, match="VIEW: operand a: expected a view inside its 96-byte buffer"):
        g.view_2d(a, 6, 4, 24, 4)


def test_unknown_input_dtype_and_missing_feed_are_named() -> None:
    g = Graph()
    with pytest.raises(GraphError, match=r"input 'x': expected dtype in .*given 'f64'"):
        g.input("x", (2,), "f64")
    a = g.input("a", (2, 3))
    out = g.scale(a, 2.0)
    with pytest.raises(GraphError, match=r"input 'a' \(f32, shape \(2, 3\)\) was not given"):
        g.compute(out, {}, mode="reference")
    with pytest.raises(GraphError, match=r"input 'a': expected shape \(2, 3\), given \(3, 2\)"):
        g.compute(out, {"a": rand(3, 2)}, mode="reference")


def test_get_rows_needs_i32_indices() -> None:
    g = Graph()
    with pytest.raises(GraphError, match=r"GET_ROWS: operand b: expected type in \{i32\}, given i64"):
        g.get_rows(g.input("a", (10, 4)), g.input("i", (3,), "i64"))


# ---------------------------------------------------------------------------- shapes and layout
def test_shapes_follow_ggml_python_numpy_order() -> None:
    g = Graph()
    a = g.input("a", (3, 4, 8))
    assert a.ne == (8, 4, 3, 1)
    assert a.nb == (4, 32, 128, 384)
    assert g.mul_mat(g.input("w", (5, 8)), a).shape == (3, 4, 5)
    assert g.input("row", (1, 1, 5)).shape == (5,)  # leading 1s dropped, as ggml's to_numpy


def test_permute_and_transpose_are_strided_views_like_ggml() -> None:
    g = Graph()
    a = g.input("a", (2, 3, 4))  # ne [4, 3, 2]
    p = g.permute(a, 2, 0, 1, 3)  # dim0 -> 2, dim1 -> 0, dim2 -> 1
    assert p.ne == (3, 2, 4, 1)
    assert p.nb == (16, 48, 4, 96)
    assert not p.is_contiguous()
    assert p.view_src is a and p.is_permute
    t = g.transpose(a)
    assert t.ne == (3, 4, 2, 1) and t.nb == (16, 4, 48, 96)


def test_view_of_a_permuted_tensor_indexes_the_base_memory() -> None:
    """A view over a non-contiguous tensor indexes the base memory with the given strides (nb0 is
    the element size, as ggml_view_impl sets it), not a compacted copy of the permuted tensor."""
    g = Graph()
    a = g.input("a", (3, 4, 8))
    p = g.permute(a, 1, 0, 2, 3)  # ne [4, 8, 3], nb [32, 4, 128]
    v = g.view_3d(p, 2, 5, 3, p.nb[1], p.nb[2], 1 * p.nb[0] + 2 * p.nb[1])
    x = rand(3, 4, 8)
    base = np.ascontiguousarray(x)
    expected = np.lib.stride_tricks.as_strided(
        base.reshape(-1)[(1 * 32 + 2 * 4) // 4 :], shape=(3, 5, 2), strides=(p.nb[2], p.nb[1], 4)
    )
    dev, ref = run_both(g, [v, g.cont(v)], {"a": x})
    for out in dev + ref:
        np.testing.assert_array_equal(out, expected)


def test_permute_then_cont_matches_numpy_transpose_on_cpu() -> None:
    g = Graph()
    a = g.input("a", (2, 3, 4, 5))
    out = g.cont(g.permute(a, 3, 1, 0, 2))
    x = rand(2, 3, 4, 5)
    expected = _ggml_permute_numpy(x, (3, 1, 0, 2))
    assert expected.shape == (5, 2, 4, 3)  # ne [5,4,3,2]: dim0->3, dim1->1, dim2->0, dim3->2
    np.testing.assert_array_equal(g.compute(out, {"a": x}, device="CPU"), expected)


def _ggml_permute_numpy(x: np.ndarray, axes: tuple[int, int, int, int]) -> np.ndarray:
    """numpy equivalent of cont(ggml_permute(x, *axes)) for a 4-D array in numpy order."""
    nd = 4
    ne_axes = [nd - 1 - i for i in range(nd)]  # numpy axis of ggml dim i
    out_src = [0] * nd  # output ggml dim -> source ggml dim
    for i, ax_ in enumerate(axes):
        out_src[ax_] = i
    order = [ne_axes[out_src[nd - 1 - k]] for k in range(nd)]
    return np.transpose(x, order).copy()


def test_strided_row_view_reads_every_other_row() -> None:
    g = Graph()
    a = g.input("a", (6, 5))
    v = g.view_2d(a, 3, 3, 2 * a.nb[1], 2 * 4)  # rows 0,2,4 and columns 2..4
    x = rand(6, 5)
    dev, ref = run_both(g, v, {"a": x})
    np.testing.assert_array_equal(dev[0], x[0::2, 2:5])
    np.testing.assert_array_equal(ref[0], x[0::2, 2:5])


# ---------------------------------------------------------------------------- compute
def test_binary_ops_broadcast_by_ggml_repeat_rules() -> None:
    """ggml tiles b when its dims divide a's; upstream's policy only accepts 1-broadcasts."""
    g = Graph()
    a = g.input("a", (2, 4, 6))
    b = g.input("b", (1, 2, 3))  # tiled (not numpy-broadcast): 6 = 2·3, 4 = 2·2
    outs = [g.add(a, b), g.sub(a, b), g.mul(a, b), g.div(a, b)]
    x, y = rand(2, 4, 6), rand(1, 2, 3) + 3.0
    tiled = np.tile(y, (2, 2, 2))
    ref = g.compute(outs, {"a": x, "b": y}, mode="reference")
    for got, exp in zip(ref, [x + tiled, x - tiled, x * tiled, x / tiled], strict=True):
        assert nmse(got, exp) < 1e-12
    with pytest.raises(UnsupportedOpError, match=r"ADD: .*differ in dim 0 and neither is 1"):
        g.compute(outs, {"a": x, "b": y}, device="CPU")


def test_binary_ops_with_size_one_broadcast_run_on_cpu() -> None:
    g = Graph()
    a = g.input("a", (2, 4, 6))
    b = g.input("b", (1, 4, 1))
    outs = [g.add(a, b), g.sub(a, b), g.mul(a, b), g.div(a, b)]
    x, y = rand(2, 4, 6), rand(1, 4, 1) + 3.0
    dev, ref = run_both(g, outs, {"a": x, "b": y})
    for got, r, exp in zip(dev, ref, [x + y, x - y, x * y, x / y], strict=True):
        assert nmse(got, exp) < 1e-12
        assert nmse(r, exp) < 1e-12


def test_mul_mat_broadcasts_batches_and_keeps_f32_output() -> None:
    g = Graph()
    w = g.input("w", (2, 5, 8), "f16")
    x = g.input("x", (6, 7, 8))  # 6 = 3 × 2 batches: i02 = i12 / 3
    out = g.mul_mat(w, x)
    assert out.dtype == "f32" and out.shape == (6, 7, 5)
    W, X = rand(2, 5, 8).astype(np.float16), rand(6, 7, 8)
    expected = np.matmul(
        X.astype(np.float16).astype(np.float32), np.repeat(W.astype(np.float32), 3, axis=0).transpose(0, 2, 1)
    )
    dev, ref = run_both(g, out, {"w": W, "x": X})
    assert nmse(dev[0], expected) < 1e-12
    assert nmse(ref[0], expected) < 1e-12


def test_policy_rejection_raises_with_reason_unless_reference_mode() -> None:
    g = Graph()
    a = g.input("a", (4, 6), "bf16")
    out = g.cont(g.permute(a, 1, 0, 2, 3))
    x = rand(4, 6)
    with pytest.raises(UnsupportedOpError, match="PERMUTE") as info:
        g.compute(out, {"a": x}, device="CPU")
    assert "bf16" in info.value.reason
    ref = g.compute(out, {"a": x}, mode="reference")
    assert ref.shape == (6, 4)


def test_f16_and_bf16_outputs_are_rounded_like_ggml_storage() -> None:
    g = Graph()
    a16 = g.input("a16", (3, 8), "f16")
    ab = g.input("ab", (3, 8), "bf16")
    outs = [g.scale(a16, 1.0 / 3.0), g.scale(ab, 1.0 / 3.0)]
    x = rand(3, 8)
    dev, ref = run_both(g, outs, {"a16": x, "ab": x})
    assert dev[0].dtype == np.float16
    np.testing.assert_array_equal(dev[0], ref[0])
    np.testing.assert_array_equal(dev[1], ref[1])
    # bf16 keeps 8 significant bits: the low 16 bits of the float32 pattern are zero
    assert not (dev[1].view(np.uint32) & 0xFFFF).any()
