"""numpy references of ggml's op semantics (the ggml CPU backend is the oracle).

Values are 4-D arrays in numpy order ``[ne3, ne2, ne1, ne0]``; f16 values are ``np.float16``,
bf16 values are float32 arrays holding bf16-rounded numbers. Each reference computes in f32
as ggml's CPU backend does and the evaluator rounds the result to the node's type.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ovkit.dtypes import NUMPY_DTYPE
from ovkit.ir import GraphError, GraphIR, Op, Tensor, ggml_index_map, interpret, round_to
from ovkit.ops import geometry
from ovkit.ops.formulas import FORMULAS, Formula, Num, Prim, attention_scores, quantized_write, register_in

Arr = np.ndarray
#: an f32 array: what every reference computes in (its arithmetic keeps the element type)
F32 = npt.NDArray[np.float32]
ReferenceFn = Callable[[Tensor, list[Any]], Arr]
REFERENCES: dict[Op, ReferenceFn] = {}


#: ``@reference(Op.X, ...)`` registers the numpy reference of those op-table keys.
reference = functools.partial(register_in, REFERENCES)


def f32(x: npt.ArrayLike) -> F32:
    """``x`` as an f32 array."""
    return np.asarray(x, dtype=np.float32)


def evaluate(graph: GraphIR, outputs: Sequence[Tensor], feed: dict[str, Arr]) -> list[Arr]:
    """Run ``outputs`` with the numpy references; arrays in each output's numpy shape and dtype."""

    def leaf(t: Tensor) -> Arr:
        if t.is_input:
            return feed[t.name].reshape(tuple(reversed(t.ne)))
        quantized = hasattr(t.value, "dequantize") and not isinstance(t.value, np.ndarray)
        return np.asarray(f32(t.value.dequantize()) if quantized else t.value).reshape(tuple(reversed(t.ne)))

    def node(t: Tensor, xs: list[Any]) -> Arr:
        fn = REFERENCES.get(t.op_key)
        if fn is None:
            raise GraphError(f"{t.describe()}: no numpy reference for {t.op_key}")
        if 0 in t.ne:  # a zero-size node: no elements to compute
            return np.zeros(tuple(reversed(t.ne)), np.float32)
        out = np.asarray(fn(t, xs))
        # a quantized result (CPY, SET_ROWS) is already ggml's stored values, as f32
        return (round_to(t.dtype, out) if t.dtype in NUMPY_DTYPE else out).reshape(tuple(reversed(t.ne)))

    def view(t: Tensor, vs: dict[int, Arr]) -> Arr:  # element i is base memory[offs + Σ i·nb]
        return vs[t.memory.id].reshape(-1)[ggml_index_map(t)]

    values = interpret(graph, outputs, leaf, view, node)
    return [
        values[o.id].reshape(o.shape).astype(NUMPY_DTYPE.get(o.dtype, np.float32), copy=False)
        for o in outputs
    ]


