"""The ggml oracle against plain numpy truths, so that the oracle itself can be trusted."""

from __future__ import annotations

import numpy as np
import pytest

from ovkit import oracle
from ovkit.oracle import loader

ggml = oracle.ggml_module()  # ggml-python, loaded by the oracle (after openvino, which it links)

RNG = np.random.default_rng(1234)


def rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def test_ggml_is_available() -> None:
    assert oracle.ggml_available()


# --- numpy truths for builders called by name ------------------------------------------------

# (label, builder name, args factory, numpy truth from the same args)
CALL_CASES = [
    ("add-broadcast", "add", lambda: (rand(3, 4, 5), rand(1, 4, 1)), lambda a, b: a + b),
    ("sub", "sub", lambda: (rand(2, 7), rand(2, 7)), lambda a, b: a - b),
    ("mul-row-broadcast", "mul", lambda: (rand(2, 3, 8), rand(8)), lambda a, b: a * b),
    ("div", "div", lambda: (rand(4, 6), rand(4, 6) + 3.0), lambda a, b: a / b),
    (
        "mul_mat-batched",
        "mul_mat",
        lambda: (rand(2, 5, 16), rand(2, 3, 16)),
        lambda a, b: b @ a.swapaxes(-1, -2),
    ),
    (
        "mul_mat-gqa-broadcast",
        "mul_mat",
        lambda: (rand(2, 5, 16), rand(6, 3, 16)),
        lambda a, b: b @ np.repeat(a, 3, axis=0).swapaxes(-1, -2),
    ),
    ("sqr", "sqr", lambda: (rand(3, 5),), lambda a: a * a),
    ("sqrt", "sqrt", lambda: (np.abs(rand(3, 5)),), np.sqrt),
    ("neg", "neg", lambda: (rand(9),), lambda a: -a),
    ("tanh", "tanh", lambda: (rand(4, 4),), np.tanh),
    ("sigmoid", "sigmoid", lambda: (rand(4, 4),), lambda a: 1 / (1 + np.exp(-a))),
    ("silu", "silu", lambda: (rand(4, 4),), lambda a: a / (1 + np.exp(-a))),
    ("scale", "scale", lambda: (rand(3, 4), 0.25), lambda a, s: a * s),
    ("scale_bias", "scale_bias", lambda: (rand(3, 4), 2.0, -1.0), lambda a, s, b: a * s + b),
    ("clamp", "clamp", lambda: (rand(20), -0.5, 0.5), np.clip),
    ("sum_rows", "sum_rows", lambda: (rand(3, 4, 7),), lambda a: a.sum(-1, keepdims=True)),
    ("cumsum", "cumsum", lambda: (rand(3, 9),), lambda a: np.cumsum(a, -1)),
    (
        "rms_norm",
        "rms_norm",
        lambda: (rand(4, 32), 1e-6),
        lambda a, eps: a / np.sqrt((a * a).mean(-1, keepdims=True) + eps),
    ),
    (
        "norm",
        "norm",
        lambda: (rand(4, 32), 1e-5),
        lambda a, eps: (a - a.mean(-1, keepdims=True)) / np.sqrt(a.var(-1, keepdims=True) + eps),
    ),
    (
        "soft_max_ext-scale",
        "soft_max_ext",
        lambda: (rand(2, 3, 10), None, 0.5, 0.0),
        lambda a, m, s, mb: (
            np.exp(a * s - (a * s).max(-1, keepdims=True))
            / np.exp(a * s - (a * s).max(-1, keepdims=True)).sum(-1, keepdims=True)
        ),
    ),
    (
        "concat-dim0",
        "concat",
        lambda: (rand(2, 3), rand(2, 4), 0),
        lambda a, b, d: np.concatenate([a, b], -1),
    ),
    (
        "concat-dim1",
        "concat",
        lambda: (rand(2, 3), rand(5, 3), 1),
        lambda a, b, d: np.concatenate([a, b], -2),
    ),
    (
        "get_rows",
        "get_rows",
        lambda: (rand(10, 6), np.array([3, 0, 9, 3], dtype=np.int32)),
        lambda a, i: a[i],
    ),
    ("repeat", "repeat", lambda: (rand(1, 3), rand(4, 6)), lambda a, b: np.tile(a, (4, 2))),
    (
        "argsort-asc",
        "argsort",
        lambda: (RNG.permutation(12).astype(np.float32).reshape(2, 6), 0),
        lambda a, o: np.argsort(a, -1),
    ),
]


