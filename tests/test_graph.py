"""The ggml-style Graph builder: build-time errors, ggml view semantics, ops on the real CPU."""

from __future__ import annotations

import numpy as np
import pytest

from ovkit import quant
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


def test_an_unknown_input_name_is_named_on_every_path() -> None:
    """A misspelled feed name raises one error in reference mode, on the device's fast path (the
    arrays already fit the model) and on its slow path (an array to convert)."""
    g = Graph()
    out = g.scale(g.input("a", (2, 3)), 2.0)
    msg = r"compute: unknown inputs \['b'\]; this graph's inputs are \['a'\]"
    for mode, arr in (
        ("reference", rand(2, 3)),
        ("device", rand(2, 3)),
        ("device", rand(2, 3, dtype=np.float64)),
    ):
        with pytest.raises(GraphError, match=msg):
            g.compute(out, {"a": arr, "b": arr}, "CPU", mode)


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


def test_a_node_and_its_op_info_answer_ggmls_layout_questions_alike() -> None:
    """``is_contiguous`` and ``nbytes`` are one property each, the same for a graph node and for
    the OpInfo the policy reads (ggml_is_contiguous, ggml_nbytes)."""
    g = Graph()
    a = g.input("a", (2, 3, 4))
    w = g.constant(quant.quantize("q8_0", np.zeros((4, 64), np.float32)), "w")  # ne [64, 4]
    views = [
        a,
        g.permute(a, 2, 0, 1, 3),
        g.transpose(a),
        g.view_2d(a, 4, 3, a.nb[1], a.nb[2]),  # the second plane: contiguous
        g.view_2d(a, 2, 3, a.nb[1], 8),  # half rows: strided
        w,
        g.view_2d(w, 64, 2, w.nb[1], w.nb[1]),
    ]
    want = [(True, 96), (False, 96), (False, 96), (True, 48), (False, 40), (True, 272), (True, 136)]
    got = [(t.is_contiguous, t.nbytes) for t in views]
    assert got == want
    assert [(t.op_info().is_contiguous, t.op_info().nbytes) for t in views] == want


def test_permute_and_transpose_are_strided_views_like_ggml() -> None:
    g = Graph()
    a = g.input("a", (2, 3, 4))  # ne [4, 3, 2]
    p = g.permute(a, 2, 0, 1, 3)  # dim0 -> 2, dim1 -> 0, dim2 -> 1
    assert p.ne == (3, 2, 4, 1)
    assert p.nb == (16, 48, 4, 96)
    assert not p.is_contiguous
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
    third = g.constant(np.full((1, 8), 1.0 / 3.0, np.float32))
    outs = [g.mul(a16, third), g.mul(ab, third)]  # f16/bf16 · f32: computed in f32, stored rounded
    x = rand(3, 8)
    dev, ref = run_both(g, outs, {"a16": x, "ab": x})
    assert dev[0].dtype == np.float16
    np.testing.assert_array_equal(dev[0], ref[0])
    np.testing.assert_array_equal(dev[1], ref[1])
    # bf16 keeps 8 significant bits: the low 16 bits of the float32 pattern are zero
    assert not (dev[1].view(np.uint32) & 0xFFFF).any()


# ---------------------------------------------------------------------------- every op: CPU vs reference
def _f(*shape: int) -> np.ndarray:
    return rand(*shape)


def _ids(*rows: list[int]) -> np.ndarray:
    return np.array(rows, dtype=np.int32)


_MASK = np.where(np.arange(16)[None, :] > np.arange(8)[:, None] + 8, -np.inf, rand(8, 16)).astype(np.float32)
_FA_MASK = np.where(np.arange(12)[None, :] > np.arange(5)[:, None] + 7, -np.inf, rand(5, 12)).astype(
    np.float16
)
_ROPE = (0, 10000.0, 1.0, 0.0, 1.0, 32.0, 1.0)
_YARN = (512, 10000.0, 0.25, 1.0, 1.0, 32.0, 1.0)


def _sinks(kind: str):  # type: ignore[no-untyped-def]
    def build(g: Graph, a, m, s):  # type: ignore[no-untyped-def]
        if kind == "soft_max":
            out = g.soft_max_ext(a, m, 0.3, 8.0)
            g.soft_max_add_sinks(out, s)
        else:
            out = g.flash_attn_ext(a, m[0], m[1], m[2], 0.25, 0.0, 0.0)
            g.flash_attn_ext_add_sinks(out, s)
        return out

    return build


