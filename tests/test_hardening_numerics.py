"""NaN and layout edge cases where ovkit must give ggml's numbers: bf16 rounding of a NaN,
soft_max of a row holding a NaN, and reductions over permuted (non-contiguous) views."""

from __future__ import annotations

import ctypes
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import openvino as ov
import openvino.opset16 as ops
import pytest

from ovkit import oracle
from ovkit.dtypes import TYPE_OF_NUMPY, bf16_round, f32_to_bf16_bits
from ovkit.engine import Engine
from ovkit.graph import Graph, GraphError
from ovkit.ir import round_to

#: float32 bit patterns whose bf16 rounding is an edge: NaNs whose payload sits in the low 16 bits
#: only (the rounding carry would make them ±inf), both signs of NaN and inf, the largest finite
#: (rounds up to inf), ties to even, subnormals and zeros.
EDGE_BITS = np.array(
    [
        0x7F800001, 0xFF800001, 0x7F807FFF, 0x7FC00000, 0xFFC00000, 0x7FFFFFFF, 0xFFFFFFFF,
        0x7F800000, 0xFF800000, 0x7F7FFFFF, 0xFF7FFFFF, 0x3F808000, 0x3F818000, 0x3F808001,
        0x00000001, 0x00008000, 0x00018000, 0x80000001, 0x00000000, 0x80000000,
    ],
    dtype=np.uint32,
)  # fmt: skip


def ggml_bf16_bits(u: np.ndarray) -> np.ndarray:
    """ggml's own conversion (``ggml_fp32_to_bf16_row``) of the float32 bit patterns ``u``."""
    ggml = oracle.ggml_module()  # ggml-python, loaded by the oracle (after openvino)
    src = np.ascontiguousarray(u, dtype=np.uint32).view(np.float32)
    out = np.zeros(src.size, np.uint16)
    ggml.ggml_fp32_to_bf16_row(
        src.ctypes.data_as(ctypes.POINTER(ctypes.c_float)),
        ctypes.cast(out.ctypes.data, ctypes.POINTER(ggml.ggml_bf16_t)),
        src.size,
    )
    return out


# ---------------------------------------------------------------------------------- bf16 rounding
def test_bf16_rounding_is_ggmls_bit_for_bit_nan_kept_nan() -> None:
    x = EDGE_BITS.view(np.float32)
    want = ggml_bf16_bits(EDGE_BITS)
    np.testing.assert_array_equal(f32_to_bf16_bits(x), want)
    widened = (want.astype(np.uint32) << 16).view(np.float32)
    for name, got in (("ir.round_to", round_to("bf16", x)), ("oracle.bf16_round", oracle.bf16_round(x))):
        np.testing.assert_array_equal(got.view(np.uint32), widened.view(np.uint32), err_msg=name)
    assert np.isnan(bf16_round(x)).sum() == np.isnan(x).sum()


def bf16_passthrough_model(n: int) -> ov.Model:
    """A bf16 Parameter widened to f32: the result is exactly the bf16 the host fed."""
    p = ops.parameter([n], ov.Type.bf16, name="x")
    y = ops.convert(p, ov.Type.f32)
    y.output(0).get_tensor().set_names({"y"})
    return ov.Model([y], [p], "bf16_in")


def test_bf16_input_fed_from_f32_keeps_nan_on_the_device() -> None:
    """The engine rounds a float32 array into a bf16 input: a NaN must stay NaN (was +inf)."""
    x = EDGE_BITS.view(np.float32)
    got = Engine(env={}).run("bf16_in", lambda: bf16_passthrough_model(len(x)), {"x": x}, device="CPU")[0]
    assert np.array_equal(np.isnan(got), np.isnan(x)), got
    want = (ggml_bf16_bits(EDGE_BITS).astype(np.uint32) << 16).view(np.float32)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


# ------------------------------------------------------------------------- running one program 3 ways
Program = Callable[[Any, dict[str, Any]], Any]


def three_ways(program: Program, data: dict[str, np.ndarray]) -> tuple[np.ndarray, list[np.ndarray]]:
    """ggml's result of ``program`` and ovkit's: the OpenVINO translation on the CPU device (the
    policy bypassed: upstream registers no SUM, MEAN, ...) and the numpy reference."""
    g = Graph()
    leaves = {n: g.input(n, a.shape, TYPE_OF_NUMPY[a.dtype]) for n, a in data.items()}
    out = program(g, leaves)
    want = np.asarray(oracle.ggml_program(program, data))
    return want, [
        g.compute(out, data, "CPU", policy=False),
        np.asarray(g.compute(out, data, mode="reference")),
    ]