@pytest.mark.parametrize(("op", "make", "truth"), [c[1:] for c in CALL_CASES], ids=[c[0] for c in CALL_CASES])
def test_ggml_call_matches_numpy(op: str, make, truth) -> None:  # type: ignore[no-untyped-def]
    args = make()
    got = oracle.ggml_call(op, *args)
    want = np.asarray(truth(*args))
    assert got.shape == want.shape or oracle.same_ne(got.shape, want.shape)
    assert oracle.nmse(got.reshape(want.shape), want) < 1e-10, (op, got, want)


def test_results_keep_numpy_order_and_f16_dtype() -> None:
    a = rand(2, 3, 4).astype(np.float16)
    got = oracle.ggml_call("cont", a)
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got, a)


def test_bf16_inputs_are_rounded_like_ggml() -> None:
    x = rand(4, 8) * 1000
    got = oracle.ggml_call("cont", oracle.as_bf16(x))
    np.testing.assert_array_equal(got, oracle.bf16_round(x))
    assert not np.array_equal(got, x)  # the rounding is real
    # round-to-nearest-even of 1 + 2^-8 (halfway between two bf16 values) goes down to 1.0
    assert oracle.bf16_round(np.array([1 + 2**-8], np.float32))[0] == 1.0


def test_builder_function_expresses_permuted_and_viewed_inputs() -> None:
    a = rand(2, 3, 4, 5)
    permuted = oracle.ggml_compute(lambda ctx, t: ggml.ggml_permute(ctx, t, 1, 0, 2, 3), a)
    np.testing.assert_array_equal(permuted, a.transpose(0, 1, 3, 2))
    # view of rows 1..2 of a (2-D view with ggml's byte strides and offset)
    b = rand(4, 6)
    view = oracle.ggml_compute(
        lambda ctx, t: ggml.ggml_view_2d(ctx, t, 6, 2, t.contents.nb[1], t.contents.nb[1]), b
    )
    np.testing.assert_array_equal(view, b[1:3])
    # a non-contiguous (permuted, rows still contiguous) input feeding an op
    c = rand(3, 4, 6)
    s = oracle.ggml_compute(lambda ctx, t: ggml.ggml_sum_rows(ctx, ggml.ggml_permute(ctx, t, 0, 2, 1, 3)), c)
    np.testing.assert_allclose(s, c.transpose(1, 0, 2).sum(-1, keepdims=True), rtol=1e-5)
    # a transposed input made contiguous with cont
    t = oracle.ggml_compute(lambda ctx, x: ggml.ggml_cont(ctx, ggml.ggml_transpose(ctx, x)), b)
    np.testing.assert_array_equal(t, b.T)


def test_multiple_outputs() -> None:
    a, b = rand(3), rand(3)
    s, d = oracle.ggml_compute(lambda ctx, x, y: [ggml.ggml_add(ctx, x, y), ggml.ggml_sub(ctx, x, y)], a, b)
    np.testing.assert_allclose(s, a + b)
    np.testing.assert_allclose(d, a - b)


def test_rope_neox_matches_numpy() -> None:
    x = rand(3, 2, 8)  # (tokens, heads, head_dim) -> ggml ne=[8, 2, 3]
    pos = np.array([0, 5, 11], dtype=np.int32)
    got = oracle.ggml_call("rope_ext", x, pos, None, 8, 2, 0, 10000.0, 1.0, 0.0, 1.0, 32.0, 1.0)
    half = 4
    theta = pos[:, None] * 10000.0 ** (-np.arange(half) * 2 / 8)  # (tokens, half)
    c, s = np.cos(theta)[:, None, :], np.sin(theta)[:, None, :]
    x0, x1 = x[..., :half], x[..., half:]
    want = np.concatenate([x0 * c - x1 * s, x0 * s + x1 * c], -1)
    assert oracle.nmse(got, want) < 1e-10