# (op key, id, inputs, builder). Inputs are numpy arrays (dtype gives the ggml type).
OP_CASES: list[tuple[str, str, list[np.ndarray], object]] = [
    ("ADD", "add-bcast", [_f(3, 4, 8), _f(1, 4, 1)], lambda g, a, b: g.add(a, b)),
    ("SUB", "sub-f16", [_f(3, 8).astype(np.float16), _f(3, 8)], lambda g, a, b: g.sub(a, b)),
    ("MUL", "mul-permuted-a", [_f(4, 3, 8), _f(3, 1, 8)], lambda g, a, b: g.mul(g.permute(a, 0, 2, 1, 3), b)),
    ("DIV", "div", [_f(3, 8), np.abs(_f(1, 8)) + 0.5], lambda g, a, b: g.div(a, b)),
    ("ADD1", "add1", [_f(3, 8), _f(1)], lambda g, a, b: g.add1(a, b)),
    (
        "ADD_ID",
        "add_id",
        [_f(5, 3, 8), _f(4, 8), _ids([0, 3, 1], [2, 2, 0], [1, 0, 3], [3, 1, 2], [0, 0, 0])],
        lambda g, a, b, i: g.add_id(a, b, i),
    ),
    ("SCALE", "scale_bias", [_f(3, 8)], lambda g, a: g.scale_bias(a, -0.5, 0.25)),
    ("SQR", "sqr", [_f(3, 8)], lambda g, a: g.sqr(a)),
    ("SQRT", "sqrt", [np.abs(_f(3, 8))], lambda g, a: g.sqrt(a)),
    ("CLAMP", "clamp", [_f(3, 8)], lambda g, a: g.clamp(a, -0.5, 0.25)),
    ("FILL", "fill", [_f(3, 8)], lambda g, a: g.fill(a, 2.5)),
    ("CONCAT", "concat-dim1", [_f(2, 3, 4), _f(2, 5, 4)], lambda g, a, b: g.concat(a, b, 1)),
    ("CONT", "cont_2d-of-transpose", [_f(4, 6)], lambda g, a: g.cont_2d(g.transpose(a), 2, 12)),
    ("CPY", "cpy-to-f16", [_f(4, 6), np.zeros((6, 4), np.float16)], lambda g, a, b: g.cpy(a, b)),
    ("RESHAPE", "reshape_3d", [_f(4, 6)], lambda g, a: g.reshape_3d(a, 3, 2, 4)),
    ("VIEW", "view_2d-offset", [_f(4, 6)], lambda g, a: g.view_2d(a, 3, 2, a.nb[1], 8)),
    ("PERMUTE", "permute", [_f(2, 3, 4)], lambda g, a: g.permute(a, 1, 2, 0, 3)),
    ("TRANSPOSE", "transpose", [_f(3, 5)], lambda g, a: g.transpose(a)),
    ("REPEAT", "repeat", [_f(1, 3, 2), _f(2, 6, 4)], lambda g, a, b: g.repeat(a, b)),
    ("PAD", "pad_ext", [_f(2, 3, 4)], lambda g, a: g.pad_ext(a, 1, 2, 0, 1, 1, 0, 0, 0)),
    (
        "GET_ROWS",
        "get_rows-batched",
        [_f(2, 10, 4), _ids([1, 5, 7], [0, 9, 9])],
        lambda g, a, b: g.get_rows(a, b),
    ),
    (
        "SET_ROWS",
        "set_rows-f16",
        [_f(10, 4).astype(np.float16), _f(3, 4), np.array([1, 5, 7], np.int64)],
        lambda g, a, b, c: g.set_rows(a, b, c),
    ),
    ("SET", "set-3d", [_f(4, 5, 6), _f(2, 3, 2)], lambda g, a, b: g.set(a, b, a.nb[1], a.nb[2], a.nb[3], 28)),
    ("MUL_MAT", "mul_mat-gqa-batch", [_f(2, 5, 8), _f(6, 7, 8)], lambda g, a, b: g.mul_mat(a, b)),
    (
        "MUL_MAT_ID",
        "mul_mat_id",
        [_f(4, 6, 8), _f(5, 2, 8), _ids([0, 3], [2, 1], [1, 1], [3, 0], [2, 3])],
        lambda g, a, b, i: g.mul_mat_id(a, b, i),
    ),
    ("NORM", "norm", [_f(3, 16)], lambda g, a: g.norm(a, 1e-5)),
    ("RMS_NORM", "rms_norm", [_f(3, 16)], lambda g, a: g.rms_norm(a, 1e-6)),
    ("L2_NORM", "l2_norm", [_f(3, 16)], lambda g, a: g.l2_norm(a, 1e-6)),
    ("SUM_ROWS", "sum_rows", [_f(3, 16)], lambda g, a: g.sum_rows(a)),
    ("CUMSUM", "cumsum", [_f(3, 16)], lambda g, a: g.cumsum(a)),
    (
        "ARGSORT",
        "argsort-desc",
        [RNG.permutation(48).reshape(3, 16).astype(np.float32)],
        lambda g, a: g.argsort(a, 1),
    ),
    (
        "SOFT_MAX",
        "soft_max-mask-alibi",
        [_f(2, 4, 8, 16), _MASK],
        lambda g, a, m: g.soft_max_ext(a, m, 0.3, 8.0),
    ),
    ("SOFT_MAX", "soft_max-sinks", [_f(2, 4, 8, 16), _MASK, _f(4)], _sinks("soft_max")),
    (
        "FLASH_ATTN_EXT",
        "flash_attn_ext-gqa-f16",
        [_f(1, 4, 5, 16), _f(1, 2, 12, 16).astype(np.float16), _f(1, 2, 12, 8).astype(np.float16), _FA_MASK],
        lambda g, q, k, v, m: g.flash_attn_ext(q, k, v, m, 0.25, 0.0, 0.0),
    ),
    (
        "ROPE",
        "rope-normal",
        [_f(1, 5, 4, 32), _ids(3, 7, 1, 0, 12)[:, None].ravel()],
        lambda g, a, p: g.rope_ext(a, p, None, 32, 0, *_ROPE),
    ),
    (
        "ROPE",
        "rope-neox-partial-yarn",
        [_f(1, 5, 4, 32), _ids(30, 70, 10, 0, 120).ravel()],
        lambda g, a, p: g.rope_ext(a, p, None, 16, 2, *_YARN),
    ),
    (
        "ROPE",
        "rope-imrope",
        [_f(1, 5, 4, 32), RNG.integers(0, 20, 20).astype(np.int32)],
        lambda g, a, p: g.rope_multi(a, p, None, 32, [6, 5, 5, 0], 40, *_ROPE),
    ),
    (
        "IM2COL",
        "im2col-2d",
        [_f(2, 3, 3, 3).astype(np.float16), _f(2, 3, 6, 7)],
        lambda g, a, b: g.im2col(a, b, 1, 1, 1, 1, 1, 1, True, "f32"),
    ),
    ("SSM_CONV", "ssm_conv", [_f(2, 6, 8), _f(6, 4)], lambda g, a, b: g.ssm_conv(a, b)),
    (
        "ROPE",
        "rope-mrope",
        [_f(1, 5, 4, 32), RNG.integers(0, 20, 20).astype(np.int32)],
        lambda g, a, p: g.rope_multi(a, p, None, 32, [5, 5, 6, 0], 8, *_ROPE),
    ),
    (
        "ROPE",
        "rope-vision",
        [_f(1, 5, 4, 32), RNG.integers(0, 20, 20).astype(np.int32)],
        lambda g, a, p: g.rope_multi(a, p, None, 16, [8, 8, 0, 0], 24, *_ROPE),
    ),
    (
        "FLASH_ATTN_EXT",
        "flash_attn_ext-gqa4-nomask",
        [_f(1, 8, 6, 32), _f(1, 2, 16, 32).astype(np.float16), _f(1, 2, 16, 32).astype(np.float16)],
        lambda g, q, k, v: g.flash_attn_ext(q, k, v, None, 0.2, 0.0, 0.0),
    ),
    (
        "FLASH_ATTN_EXT",
        "flash_attn_ext-f16kv-n_q-equals-heads",
        [_f(1, 2, 2, 64), _f(1, 2, 32, 64).astype(np.float16), _f(1, 2, 32, 64).astype(np.float16)],
        lambda g, q, k, v: g.flash_attn_ext(q, k, v, None, 0.125, 0.0, 0.0),
    ),
    ("MUL_MAT", "mul_mat-batch-ratio4", [_f(2, 5, 16), _f(8, 7, 16)], lambda g, a, b: g.mul_mat(a, b)),
    (
        "ROPE",
        "rope-yarn-n_ctx_orig-0",
        [_f(1, 5, 4, 32), _ids(30, 70, 10, 0, 120).ravel()],
        lambda g, a, p: g.rope_ext(a, p, None, 32, 0, 0, 10000.0, 1.4, 0.75, 1.4, 32.0, 1.0),
    ),
    (
        "GATED_DELTA_NET",
        "gated_delta_net",
        [
            _f(2, 3, 2, 4),
            _f(2, 3, 2, 4),
            _f(2, 3, 4, 4),
            -np.abs(_f(2, 3, 4, 1)),
            np.abs(_f(2, 3, 4, 1)) * 0.5,
            _f(2, 4, 4, 4),
        ],
        lambda g, *x: g.gated_delta_net(*x, 1),
    ),
    ("DIAG", "diag", [_f(3, 1, 5)], lambda g, a: g.diag(a)),
    ("TRI", "tri-lower", [_f(2, 5, 5)], lambda g, a: g.tri(a, 3)),
    ("UNARY.GELU", "gelu", [_f(4, 16) * 4], lambda g, a: g.gelu(a)),
    ("UNARY.SIGMOID", "sigmoid", [_f(4, 16) * 4], lambda g, a: g.sigmoid(a)),
    ("UNARY.SILU", "silu", [_f(4, 16) * 4], lambda g, a: g.silu(a)),
    ("UNARY.SOFTPLUS", "softplus", [_f(4, 16) * 10], lambda g, a: g.softplus(a)),
    ("UNARY.TANH", "tanh", [_f(4, 16) * 4], lambda g, a: g.tanh(a)),
    ("UNARY.EXP", "exp-f16", [_f(4, 16).astype(np.float16)], lambda g, a: g.exp(a)),
    ("UNARY.NEG", "neg", [_f(4, 16)], lambda g, a: g.neg(a)),
    ("GLU.SWIGLU", "swiglu-swapped", [_f(4, 16)], lambda g, a: g.swiglu_swapped(a)),
    (
        "GLU.SWIGLU_OAI",
        "swiglu_oai",
        [_f(4, 16) * 4, _f(4, 16) * 4],
        lambda g, a, b: g.swiglu_oai(a, b, 1.702, 7.0),
    ),
    ("GLU.GEGLU", "geglu-split", [_f(4, 16), _f(4, 16)], lambda g, a, b: g.geglu_split(a, b)),
]