# ------------------------------------------------------------------------ f16 rounding inside a graph
#: f32 values whose f16 rounding is an edge: ties to even among normals and on the subnormal grid,
#: the largest finite f16 and what rounds past it to inf, the normal/subnormal border, inf, NaN.
F16_EDGES = np.array(
    [
        0.0, -0.0, 1 + 2**-11, 1 + 3 * 2**-11, -(1 + 2**-11), 2**-14, 2**-14 * (1 - 2**-12),
        2**-25, 3 * 2**-25, 5 * 2**-25, -(3 * 2**-25), 2**-26, 65504.0, 65519.99, 65520.0,
        -65520.0, 70000.0, 1e6, 1e38, 3e38, np.inf, -np.inf, np.nan,
    ],
    dtype=np.float32,
)  # fmt: skip


def test_f16_store_inside_a_graph_rounds_as_ggml_overflow_to_inf() -> None:
    """An f32 → f16 → f32 copy chain: the f16 stays inside the graph (the plugin computes it as
    rounding arithmetic in f32), so its edges are ovkit's own: each value must be ggml's,
    bit for bit, 70000 included (it was 70016, a finite value f16 cannot hold)."""
    rng = np.random.default_rng(11)
    spread = rng.standard_normal(4096) * 10.0 ** rng.integers(-9, 6, 4096)
    x = np.concatenate([F16_EDGES, spread.astype(np.float32)]).astype(np.float32)
    data = {"x": x, "h": np.zeros(x.size, np.float16), "y": np.zeros(x.size, np.float32)}
    want, got = three_ways(lambda b, t: b.cpy(b.cpy(t["x"], t["h"]), t["y"]), data)
    edges = want[: F16_EDGES.size]
    assert np.isinf(edges).sum() == 8 and np.isnan(edges).sum() == 1  # the edges reached ggml
    for way, g in zip(("device", "reference"), got, strict=True):
        np.testing.assert_array_equal(g.view(np.uint32), want.view(np.uint32), err_msg=way)