@pytest.mark.parametrize("qtype", oracle.QUANT_TYPES)
def test_quantize_roundtrip_and_sizes(qtype: str) -> None:
    w = rand(4, 256)
    q = oracle.quantize(qtype, w)
    assert q.nbytes == 4 * (256 // oracle.block_size(qtype)) * oracle.type_size(qtype)
    deq = q.dequantize()
    assert deq.shape == w.shape
    # every format keeps the signal (q8_0 nearly lossless, 4-bit formats within a few percent)
    limit = {"q8_0": 1e-4, "q6_K": 1e-3, "q5_1": 5e-3, "q5_K": 5e-3}.get(qtype, 3e-2)
    assert oracle.nmse(deq, w) < limit
    # quantization is deterministic: the same blocks twice
    assert oracle.quantize_blocks(qtype, w) == q.data


@pytest.mark.parametrize("qtype", oracle.QUANT_TYPES)
def test_quantized_mul_mat_and_get_rows(qtype: str) -> None:
    w, x = rand(8, 256), rand(5, 256)
    deq = oracle.dequantize(qtype, oracle.quantize_blocks(qtype, w), w.shape)
    got = oracle.ggml_mul_mat_quant(qtype, w, x)
    # ggml quantizes the activations too (q8 dot products), hence the small residual
    assert got.shape == (5, 8)
    assert oracle.nmse(got, x @ deq.T) < 5e-4
    rows = np.array([7, 0, 3], dtype=np.int32)
    np.testing.assert_array_equal(oracle.ggml_call("get_rows", oracle.quantize(qtype, w), rows), deq[rows])


def test_nmse_is_test_backend_ops_formula() -> None:
    a = np.array([1.0, 2.0, 3.0], np.float32)
    b = np.array([1.0, 2.0, 4.0], np.float32)
    # mse(a, b) / mse(a, 0): the denominator is the power of the first (tested) argument
    assert oracle.nmse(a, b) == pytest.approx(1.0 / 14.0)
    assert oracle.nmse(b, a) == pytest.approx(1.0 / 21.0)
    assert oracle.nmse(a, a) == 0.0
    # IEEE division like the C code: zero power in `actual` gives inf (or NaN for 0/0)
    assert oracle.nmse(np.zeros(2), np.ones(2)) == np.inf
    assert np.isnan(oracle.nmse(np.zeros(2), np.zeros(2)))
    assert oracle.compare(np.zeros(2), np.zeros(2)).ok  # NaN never exceeds the threshold


def test_compare_handles_nan_and_inf_like_test_backend_ops() -> None:
    ok = oracle.compare(np.array([1.0, 2.0]), np.array([1.0, 2.0]))
    assert ok.ok and ok.err == 0.0
    nan = oracle.compare(np.array([1.0, np.nan]), np.array([1.0, 2.0]))
    assert not nan.ok and "NaN at index 1" in nan.reason
    one_inf = oracle.compare(np.array([np.inf, 1.0]), np.array([3.0, 1.0]))
    assert not one_inf.ok and "inf mismatch" in one_inf.reason
    sign = oracle.compare(np.array([-np.inf]), np.array([np.inf]))
    assert not sign.ok
    # matching infs pass (their NMSE is NaN, which never exceeds the threshold in C either)
    assert oracle.compare(np.array([-np.inf, 1.0]), np.array([-np.inf, 1.0])).ok
    # FLT_MAX counts as infinity in the inf check: FLT_MAX vs a finite value is an inf mismatch
    fmax = np.finfo(np.float32).max
    assert "inf mismatch" in oracle.compare(np.array([fmax, 1.0]), np.array([2.0, 1.0])).reason
    # ... FLT_MAX vs inf passes the inf check; then both squares overflow in f32 (as in C), the
    # NMSE is inf/inf = NaN, and NaN never exceeds the threshold: test-backend-ops passes it
    mixed = oracle.compare(np.array([fmax, 1.0]), np.array([np.inf, 1.0]))
    assert mixed.ok and np.isnan(mixed.err)
    far = oracle.compare(np.array([1.0, 2.0]), np.array([1.0, 2.1]), max_err=1e-7)
    assert not far.ok and "NMSE" in far.reason and "> 1.0e-07" in far.reason


def test_bad_inputs_raise_clear_errors() -> None:
    with pytest.raises(TypeError, match="complex64"):
        oracle.ggml_call("add", np.zeros(3, np.complex64), np.zeros(3, np.complex64))
    with pytest.raises(ValueError, match="multiple of the q4_K block size 256"):
        oracle.quantize("q4_K", rand(2, 100))
    with pytest.raises(ValueError, match="unknown ggml type 'q3_x'"):
        oracle.quantize("q3_x", rand(2, 32))
    with pytest.raises(ValueError, match="ggml has no builder ggml_frobnicate"):
        oracle.ggml_call("frobnicate", rand(3))
    with pytest.raises(ValueError, match="not a quantized type"):
        oracle.quantize_blocks("f16", rand(2, 32))


def test_ggml_program_runs_graph_style_programs() -> None:
    """One program in builder-method form (ovkit Graph's names) runs on real ggml."""
    x, w = rand(4, 6, 8), rand(5, 8)

    def program(b, t):  # type: ignore[no-untyped-def]
        v = b.view_3d(t["x"], 8, 3, 4, t["x"].nb[1], t["x"].nb[2], t["x"].nb[1] * 2)  # rows 2..4
        h = b.mul_mat(t["w"], b.cont(v))
        return b.soft_max_ext(h, None, 0.5, 0.0)

    got = oracle.ggml_program(program, {"x": x, "w": w})
    h = x[:, 2:5, :] @ w.T * 0.5
    want = np.exp(h - h.max(-1, keepdims=True))
    want /= want.sum(-1, keepdims=True)
    assert got.shape == (4, 3, 5)
    assert oracle.nmse(got, want) < 1e-10


def test_builder_handles_functions_without_ctx_and_enum_names() -> None:
    a, s = rand(3, 4, 6), rand(3)  # ggml ne [6, 4, 3]: 3 heads (ne[2]), one sink each

    def program(b, t):  # type: ignore[no-untyped-def]
        out = b.soft_max_ext(t["a"], None, 1.0, 0.0)
        assert b.soft_max_add_sinks(out, t["s"]) is None  # ggml_soft_max_add_sinks(a, sinks): no ctx
        return out

    got = oracle.ggml_program(program, {"a": a, "s": s})
    z = np.concatenate([a, np.broadcast_to(s[:, None, None], (3, 4, 1))], -1)  # sink = extra logit per head
    e = np.exp(z - z.max(-1, keepdims=True))
    want = (e / e.sum(-1, keepdims=True))[..., :6]
    assert oracle.nmse(got, want) < 1e-10
    g = oracle.ggml_program(lambda b, t: b.glu(t["a"], "SWIGLU", False), {"a": a})
    x0, x1 = a[..., :3], a[..., 3:]
    assert oracle.nmse(g, x0 / (1 + np.exp(-x0)) * x1) < 1e-10
    with pytest.raises(AttributeError, match="ggml_frobnicate"):
        oracle.ggml_program(lambda b, t: b.frobnicate(t["a"]), {"a": a})


def test_program_benchmark() -> None:
    res = oracle.ggml_benchmark_program(
        lambda b, t: b.mul_mat(t["w"], t["x"]), {"w": rand(64, 64), "x": rand(8, 64)}, n_runs=3
    )
    assert len(res.times_s) == 3 and res.n_threads == 2
    assert 0 < res.min_s <= res.median_s <= max(res.times_s)


def test_quantized_inputs_in_programs() -> None:
    w, x = rand(6, 64), rand(3, 64)
    q = oracle.quantize("q8_0", w)
    got = oracle.ggml_program(lambda b, t: b.mul_mat(t["w"], t["x"]), {"w": q, "x": x})
    assert oracle.nmse(got, x @ q.dequantize().T) < 1e-4
    tensor_info = {}

    def program(b, t):  # type: ignore[no-untyped-def]
        tensor_info["dtype"], tensor_info["ne"] = t["w"].dtype, t["w"].ne
        return b.get_rows(t["w"], t["r"])

    rows = oracle.ggml_program(program, {"w": q, "r": np.array([5, 0], np.int32)})
    np.testing.assert_array_equal(rows, q.dequantize()[[5, 0]])
    assert tensor_info == {"dtype": "q8_0", "ne": (64, 6, 1, 1)}


def test_quantized_results_are_decoded() -> None:
    """A graph whose result is quantized (cpy into q8_0) comes back as the decoded f32 values."""
    x = rand(4, 64)
    dst = oracle.quantize("q8_0", np.zeros((4, 64), np.float32))
    got = oracle.ggml_program(lambda b, t: b.cpy(t["x"], t["d"]), {"x": x, "d": dst})
    assert got.dtype == np.float32 and got.shape == (4, 64)
    np.testing.assert_allclose(got, oracle.quantize("q8_0", x).dequantize(), atol=1e-6)


def test_importing_the_oracle_loads_no_ggml() -> None:
    """ggml-python (and its libggml) loads on first use: importing the oracle, or ovkit.quant which
    imports it, leaves it out of the process."""
    import subprocess
    import sys

    code = (
        "import sys, ovkit.oracle, ovkit.quant; print('ggml' in sys.modules, ovkit.oracle.ggml_available())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "True"]


def test_without_ggml_python_the_error_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loader, "load_ggml", lambda: None)
    assert not oracle.ggml_available()
    with pytest.raises(oracle.GgmlUnavailableError, match="pip install ggml-python"):
        oracle.ggml_call("add", rand(3), rand(3))
    # the pure-numpy parts keep working
    assert oracle.nmse(np.ones(3), np.ones(3)) == 0.0


def test_view_tensor_of_a_computed_tensor_is_not_an_edge_in_ggml() -> None:
    """ggml_view_tensor sets no src: the viewed op is not computed, the view reads zeros.

    (ovkit's Graph.view_tensor keeps the dependency; programs shared by both should view
    computed tensors with view_1d..4d, which do record the edge.)
    """
    x = rand(3, 4)
    lone = oracle.ggml_program(lambda b, t: b.view_tensor(b.scale(t["x"], 2.0)), {"x": x})
    np.testing.assert_array_equal(lone, np.zeros_like(x))
    edge = oracle.ggml_program(lambda b, t: b.view_2d(b.scale(t["x"], 2.0), 4, 3, 16, 0), {"x": x})
    np.testing.assert_allclose(edge, 2 * x)