_GGML_TYPE = {np.float32: "f32", np.float16: "f16", np.int32: "i32", np.int64: "i64"}


def _run_case(build: object, arrays: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(OpenVINO CPU result, numpy reference); ops the CPU policy rejects still run their translation."""
    g = Graph()
    leaves = [g.input(f"x{i}", x.shape, _GGML_TYPE[x.dtype.type]) for i, x in enumerate(arrays)]
    out = build(g, *leaves)  # type: ignore[operator]
    feed = {f"x{i}": x for i, x in enumerate(arrays)}
    ref = g.compute(out, feed, mode="reference")
    try:
        dev = g.compute(out, feed, device="CPU")
    except UnsupportedOpError:
        dev = g.compute(out, feed, device="CPU", policy=False)
    return dev, ref


def test_policy_false_runs_the_translation_of_an_op_the_policy_refuses() -> None:
    """One way to run a graph without the policy: ``compute(policy=False)`` is the translation as it
    is (same values as the reference), where the policy-checked path refuses the node."""
    g = Graph()
    x = g.input("x", (4, 8))
    y = g.sin(g.scale(x, 2.0))  # SIN: ovkit's own translation, not registered upstream
    feed = {"x": np.linspace(-3, 3, 32, dtype=np.float32).reshape(4, 8)}
    with pytest.raises(UnsupportedOpError, match="not registered"):
        g.compute(y, feed, device="CPU")
    got = g.compute(y, feed, device="CPU", policy=False)
    np.testing.assert_allclose(got, np.sin(2 * feed["x"]), rtol=1e-6)
    model, arrays = g.translation(y, feed)
    assert [p.get_friendly_name() for p in model.get_parameters()] == ["x"]
    np.testing.assert_array_equal(arrays[0].reshape(4, 8), feed["x"])


@pytest.mark.parametrize(("key", "case_id", "arrays", "build"), OP_CASES, ids=[c[1] for c in OP_CASES])
def test_op_on_cpu_matches_numpy_reference(
    key: str, case_id: str, arrays: list[np.ndarray], build: object
) -> None:
    dev, ref = _run_case(build, arrays)
    assert dev.shape == ref.shape and dev.dtype == ref.dtype
    if dev.dtype.kind == "i":
        np.testing.assert_array_equal(dev, ref)
    else:
        assert nmse(dev, ref) < 1e-10, f"{case_id}: NMSE {nmse(dev, ref):.3e}"


def test_every_registered_op_has_a_cpu_case() -> None:
    from ovkit.ops.table import ENTRIES

    covered = {c[0] for c in OP_CASES}
    missing = [e.key for e in ENTRIES if e.registered and e.key not in covered]
    assert not missing, f"no CPU-vs-reference case for {missing}"


# ---------------------------------------------------------------------------- more build-time checks
def test_rope_ext_rejects_multi_section_modes_and_bad_positions() -> None:
    g = Graph()
    a = g.input("a", (4, 5, 32))
    with pytest.raises(GraphError, match="ROPE: operand mode: expected NORMAL .*use rope_multi"):
        g.rope_ext(a, g.input("p", (4,), "i32"), None, 32, 40, *_ROPE)
    with pytest.raises(
        GraphError,
        match=r"ROPE: operand b: expected ne\[0\] == 1·a.ne\[2\] = 4 positions, given ne \[5, 1, 1, 1\]",
    ):
        g.rope_ext(a, g.input("p5", (5,), "i32"), None, 32, 0, *_ROPE)


def test_rope_ext_rejects_an_odd_n_dims_in_normal_mode_only() -> None:
    """NORMAL mode rotates adjacent pairs (2i, 2i + 1): an odd n_dims would cut its last pair, so
    the builder refuses it with a message; NEOX pairs (i, i + n_dims/2) take any n_dims."""
    g = Graph()
    a, p = g.input("a", (4, 5, 32)), g.input("p", (4,), "i32")
    with pytest.raises(GraphError, match="ROPE: operand n_dims: expected an even n_dims for NORMAL mode"):
        g.rope_ext(a, p, None, 15, 0, *_ROPE)
    g.rope_ext(a, p, None, 15, 2, *_ROPE)


def test_flash_attn_and_soft_max_mask_shapes_are_checked() -> None:
    g = Graph()
    q, k, v = g.input("q", (4, 5, 16)), g.input("k", (2, 12, 16), "f16"), g.input("v", (2, 12, 8), "f16")
    with pytest.raises(GraphError, match=r"FLASH_ATTN_EXT: operand mask: expected ne\[0\] == n_kv = 12"):
        g.flash_attn_ext(q, k, v, g.input("m", (5, 10), "f16"), 0.25, 0.0, 0.0)
    with pytest.raises(
        GraphError, match=r"FLASH_ATTN_EXT: operand mask: expected type in \{f16\}, given f32"
    ):
        g.flash_attn_ext(q, k, v, g.input("m32", (5, 12)), 0.25, 0.0, 0.0)
    with pytest.raises(GraphError, match="SOFT_MAX: operand mask: expected a mask when max_bias > 0"):
        g.soft_max_ext(g.input("x", (4, 8)), None, 1.0, 8.0)


def test_glu_split_operands_must_match() -> None:
    g = Graph()
    with pytest.raises(GraphError, match=r"GLU: operand b: expected ne \[8, 3, 1, 1\] \(same shape as a\)"):
        g.swiglu_split(g.input("a", (3, 8)), g.input("b", (3, 4)))


def test_op_info_exposes_sources_views_and_params_to_the_policy() -> None:
    g = Graph()
    q = g.permute(g.input("q", (5, 4, 16)), 0, 2, 1, 3)
    out = g.rope_ext(g.cont(q), g.input("p", (4,), "i32"), None, 16, 2, *_ROPE)
    info = out.op_info()
    assert info.op == "ROPE" and info.params["mode"] == 2 and info.params["n_dims"] == 16
    assert info.srcs[0].op == "CONT" and info.srcs[0].srcs[0].op == "PERMUTE"
    assert info.srcs[0].srcs[0].view_src is not None and info.srcs[2] is None


# ---------------------------------------------------------------------------- quantized-weight hook
class _FakeQ8:
    """A stand-in for a quantized weight: it brings its own OpenVINO decompression subgraph."""

    dtype = "q8_0"

    def __init__(self, w: np.ndarray) -> None:
        self.scale = np.abs(w).max(axis=1, keepdims=True) / 127.0
        self.q = np.round(w / self.scale).astype(np.int8)
        self.shape = w.shape

    def dequantize(self) -> np.ndarray:
        return (self.q.astype(np.float32) * self.scale).astype(np.float32)

    def to_ov_node(self):  # type: ignore[no-untyped-def]
        import openvino as ov
        import openvino.opset16 as ops

        return ops.multiply(
            ops.convert(ops.constant(self.q), ov.Type.f32), ops.constant(self.scale.astype(np.float32))
        )


def test_constant_accepts_a_quantized_weight_for_mul_mat_and_get_rows() -> None:
    w = _FakeQ8(rand(6, 32))
    g = Graph()
    wt = g.constant(w, name="blk.0.ffn_up.weight")
    assert wt.dtype == "q8_0" and wt.shape == (6, 32) and wt.is_quantized
    x = g.input("x", (3, 32))
    rows = g.input("r", (2,), "i32")
    outs = [g.mul_mat(wt, x), g.get_rows(wt, rows)]
    X, R = rand(3, 32), np.array([4, 1], np.int32)
    dev = g.compute(outs, {"x": X, "r": R}, device="CPU")
    assert nmse(dev[0], X @ w.dequantize().T) < 1e-12
    np.testing.assert_allclose(dev[1], w.dequantize()[[4, 1]], rtol=1e-6)


def test_device_class_gates_apply_on_a_simulated_gpu_and_cpu_runs() -> None:
    from ovkit.simulate import SimulatedCore

    core = SimulatedCore("laptop")
    g = Graph()
    rows = g.get_rows(g.input("a", (10, 8), "bf16"), g.input("r", (3,), "i32"))
    feed = {"a": rand(10, 8), "r": np.array([1, 2, 3], np.int32)}
    cpu = g.compute(rows, feed, device="CPU", core=core)
    np.testing.assert_array_equal(cpu, g.compute(rows, feed, mode="reference"))
    with pytest.raises(UnsupportedOpError, match=r"not supported on GPU: GET_ROWS: src0 is bf16") as info:
        g.compute(rows, feed, device="GPU", core=core)
    assert info.value.device == "GPU"


def test_outputs_may_be_leaves_and_views_of_constants() -> None:
    g = Graph()
    x = g.input("x", (3, 4))
    c = g.constant(np.arange(12, dtype=np.float32).reshape(3, 4))
    outs = [x, g.view_1d(c, 5, 4), g.transpose(x)]
    X = rand(3, 4)
    for mode in ("device", "reference"):
        got = g.compute(outs, {"x": X}, device="CPU", mode=mode)  # type: ignore[arg-type]
        np.testing.assert_array_equal(got[0], X)
        np.testing.assert_array_equal(got[1], np.arange(1, 6, dtype=np.float32))
        np.testing.assert_array_equal(got[2], X.T)


def test_f16_and_bf16_storage_keeps_inf_nan_and_overflows_like_ggml() -> None:
    g = Graph()
    src = g.scale(g.input("b", (6,)), 1.0)
    to_f16 = g.cpy(src, g.input("z", (6,), "f16"))
    big_bf16 = g.cont(g.input("zb", (6,), "bf16"))
    b = np.array([1e5, -1e5, 65504, 65520, np.inf, np.nan], np.float32)
    feed = {"b": b, "z": np.zeros(6, np.float16), "zb": b * np.float32(1e30)}
    dev = g.compute([to_f16, big_bf16], feed, device="CPU")
    ref = g.compute([to_f16, big_bf16], feed, mode="reference")
    np.testing.assert_array_equal(
        dev[0], np.array([np.inf, -np.inf, 65504, np.inf, np.inf, np.nan], np.float16)
    )
    for d, r in zip(dev, ref, strict=True):
        np.testing.assert_array_equal(d, r)


def test_random_view_permute_chains_match_ggml_memory_semantics() -> None:
    """Random chains of permute/transpose/view/cont: the CPU result equals the reference's direct
    strided read of the base memory (ggml's indexing), whichever OpenVINO path was taken."""
    rng = np.random.default_rng(7)
    for _ in range(60):
        shape = tuple(int(x) for x in rng.integers(1, 6, 4))
        g = Graph()
        t = g.input("a", shape)
        for _step in range(3):
            k = int(rng.integers(0, 4))
            try:
                if k == 0:
                    t = g.permute(t, *[int(x) for x in rng.permutation(4)])
                elif k == 1:
                    t = g.transpose(t)
                elif k == 2:
                    ne = [int(rng.integers(1, t.ne[i] + 1)) for i in range(4)]
                    t = g.view_4d(t, *ne, t.nb[1], t.nb[2], t.nb[3], int(rng.integers(0, 3)) * 4)
                else:
                    t = g.cont(t)
            except GraphError:
                continue
        x = rng.standard_normal(shape).astype(np.float32)
        np.testing.assert_array_equal(
            g.compute(t, {"a": x}, device="CPU"), g.compute(t, {"a": x}, mode="reference")
        )


def test_strided_kv_cache_view_uses_slices_not_a_gather() -> None:
    g = Graph()
    cache = g.input("k_cache", (64, 8, 16))  # [n_ctx, n_head_kv, head_dim]
    k = g.permute(g.view_3d(cache, 16, 8, 10, cache.nb[1], cache.nb[2], 0), 0, 2, 1, 3)  # first 10 cells
    model, _ = g.to_model(k)
    kinds = {op.get_type_name() for op in model.get_ordered_ops()}
    assert "Gather" not in kinds and "Transpose" in kinds
    x = rand(64, 8, 16)
    np.testing.assert_array_equal(g.compute(k, {"k_cache": x}, device="CPU"), x[:10].transpose(1, 0, 2))


def test_constants_take_their_dtype_from_the_array_or_an_explicit_ggml_type() -> None:
    g = Graph()
    assert g.constant(np.zeros((2, 3), np.float16)).dtype == "f16"
    assert g.constant(np.zeros(3, np.int64)).dtype == "i64"
    c = g.constant(np.array([1.00001, 2.3333], np.float32), dtype="bf16")
    assert c.dtype == "bf16"
    np.testing.assert_array_equal(
        g.compute(g.cont(c), {}, device="CPU"), np.array([1.0, 2.328125], np.float32)
    )
    with pytest.raises(
        GraphError, match="constant '': expected a float32/float16/int32/int64 array, given dtype bool"
    ):
        g.constant(np.zeros(3, bool))


def test_solve_tri_is_rejected_on_device_and_solves_in_reference_mode() -> None:
    g = Graph()
    a = g.input("a", (5, 5))
    b = g.input("b", (5, 3))
    x = g.solve_tri(a, b, True, True, False)
    A = np.tril(rand(5, 5)) + 3 * np.eye(5, dtype=np.float32)
    B = rand(5, 3)
    with pytest.raises(UnsupportedOpError, match="SOLVE_TRI"):
        g.compute(x, {"a": A, "b": B}, device="CPU")
    got = g.compute(x, {"a": A, "b": B}, mode="reference")
    np.testing.assert_allclose(A @ got, B, rtol=1e-5, atol=1e-5)
    with pytest.raises(GraphError, match=r"SOLVE_TRI: operand b: expected ne\[1\] == 5 rows"):
        g.solve_tri(a, g.input("bad", (4, 3)), True, True, False)


def test_cpy_shows_the_policy_ggmls_destination_view() -> None:
    g = Graph()
    cache = g.input("cache", (4, 16, 8))
    dst = g.view_2d(cache, 8, 3, cache.nb[1], cache.nb[1] * 2)
    info = g.cpy(g.input("x", (3, 8)), dst).op_info()
    assert info.view_src.ne == cache.ne and info.view_offs == 64 and info.nb == dst.nb
    rows = g.set_rows(cache, g.input("r", (4, 2, 8)), g.input("ids", (4, 2), "i64"))
    assert rows.op_info().view_src is None  # a KV cache written by SET_ROWS is a base for attention views


def test_view_bounds_follow_ggml_packed_size_rule_and_memory_extent() -> None:
    g = Graph()
    a = g.input("a", (5, 4))  # 80 bytes
    with pytest.raises(GraphError, match="VIEW: operand a: expected a view inside its 80-byte buffer"):
        g.view_2d(a, 5, 5, 4, 0)  # overlapping rows: 25 elements · 4 B > 80 B (ggml_view_impl asserts)
    with pytest.raises(GraphError, match="VIEW: operand a: expected a view inside its 80-byte buffer"):
        g.view_2d(
            a, 2, 4, 24, 8
        )  # 8 packed elements fit, but the strided extent 8 + 3·24 + 2·4 = 88 B does not
    ok = g.view_2d(a, 2, 4, 16, 8)
    assert ok.shape == (4, 2)


def test_flash_attn_fully_masked_row_is_zero_as_in_ggml() -> None:
    """ggml's flash attention divides by S only when S != 0: a query whose keys are all masked gets 0."""
    g = Graph()
    q, k, v = (
        g.input("q", (1, 2, 3, 16)),
        g.input("k", (1, 2, 8, 16), "f16"),
        g.input("v", (1, 2, 8, 16), "f16"),
    )
    m = g.input("m", (3, 8), "f16")
    out = g.flash_attn_ext(q, k, v, m, 0.25, 0.0, 0.0)
    mask = np.zeros((3, 8), np.float16)
    mask[1] = -np.inf
    feed = {
        "q": rand(1, 2, 3, 16),
        "k": rand(1, 2, 8, 16).astype(np.float16),
        "v": rand(1, 2, 8, 16).astype(np.float16),
        "m": mask,
    }
    dev, ref = _run_case(lambda g_, *xs: g_.flash_attn_ext(*xs, 0.25, 0.0, 0.0), list(feed.values()))
    for got in (dev, ref):
        assert not np.isnan(got).any()
        np.testing.assert_array_equal(got[1], np.zeros((2, 16), np.float32))  # out ne [Dv, H, n_q]: row n_q=1
    assert out.shape == (3, 2, 16)


def test_types_ggmls_cpu_cannot_run_are_rejected_at_build_time() -> None:
    g = Graph()
    h = g.input("h", (3, 8), "f16")
    with pytest.raises(GraphError, match=r"SCALE: operand a: expected type in \{f32\}, given f16"):
        g.scale(h, 0.5)
    with pytest.raises(GraphError, match=r"SUM_ROWS: operand a: expected type in \{f32\}, given f16"):
        g.sum_rows(h)
    # ggml widens an f16 b to a's vec_dot type (f32 a: exactly), so every float b is accepted
    assert g.mul_mat(g.input("w", (4, 8)), h).dtype == "f32"
    assert g.mul_mat(g.input("w16", (4, 8), "f16"), h).dtype == "f32"


def test_bf16_is_refused_where_ggmls_cpu_kernels_stop_at_f16() -> None:
    g = Graph()
    b = g.input("b", (3, 8), "bf16")
    for build in (g.gelu, g.silu, g.swiglu, g.geglu):
        with pytest.raises(GraphError, match="given bf16"):
            build(b)
    with pytest.raises(GraphError, match=r"CLAMP: operand a: expected type in \{f32, f16\}, given bf16"):
        g.clamp(b, -1.0, 1.0)
    assert g.sigmoid(b).dtype == "bf16" and g.tanh(b).dtype == "bf16"  # these kernels take bf16


def test_graph_lists_its_tensors_as_a_table() -> None:
    g = Graph()
    x = g.input("x", (2, 3))
    y = g.silu(g.transpose(x))
    df = g.to_frame()
    assert repr(g) == "<ovkit.Graph: 3 tensors, 2 ops>"
    assert list(df["op"]) == ["NONE", "TRANSPOSE", "UNARY"]
    assert df.loc[y.id, "sub_op"] == "SILU" and df.loc[1, "view_of"] == x.id and not df.loc[1, "contiguous"]


def test_exp_stays_finite_up_to_the_f32_limit_like_ggml() -> None:
    """OpenVINO's CPU Exp saturates to +inf from x ~ 88.38; ggml's expf is finite up to 88.72."""
    x = np.array([0.0, 1.0, 80.0, 88.5, 88.7, 88.72, 88.73, 100.0], np.float32)
    g = Graph()
    out = g.exp(g.input("x", x.shape))
    dev, ref = _run_case(lambda g_, a: g_.exp(a), [x])
    assert np.isfinite(dev[:6]).all() and np.isinf(dev[6:]).all()
    np.testing.assert_allclose(dev[:6], ref[:6], rtol=1e-6)
    assert out.dtype == "f32"


def test_backward_op_error_names_the_operand_that_does_not_match() -> None:
    """cross_entropy_loss_back(a, b, c): labels c shaped unlike logits b is named as c, not b."""
    g = Graph()
    grad, logits, labels = g.input("grad", (1,)), g.input("logits", (2, 4)), g.input("labels", (2, 3))
    expected = (
        r"CROSS_ENTROPY_LOSS_BACK: operand c: expected ne \[4, 2, 1, 1\] \(same shape as b\), given ne \[3, 2"
    )
    with pytest.raises(GraphError, match=expected):
        g.cross_entropy_loss_back(grad, logits, labels)