# ------------------------------------------------------------------------------- soft_max with a NaN
def _rows_with_nan(shape: tuple[int, ...]) -> np.ndarray:
    """Logits whose rows hold a NaN first, in the middle, last, beside -inf and beside +inf, and
    rows without one (their numbers must stay ggml's)."""
    x = np.random.default_rng(3).uniform(-4, 4, shape).astype(np.float32)
    rows = x.reshape(-1, shape[-1])
    n = shape[-1]
    rows[0, 0] = rows[1, n // 2] = rows[2, n - 1] = np.nan
    rows[3, 0], rows[3, 1] = -np.inf, np.nan
    rows[4, 2], rows[4, 3] = np.inf, np.nan
    return x


SOFT_MAX_CASES: dict[str, tuple[Program, dict[str, np.ndarray]]] = {
    "soft_max": (lambda b, t: b.soft_max(t["x"]), {"x": _rows_with_nan((3, 6, 8))}),
    "soft_max_ext-scale": (
        lambda b, t: b.soft_max_ext(t["x"], None, 0.37, 0.0),
        {"x": _rows_with_nan((3, 6, 8))},
    ),
    "soft_max_ext-f32-mask-scale-alibi": (
        lambda b, t: b.soft_max_ext(t["x"], t["m"], 0.37, 8.0),
        {
            "x": _rows_with_nan((4, 6, 8)),
            "m": np.random.default_rng(4).uniform(-1, 0, (6, 8)).astype(np.float32),
        },
    ),
    "soft_max_ext-f16-mask-scale": (
        lambda b, t: b.soft_max_ext(t["x"], t["m"], 0.37, 0.0),
        {
            "x": _rows_with_nan((4, 6, 8)),
            "m": np.random.default_rng(5).uniform(-1, 0, (6, 8)).astype(np.float16),
        },
    ),
    "soft_max_ext-nan-in-mask": (  # the mask's NaN reaches the row through the sum, as the logits'
        lambda b, t: b.soft_max_ext(t["x"], t["m"], 0.37, 0.0),
        {
            "x": np.random.default_rng(6).uniform(-4, 4, (2, 6, 8)).astype(np.float32),
            "m": np.where(np.eye(6, 8, 2) > 0, np.float32(np.nan), np.float32(0)),
        },
    ),
}


def _with_sinks(b: Any, t: dict[str, Any]) -> Any:
    out = b.soft_max_ext(t["x"], t["m"], 0.37, 0.0)
    b.soft_max_add_sinks(out, t["s"])
    return out


SOFT_MAX_CASES["soft_max_ext-mask-sinks"] = (
    _with_sinks,
    {
        "x": _rows_with_nan((4, 6, 8)),
        "m": np.zeros((6, 8), np.float32),
        "s": np.array([0.5, np.nan, -1.0, 2.0], np.float32),  # head 1's sink is NaN: all its rows
    },
)


@pytest.mark.parametrize("name", list(SOFT_MAX_CASES))
def test_soft_max_row_with_a_nan_is_all_nan_as_ggml(name: str) -> None:
    program, data = SOFT_MAX_CASES[name]
    want, got = three_ways(program, data)
    nan_rows = np.isnan(want).any(axis=-1)
    assert nan_rows.any() and (np.isnan(want).all(axis=-1) == nan_rows).all()  # ggml: whole rows
    for way, g in zip(("device", "reference"), got, strict=True):
        np.testing.assert_array_equal(np.isnan(g), np.isnan(want), err_msg=f"{name}: {way}: NaN rows")
        np.testing.assert_allclose(g[~nan_rows], want[~nan_rows], rtol=1e-5, atol=1e-7, err_msg=way)


def test_soft_max_with_a_nan_through_the_policy_path() -> None:
    """``Graph.compute`` on the CPU device (the path a user runs, policy included) gives NaN rows."""
    g = Graph()
    x = g.input("x", (3, 6, 8))
    out = g.soft_max_ext(x, None, 0.37, 0.0)
    data = _rows_with_nan((3, 6, 8))
    got = np.asarray(g.compute(out, {"x": data}, device="CPU"))
    np.testing.assert_array_equal(np.isnan(got).all(axis=-1), np.isnan(data).any(axis=-1))


# ------------------------------------------------------------------ reductions over permuted views
# ggml's SUM, MEAN, ARGMAX, ARGSORT, TOP_K and LEAKY_RELU kernels read each row of their source
# as ne[0] consecutive elements from the row's start, whatever its nb[0] (ARGSORT, TOP_K and
# LEAKY_RELU find row r at r·nb[1], as if rows were packed): over a permute or transpose that moves
# dim 0, or a slice, ggml's result is of that memory (rows overlapping, the tensor's other
# elements unread), and ovkit's must be the same on the device and in the reference.
def _uniform(shape: tuple[int, ...], lo: float = -0.9, hi: float = 1.1, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(lo, hi, shape).astype(np.float32)


def _distinct(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """Distinct values (no ties for the index results to break)."""
    n = int(np.prod(shape))
    return (np.random.default_rng(seed).permutation(n).reshape(shape) / n * 2 - 1).astype(np.float32)


REDUCTION_CASES: dict[str, tuple[Program, dict[str, np.ndarray]]] = {
    # the test-backend-ops row SUM(type=f32,ne=[33,256,1,1],permute=[1,0,2,3])
    "sum-f32-33x256-permute-1023": (
        lambda b, t: b.sum(b.permute(t["a"], 1, 0, 2, 3)),
        {"a": _uniform((256, 33))},
    ),
    "sum-f16-transpose": (
        lambda b, t: b.sum(b.transpose(t["a"])),
        {"a": _uniform((24, 10)).astype(np.float16)},
    ),
    "sum-f32-permute-2013": (
        lambda b, t: b.sum(b.permute(t["a"], 2, 0, 1, 3)),
        {"a": _uniform((3, 6, 5, 11))},
    ),
    "mean-permute-1023": (lambda b, t: b.mean(b.permute(t["a"], 1, 0, 2, 3)), {"a": _uniform((3, 6, 5, 11))}),
    "mean-transpose": (lambda b, t: b.mean(b.transpose(t["a"])), {"a": _uniform((64, 33))}),
    "argmax-transpose": (lambda b, t: b.argmax(b.transpose(t["a"])), {"a": _distinct((40, 12))}),
    "argsort-asc-transpose": (lambda b, t: b.argsort(b.transpose(t["a"]), 0), {"a": _distinct((3, 16, 9))}),
    "argsort-desc-permute": (
        lambda b, t: b.argsort(b.permute(t["a"], 1, 0, 2, 3), 1),
        {"a": _distinct((3, 16, 9))},
    ),
    "top_k-transpose": (lambda b, t: b.top_k(b.transpose(t["a"]), 4), {"a": _distinct((30, 20))}),
    "top_k-slice": (  # rows packed as ggml assumes: plane 1 is read from plane 0's later rows
        lambda b, t: b.top_k(b.view_3d(t["a"], 10, 3, 4, t["a"].nb[1], t["a"].nb[2], 0), 3),
        {"a": _distinct((4, 6, 20))},
    ),
    "argsort-desc-slice": (
        lambda b, t: b.argsort(b.view_3d(t["a"], 10, 3, 4, t["a"].nb[1], t["a"].nb[2], 0), 1),
        {"a": _distinct((4, 6, 20))},
    ),
    "leaky_relu-transpose": (
        lambda b, t: b.leaky_relu(b.transpose(t["a"]), 0.1, False),
        {"a": _uniform((6, 10), -1, 1)},
    ),
}


@pytest.mark.parametrize("name", list(REDUCTION_CASES))
def test_reduction_over_a_permuted_view_matches_ggml(name: str) -> None:
    program, data = REDUCTION_CASES[name]
    want, got = three_ways(program, data)
    for way, g in zip(("device", "reference"), got, strict=True):
        assert g.shape == want.shape and g.dtype == want.dtype, (
            way,
            g.shape,
            g.dtype,
            want.shape,
            want.dtype,
        )
        if want.dtype.kind == "i":
            np.testing.assert_array_equal(g, want, err_msg=f"{name}: {way}")
        else:
            verdict = oracle.compare(g, want)
            assert verdict.ok, f"{name}: {way}: {verdict}"


#: op -> its builder call on a source ``a``, as text (for ggml in a child process) and as code,
#: and the numpy result of that call on an array.
DENSE_ROW_ASSERTS: dict[str, tuple[str, Callable[[Any, Any], Any], Callable[[np.ndarray], np.ndarray]]] = {
    "SUM_ROWS": ("sum_rows(a)", lambda b, a: b.sum_rows(a), lambda x: x.sum(-1, keepdims=True)),
    "CUMSUM": ("cumsum(a)", lambda b, a: b.cumsum(a), lambda x: np.cumsum(x, -1)),
    "RMS_NORM": (
        "rms_norm(a, 1e-6)",
        lambda b, a: b.rms_norm(a, 1e-6),
        lambda x: x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6),
    ),
}


@pytest.mark.parametrize("op", list(DENSE_ROW_ASSERTS))
def test_reduction_whose_ggml_kernel_asserts_dense_rows_computes_the_views_elements(op: str) -> None:
    """The rest of the class: ggml ends the process on a transposed source (its kernel's
    GGML_ASSERT(src0->nb[0] == sizeof(float))), so there is no ggml value to read the memory as;
    ovkit computes the view's own elements there, on the device as in the reference."""
    call, build, numpy_op = DENSE_ROW_ASSERTS[op]
    program = f"lambda b, t: (lambda a: b.{call})(b.transpose(t['a']))"
    ggml_run = (
        "import numpy as np\nfrom ovkit import oracle\n"
        f"oracle.ggml_program({program}, {{'a': np.ones((6, 10), np.float32)}})\n"
    )
    proc = subprocess.run([sys.executable, "-c", ggml_run], capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "nb[0] == sizeof(float)" in proc.stderr, proc.stderr[-2000:]

    x = _uniform((6, 10), -1, 1)
    g = Graph()
    out = build(g, g.transpose(g.input("a", x.shape)))
    want = numpy_op(x.T.astype(np.float64))
    for got in (g.compute(out, {"a": x}, "CPU", policy=False), g.compute(out, {"a": x}, mode="reference")):
        np.testing.assert_allclose(np.asarray(got).reshape(want.shape), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("op", "build"),
    [
        ("ARGSORT", lambda g, a: g.argsort(a, 0)),
        ("TOP_K", lambda g, a: g.top_k(a, 2)),
        ("LEAKY_RELU", lambda g, a: g.leaky_relu(a, 0.1, False)),
    ],
)
def test_rows_ggml_would_read_past_the_buffer_are_refused(op: str, build: Any) -> None:
    """ARGSORT, TOP_K and LEAKY_RELU find row r at r·nb[1]: over a permute of the outer dims the
    last rows lie past the tensor's buffer, memory ggml reads without a check. ovkit refuses the
    node, naming the strides and where the reads end."""
    g = Graph()
    a = g.input("a", (5, 3, 4))  # ne [4, 3, 5]
    p = g.permute(a, 0, 2, 1, 3)  # ne [4, 5, 3], nb [4, 48, 16, 240]: row r at r·48 bytes
    with pytest.raises(
        GraphError,
        match=rf"^{op}: .*given nb \[4, 48, 16, 240\]: .*rows end at element 171, past the 60 of its buffer",
    ):
        build(g, p)
    build(g, g.cont(p))