def repeat_to(x: Arr, big: Sequence[int]) -> Arr:
    """ggml repeat: tile 4-D ``x`` to the ne ``big``."""
    reps = [big[3 - i] // x.shape[i] for i in range(4)]
    return np.tile(x, reps) if any(r != 1 for r in reps) else x


# ---------------------------------------------------------------------------- elementwise
def _sigmoid(x: F32) -> F32:
    return np.float32(1.0) / (np.float32(1.0) + np.exp(-x))


def _round_half_away(x: F32) -> F32:
    """C ``roundf``: halves away from zero (x − trunc(x) is exact, unlike x + 0.5)."""
    t = np.trunc(x)
    return np.where(np.abs(x - t) >= 0.5, t + np.sign(x), t)


_erf = np.frompyfunc(math.erf, 1, 1)
_PRIMS: dict[str, Callable[[F32], Any]] = {
    "neg": np.negative, "abs": np.abs, "sign": np.sign, "floor": np.floor, "ceil": np.ceil,
    "trunc": np.trunc, "round_away": _round_half_away, "round_even": np.rint, "sqrt": np.sqrt, "exp": np.exp,
    "expm1": np.expm1, "log": np.log, "sin": np.sin, "cos": np.cos, "tanh": np.tanh,
    "sigmoid": _sigmoid, "erf": lambda x: _erf(x.astype(np.float64)),  # C's erff, from f64
}  # fmt: skip


def _v(x: Arr | Num) -> Any:
    return np.float32(x) if isinstance(x, float | int) else x


def _binary(fn: Callable[[Any, Any], Any]) -> Callable[[Any, Arr | Num, Arr | Num], F32]:
    return lambda self, a, b: f32(fn(_v(a), _v(b)))


def _compare(fn: Callable[[Any, Any], Any]) -> Callable[[Any, Arr, Num], Arr]:
    return lambda self, a, b: np.asarray(fn(a, np.float32(b)))


class NumpyOps:
    """:class:`~ovkit.ops.formulas.ArrayOps` over f32 numpy arrays (IEEE results, no warnings)."""

    def f32(self, x: Arr) -> F32:
        return f32(x)

    add, sub, mul, div, maximum, minimum = (
        _binary(f) for f in (np.add, np.subtract, np.multiply, np.divide, np.maximum, np.minimum)
    )
    mul_rn, div_rn = mul, div  # numpy rounds each product and quotient
    gt, ge, le, ne = (_compare(f) for f in (np.greater, np.greater_equal, np.less_equal, np.not_equal))

    def first_largest(self, x: Arr) -> Arr:
        return np.take_along_axis(x, np.abs(x).argmax(axis=-1)[..., None], axis=-1)

    def where(self, cond: Arr, a: Arr | Num, b: Arr | Num) -> F32:
        return f32(np.where(cond, _v(a), _v(b)))

    def unary(self, name: Prim, x: Arr) -> F32:
        return f32(_PRIMS[name](f32(x)))

    def rounded(self, x: Arr, dtype: str) -> F32:
        return f32(x) if dtype == "f32" else f32(round_to(dtype, x))

    def repeat(self, x: Arr, small: Sequence[int], big: Sequence[int]) -> Arr:
        return repeat_to(x, big)

    def head(self, x: Arr, start: int, stop: int) -> Arr:
        return x[..., start:stop]

    def truncated(self, x: Arr, dtype: str) -> Arr:
        return np.trunc(f32(x)).astype(NUMPY_DTYPE[dtype])

    def full(self, ne: Sequence[int], value: float) -> F32:
        return np.full(tuple(reversed(ne)), value, dtype=np.float32)

    def const(self, value: Arr) -> Arr:
        return value

    def mean_rows(self, x: Arr) -> F32:
        return f32(f32(x).astype(np.float64).mean(axis=-1, keepdims=True))

    def reduce(self, kind: str, x: Arr, axes: Sequence[int]) -> F32:  # sums in f64, as ggml's ggml_float
        if kind in ("max", "min"):
            return f32(getattr(np, kind)(x, axis=tuple(axes), keepdims=True))
        return f32(f32(x).astype(np.float64).sum(axis=tuple(axes), keepdims=True))

    def reshape(self, x: Arr, shape: Sequence[int]) -> Arr:
        return np.reshape(x, tuple(shape))

    def transpose(self, x: Arr, order: Sequence[int]) -> Arr:
        return np.transpose(x, tuple(order))

    def concat(self, xs: Sequence[Arr], axis: int) -> Arr:
        return np.concatenate([np.asarray(x) for x in xs], axis=axis)

    def take(self, x: Arr, idx: Arr, axis: int) -> Arr:
        return np.take(x, np.asarray(idx), axis=axis)

    def matmul(self, a: Arr, b: Arr, ta: bool = False, tb: bool = False) -> F32:
        a64, b64 = f32(a).astype(np.float64), f32(b).astype(np.float64)
        return f32((np.swapaxes(a64, -1, -2) if ta else a64) @ (np.swapaxes(b64, -1, -2) if tb else b64))

    def pad(self, x: Arr, begin: Sequence[int], end: Sequence[int], mode: str) -> F32:
        return f32(np.pad(f32(x), list(zip(begin, end, strict=True)), mode=mode))  # type: ignore[call-overload]

    def expand_batch(self, x: Arr, small: Sequence[int], big: Sequence[int]) -> Arr:
        return np.repeat(np.repeat(x, big[3] // small[3], axis=0), big[2] // small[2], axis=1)

    def conv(self, x: Arr, w: Arr, geom: geometry.ConvGeometry, depthwise: bool) -> F32:
        sizes, ks, s, p, d, out = geom
        idx, _ = geometry.window_index(sizes, ks, s, p, d, out)
        x = f32(x)
        nb, c = x.shape[:2]
        g = c if depthwise else 1  # channel groups
        planes = np.concatenate([x.reshape(nb, c, -1), np.zeros((nb, c, 1), np.float32)], axis=-1)
        cols = planes[..., idx].reshape(nb, g, c // g, math.prod(out), -1)  # the zero slot outside
        wg = f32(w).reshape(g, -1, c // g, math.prod(ks))
        y = np.einsum("ngcpk,gock->ngop", cols.astype(np.float64), wg.astype(np.float64))
        return f32(y.reshape(nb, -1, *out))

    def sorted_indices(self, x: Arr, k: int, largest: bool) -> Arr:
        return np.argsort(-f32(x) if largest else f32(x), axis=-1, kind="stable")[..., :k].astype(np.int32)

    def softmax(self, w: Arr, sinks: Arr | None) -> F32:  # sums in f64, as ggml's ggml_float
        w64 = w.astype(np.float64)
        mx = w64.max(axis=-1, keepdims=True)
        if sinks is not None:
            s = sinks.astype(np.float64).reshape(1, -1, 1, 1)
            mx = np.maximum(mx, s)
        with np.errstate(invalid="ignore", over="ignore"):
            e = np.exp(w64 - mx)
            total = e.sum(axis=-1, keepdims=True)
            if sinks is not None:
                total = total + np.exp(s - mx)
            return f32(e / total)

    def conv_transpose(self, x: Arr, w: Arr, stride: int) -> F32:
        (nb, _, h, wd), (_, oc, kh, kw) = x.shape, w.shape
        taps = np.einsum("nihw,iokl->nohwkl", f32(x).astype(np.float64), f32(w).astype(np.float64))
        out = np.zeros((nb, oc, (h - 1) * stride + kh, (wd - 1) * stride + kw))
        for ky, kx in itertools.product(range(kh), range(kw)):
            rows, cols = (
                slice(ky, ky + (h - 1) * stride + 1, stride),
                slice(kx, kx + (wd - 1) * stride + 1, stride),
            )
            out[:, :, rows, cols] += taps[..., ky, kx]
        return f32(out)


NUMPY = NumpyOps()


def _numpy_formula(fn: Formula) -> ReferenceFn:
    def ref(t: Tensor, xs: list[Any]) -> Arr:
        with np.errstate(all="ignore"):  # ggml's IEEE results: inf, nan, -0 as they come
            return np.asarray(fn(NUMPY, t, xs))

    return ref


for _op, _fn in FORMULAS.items():
    reference(_op)(_numpy_formula(_fn))


#: The references that are one numpy expression.
ONE_EXPRESSION: dict[tuple[Op, ...], Callable[[Tensor, list[Any]], Any]] = {
    (Op.REPEAT,): lambda t, xs: repeat_to(np.asarray(xs[0]), t.ne),
    (Op.CUMSUM,): lambda t, xs: np.cumsum(f32(xs[0]), axis=-1, dtype=np.float32),
    (Op.COUNT_EQUAL,): lambda t, xs: np.array(
        [np.count_nonzero(np.asarray(xs[0]) == np.asarray(xs[1]))], np.int64
    ),
    (Op.ROLL,): lambda t, xs: np.roll(
        np.asarray(xs[0]), [t.params[f"shift{d}"] for d in (3, 2, 1, 0)], (0, 1, 2, 3)
    ),
}
for _keys, _one in ONE_EXPRESSION.items():
    reference(*_keys)(_one)


# ---------------------------------------------------------------------------- rows
@reference(Op.GET_ROWS)
def get_rows(t: Tensor, xs: list[Arr]) -> Arr:
    """out[i12, i11, i10] = a[i12, i11, b[i12, i11, i10]] (rows picked within the same batch)."""
    a, idx = np.asarray(xs[0]), np.asarray(xs[1])[0]  # idx [b2, b1, b0]
    if a.dtype != np.int32:
        a = f32(a)
    i3, i2, _ = np.ogrid[: t.ne[3], : t.ne[2], :1]
    return np.asarray(a[i3, i2, idx])


@reference(Op.SET_ROWS)
def set_rows(t: Tensor, xs: list[Arr]) -> Arr:
    """a with row c[i1, i2 % c.ne1, i3 % c.ne2] of batch (i2, i3) replaced by b's row (i1, i2, i3)."""
    dst = np.array(xs[0], copy=True)
    b, c = f32(xs[1]), np.asarray(xs[2])
    c_t = t.operand(2)
    i3, i2, i1 = np.ogrid[: b.shape[0], : b.shape[1], : b.shape[2]]
    rows = c[0][i3 % c_t.ne[2], i2 % c_t.ne[1], i1].astype(np.int64)
    with np.errstate(all="ignore"):  # a quantized row holds ggml's from_float of b's, read back as f32
        new = round_to(t.dtype, b) if t.dtype in NUMPY_DTYPE else quantized_write(NUMPY, b, t.dtype, b.shape)
    dst[np.broadcast_to(i3, rows.shape), np.broadcast_to(i2, rows.shape), rows] = new
    return dst


@reference(Op.SET, Op.ACC)
def set_(t: Tensor, xs: list[Arr]) -> Arr:
    idx = geometry.set_index(t)
    flat = np.array(xs[0], copy=True).reshape(-1)
    b = np.asarray(xs[1]).reshape(-1)
    flat[idx] = flat[idx] + b if t.op == Op.ACC else b
    return flat.reshape(tuple(reversed(t.ne)))


@reference(Op.GET_ROWS_BACK)
def get_rows_back(t: Tensor, xs: list[Arr]) -> Arr:
    out = np.zeros((t.ne[1], t.ne[0]), dtype=np.float64)
    ids = np.asarray(xs[1]).reshape(-1)
    np.add.at(out, ids, f32(xs[0])[0, 0, : ids.size].astype(np.float64))  # row i of a goes to row ids[i]
    return out.astype(np.float32)


# ---------------------------------------------------------------------------- reductions
@reference(Op.ARGMAX)
def argmax(t: Tensor, xs: list[Arr]) -> Arr:
    x = f32(xs[0][0, 0])  # [rows, ne0]; ties: ggml keeps the last maximum
    return np.asarray(x.shape[-1] - 1 - np.argmax(x[:, ::-1], axis=-1), dtype=np.int32)


# ---------------------------------------------------------------------------- attention
@reference(Op.FLASH_ATTN_EXT)
def flash_attn_ext(t: Tensor, xs: list[Arr]) -> Arr:
    q_t, k_t = t.operand(0), t.operand(1)
    q, k, v = f32(xs[0]), f32(xs[1]), f32(xs[2])
    if k_t.dtype in ("f16", "bf16"):
        q = NUMPY.rounded(q, k_t.dtype)  # ggml converts Q to K's vec_dot type
    k, v = NUMPY.expand_batch(k, k_t.ne, q_t.ne), NUMPY.expand_batch(v, t.operand(2).ne, q_t.ne)
    s = attention_scores(NUMPY, t, xs, NUMPY.matmul(q, k, tb=True))
    sinks = f32(xs[4]).reshape(-1) if len(xs) > 4 and xs[4] is not None else None
    p = NUMPY.softmax(s, sinks)
    row_max = s.max(axis=-1, keepdims=True)
    if sinks is not None:
        row_max = np.maximum(row_max, sinks.reshape(1, -1, 1, 1))
    p = np.where(row_max > -np.inf, p, np.float32(0.0))  # ggml: all -inf row → S = 0 → output 0
    return np.transpose(NUMPY.matmul(p, v), (0, 2, 1, 3))  # [B, H, n_q, Dv] → ne [Dv, H, n_q, B]


# ---------------------------------------------------------------------------- conv-like
@reference(Op.COL2IM_1D)
def col2im_1d(t: Tensor, xs: list[Arr]) -> Arr:
    t_in, oc, k, idx = geometry.col2im_1d(t)
    cols = f32(xs[0]).reshape(t_in, oc, k).transpose(1, 0, 2).reshape(oc, t_in * k)
    out = np.zeros((oc, t.ne[0] + 1), np.float32)  # f32 accumulation, as ggml's CPU
    np.add.at(out, (np.arange(oc)[:, None], idx), cols)
    return out[:, : t.ne[0]]


# ---------------------------------------------------------------------------- not registered upstream
@reference(Op.SOLVE_TRI)
def solve_tri(t: Tensor, xs: list[Arr]) -> Arr:
    """Forward/back substitution per batch matrix: A·x = B (A lower or upper, optionally unit)."""
    a, b = f32(xs[0]).astype(np.float64), f32(xs[1]).astype(np.float64)
    p = t.params
    n = a.shape[-1]
    if p["uni"]:
        a = a.copy()
        a[..., np.arange(n), np.arange(n)] = 1.0
    x = np.zeros_like(b)
    rows = range(n) if p["lower"] else range(n - 1, -1, -1)
    for i in rows:
        done = slice(0, i) if p["lower"] else slice(i + 1, n)
        acc = np.einsum("...k,...km->...m", a[..., i, done], x[..., done, :])
        x[..., i, :] = (b[..., i, :] - acc) / a[..., i, i][..., None]
    return x.astype(np.float32)
