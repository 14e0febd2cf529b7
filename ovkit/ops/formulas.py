"""The ops written once: every unary, GLU and element-wise formula, the row norms and sums, the
ops made of gathers, reductions, matmuls, convolutions and sorts (windows, rope, MoE, the delta
net, softmax) and quantized writes, over an array namespace (:class:`ArrayOps`) that the numpy
reference fills with f32 numpy arrays and the OpenVINO translation with opset16 nodes.  What differs
per backend (OpenVINO's Exp saturating early, numpy's sums in f64, how a smaller operand is
repeated) lives in its namespace, never in a formula; the formulas follow ggml's CPU kernels.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any, Literal, Protocol, TypeVar

import numpy as np

from ovkit.dtypes import FLOAT_TYPES
from ovkit.ir import Op, RopeType, Tensor
from ovkit.ops import geometry
from ovkit.quant.round_trip import round_trip_spec

V = TypeVar("V")
Fn = TypeVar("Fn")
Num = float | int
#: The one-operand primitives every namespace provides (:meth:`ArrayOps.unary`).
Prim = Literal[
    "neg", "abs", "sign", "floor", "ceil", "trunc", "round_away", "round_even", "sqrt", "exp", "expm1",
    "log", "sin", "cos", "tanh", "sigmoid", "erf",
]  # fmt: skip


class ArrayOps(Protocol[V]):
    """The operations the formulas use (f32 values; a Python number stands for a constant)."""

    def f32(self, x: V) -> V: ...
    def add(self, a: V | Num, b: V | Num) -> V: ...
    def sub(self, a: V | Num, b: V | Num) -> V: ...
    def mul(self, a: V | Num, b: V | Num) -> V: ...
    def div(self, a: V | Num, b: V | Num) -> V: ...
    def maximum(self, a: V | Num, b: V | Num) -> V: ...
    def minimum(self, a: V | Num, b: V | Num) -> V: ...
    def gt(self, a: V, b: Num) -> V: ...
    def ge(self, a: V, b: Num) -> V: ...
    def le(self, a: V, b: Num) -> V: ...
    def ne(self, a: V, b: Num) -> V: ...
    def mul_rn(self, a: V | Num, b: V | Num) -> V:
        """``a·b`` rounded to f32 before whatever adds it (never fused into an FMA)."""
        ...

    def div_rn(self, a: V | Num, b: V | Num) -> V:
        """``a / b`` correctly rounded, as C's division (OpenVINO: last axis of size 1)."""
        ...

    def first_largest(self, x: V) -> V:
        """Per row (last axis): the first value of largest magnitude, kept as a dim of 1."""
        ...

    def where(self, cond: V, a: V | Num, b: V | Num) -> V: ...
    def unary(self, name: Prim, x: V) -> V:
        """The primitive ``name`` applied to ``x`` (``round_away``: C's roundf)."""
        ...

    def rounded(self, x: V, dtype: str) -> V:
        """``x`` stored as ``dtype`` (f16, bf16) and read back as f32."""
        ...

    def repeat(self, x: V, small: Sequence[int], big: Sequence[int]) -> V:
        """ggml's binary-op repeat of ``x`` (ne ``small``) to the ne ``big``."""
        ...

    def head(self, x: V, start: int, stop: int) -> V:
        """Elements ``start:stop`` of dim 0 (the innermost)."""
        ...

    def truncated(self, x: V, dtype: str) -> V:
        """``x`` truncated toward zero into the integer type ``dtype`` (a C cast)."""
        ...

    def full(self, ne: Sequence[int], value: float) -> V: ...
    def const(self, value: np.ndarray) -> V: ...
    def mean_rows(self, x: V) -> V: ...
    def reduce(self, kind: Literal["sum", "max", "min"], x: V, axes: Sequence[int]) -> V:
        """Sums (numpy: in f64), maxima or minima over ``axes``, kept as dims of 1."""
        ...

    def reshape(self, x: V, shape: Sequence[int]) -> V: ...
    def transpose(self, x: V, order: Sequence[int]) -> V: ...
    def concat(self, xs: Sequence[V], axis: int) -> V: ...
    def take(self, x: V, idx: V | np.ndarray, axis: int) -> V:
        """The elements at indices ``idx`` (constant or a value) along ``axis``, as numpy.take."""
        ...

    def matmul(self, a: V, b: V, ta: bool = False, tb: bool = False) -> V:
        """``a @ b`` over the last two axes (transposed when ``ta``/``tb``; numpy: in f64)."""
        ...

    def pad(self, x: V, begin: Sequence[int], end: Sequence[int], mode: str) -> V:
        """``x`` padded per axis (``mode`` "constant": zeros, or "reflect")."""
        ...

    def expand_batch(self, x: V, small: Sequence[int], big: Sequence[int]) -> V:
        """Dims 2, 3 of ``x`` (ne ``small``) repeat-interleaved to ``big`` (mul_mat's i02 = i12 / r2)."""
        ...

    def conv(self, x: V, w: V, geom: geometry.ConvGeometry, depthwise: bool) -> V:
        """``x`` [N, C, *sizes] convolved with ``w`` [OC, C, *ks] (depthwise: [C, 1, *ks]) as ggml's
        direct convolutions, zeros outside the input: [N, OC, *out]."""
        ...

    def sorted_indices(self, x: V, k: int, largest: bool) -> V:
        """i32 indices of the ``k`` smallest (or largest) values along dim 0, sorted."""
        ...

    def softmax(self, w: V, sinks: V | None) -> V:
        """Softmax along dim 0; per-head (dim 2) ``sinks`` join the denominator; ggml's NaN rows."""
        ...

    def conv_transpose(self, x: V, w: V, stride: int) -> V:
        """``x`` [N, IC, H, W] transposed-convolved with ``w`` [IC, OC, KH, KW], no padding."""
        ...


#: ``formula(ns, node, source values) -> value``: one op's computation on either backend.
Formula = Callable[[Any, Tensor, list[Any]], Any]
#: The ops written once here, by op-table key; the interpreters register each for themselves.
FORMULAS: dict[Op, Formula] = {}


def register_in(table: dict[Op, Fn], *keys: Op) -> Callable[[Fn], Fn]:
    """A decorator storing its function in ``table`` under each of the op-table ``keys``."""

    def deco(fn: Fn) -> Fn:
        table.update(dict.fromkeys(keys, fn))
        return fn

    return deco


#: ``@formula(Op.X, ...)`` registers the formula of those op-table keys.
formula = functools.partial(register_in, FORMULAS)


# ---------------------------------------------------------------------------- activations
def gelu_tanh(n: ArrayOps[V], x: V) -> V:
    """0.5·x·(1 + tanh(√(2/π)·x·(1 + 0.044715·x·x))), in ggml's order."""
    inner = n.mul(n.mul(math.sqrt(2.0 / math.pi), x), n.add(1.0, n.mul(n.mul(0.044715, x), x)))
    return n.mul(n.mul(0.5, x), n.add(1.0, n.unary("tanh", inner)))


def gelu(n: ArrayOps[V], x: V) -> V:
    """ggml's CPU GELU: the f16 table (GGML_GELU_FP16) of tanh-GELU indexed by f16(x); x ≤ -10
    gives 0 and x ≥ 10 gives x."""
    table = n.rounded(gelu_tanh(n, n.rounded(x, "f16")), "f16")
    return n.where(n.le(x, -10.0), 0.0, n.where(n.ge(x, 10.0), x, table))


def gelu_quick(n: ArrayOps[V], x: V) -> V:
    """ggml's CPU GELU_QUICK: the f16 table (GGML_GELU_QUICK_FP16) of x·σ(1.702·x) at f16(x)."""
    xh = n.rounded(x, "f16")
    return n.rounded(n.mul(xh, n.unary("sigmoid", n.mul(xh, 1.702))), "f16")


def gelu_erf(n: ArrayOps[V], x: V) -> V:
    """0.5·x·(1 + erf(x/√2))."""
    return n.mul(n.mul(0.5, x), n.add(1.0, n.unary("erf", n.mul(x, 1.0 / math.sqrt(2.0)))))


def silu(n: ArrayOps[V], x: V) -> V:
    return n.mul(x, n.unary("sigmoid", x))


def hardsigmoid(n: ArrayOps[V], x: V) -> V:
    return n.minimum(1.0, n.maximum(0.0, n.div(n.add(x, 3.0), 6.0)))


def _prim(name: Prim) -> Callable[[ArrayOps[Any], Any], Any]:
    return lambda n, x: n.unary(name, x)


#: The unary sub-ops (and the element-wise ops SIN, COS, LOG) as functions of one f32 value.
ACTIVATIONS: dict[Op, Callable[[ArrayOps[Any], Any], Any]] = {
    Op.GELU: gelu,
    Op.SIGMOID: _prim("sigmoid"),
    Op.SILU: silu,
    Op.SOFTPLUS: lambda n, x: n.where(
        n.gt(x, 20.0), x, n.unary("log", n.add(1.0, n.unary("exp", n.minimum(x, 20.0))))
    ),
    Op.TANH: _prim("tanh"),
    Op.EXP: _prim("exp"),
    Op.NEG: _prim("neg"),
    Op.ABS: _prim("abs"),
    Op.SGN: _prim("sign"),
    Op.STEP: lambda n, x: n.where(n.gt(x, 0.0), 1.0, 0.0),
    Op.ELU: lambda n, x: n.where(n.gt(x, 0.0), x, n.unary("expm1", n.minimum(x, 0.0))),
    Op.RELU: lambda n, x: n.maximum(x, 0.0),
    Op.GELU_QUICK: gelu_quick,
    Op.GELU_ERF: gelu_erf,
    Op.HARDSWISH: lambda n, x: n.mul(x, hardsigmoid(n, x)),
    Op.HARDSIGMOID: hardsigmoid,
    Op.EXPM1: lambda n, x: n.sub(n.unary("exp", x), 1.0),  # ggml's op_expm1: expf(x) - 1
    Op.FLOOR: _prim("floor"),
    Op.CEIL: _prim("ceil"),
    Op.ROUND: _prim("round_away"),  # C roundf: halves away from zero
    Op.TRUNC: _prim("trunc"),
    Op.SIN: _prim("sin"),
    Op.COS: _prim("cos"),
    Op.LOG: _prim("log"),
}


def _activation(act: Callable[[ArrayOps[Any], Any], Any]) -> Formula:
    return lambda n, t, xs: act(n, n.f32(xs[0]))


for _op, _act in ACTIVATIONS.items():
    formula(_op)(_activation(_act))


@formula(Op.XIELU)
def xielu(n: ArrayOps[V], t: Tensor, xs: list[V]) -> V:
    x = n.f32(xs[0])
    an, ap, beta, eps = (float(t.params[k]) for k in ("alpha_n", "alpha_p", "beta", "eps"))
    bx = n.mul(beta, x)
    pos = n.add(n.mul(n.mul(ap, x), x), bx)
    neg = n.add(n.mul(n.sub(n.unary("expm1", n.minimum(x, eps)), x), an), bx)
    return n.where(n.gt(x, 0.0), pos, neg)


@formula(Op.LEAKY_RELU)
def leaky_relu(n: ArrayOps[V], t: Tensor, xs: list[V]) -> V:
    x = n.f32(xs[0])
    return n.where(n.gt(x, 0.0), x, n.mul(float(t.params["negative_slope"]), x))


# ---------------------------------------------------------------------------- GLU
def glu_halves(n: ArrayOps[V], t: Tensor, xs: list[V]) -> tuple[V, V]:
    """(x0, x1): the two operands of a split GLU, or the two halves of each row of a (exchanged
    when ``swapped``)."""
    a = n.f32(xs[0])
    if xs[1] is not None:
        return a, n.f32(xs[1])
    nc = t.ne[0]
    first, second = n.head(a, 0, nc), n.head(a, nc, 2 * nc)
    return (second, first) if t.params.get("swapped") else (first, second)


#: The GLU sub-ops of the form ``activation(x0) · x1``, by their activation.
GLU_ACTIVATIONS: dict[Op, Callable[[ArrayOps[Any], Any], Any]] = {
    Op.SWIGLU: silu,
    Op.GEGLU: gelu,
    Op.GEGLU_ERF: gelu_erf,
    Op.GEGLU_QUICK: gelu_quick,
}


def _glu(act: Callable[[ArrayOps[Any], Any], Any]) -> Formula:
    def run(n: ArrayOps[Any], t: Tensor, xs: list[Any]) -> Any:
        x0, x1 = glu_halves(n, t, xs)
        return n.mul(act(n, x0), x1)

    return run


for _op, _act in GLU_ACTIVATIONS.items():
    formula(_op)(_glu(_act))


@formula(Op.REGLU)
def reglu(n: ArrayOps[V], t: Tensor, xs: list[V]) -> V:
    x0, x1 = glu_halves(n, t, xs)
    return n.where(n.gt(x0, 0.0), n.mul(x0, x1), 0.0)


@formula(Op.SWIGLU_OAI)
def swiglu_oai(n: ArrayOps[V], t: Tensor, xs: list[V]) -> V:
    x0, x1 = glu_halves(n, t, xs)
    alpha, limit = float(t.params["alpha"]), float(t.params["limit"])
    x = n.minimum(x0, limit)
    y = n.minimum(n.maximum(x1, -limit), limit)
    glu = n.div(x, n.add(1.0, n.unary("exp", n.mul(-alpha, x))))
    return n.mul(glu, n.add(y, 1.0))


# ---------------------------------------------------------------------------- element-wise ops
def _binary(name: str) -> Formula:
    def run(n: ArrayOps[Any], t: Tensor, xs: list[Any]) -> Any:
        a, b = t.operand(0), t.operand(1)
        fn: Callable[[Any, Any], Any] = getattr(n, name)
        return fn(n.f32(xs[0]), n.repeat(n.f32(xs[1]), b.ne, a.ne))

    return run


for _op, _name in ((Op.ADD, "add"), (Op.SUB, "sub"), (Op.MUL, "mul"), (Op.DIV, "div")):
    formula(_op)(_binary(_name))


@formula(Op.ADD1)
def add1(n: ArrayOps[V], t: Tensor, xs: list[V]) -> V:
    return n.add(n.f32(xs[0]), n.f32(xs[1]))  # b has one element: broadcast


@formula(Op.SCALE)
def scale(n: ArrayOps[V], t: Tensor, xs: list[V]) -> V:
    y = n.mul(n.f32(xs[0]), float(t.params["s"]))
    return n.add(y, float(t.params["b"])) if t.params["b"] != 0.0 else y


@formula(Op.SQR)
def sqr(n: ArrayOps[V], t: Tensor, xs: list[V]) -> V:
    x = n.f32(xs[0])
    return n.mul(x, x)


@formula(Op.SQRT)
def sqrt(n: ArrayOps[V], t: Tensor, xs: list[V]) -> V:
    return n.unary("sqrt", n.f32(xs[0]))


@formula(Op.CLAMP)
def clamp(n: ArrayOps[V], t: Tensor, xs: list[V]) -> V:
    return n.minimum(n.maximum(n.f32(xs[0]), float(t.params["min"])), float(t.params["max"]))


@formula(Op.FILL)
def fill(n: ArrayOps[V], t: Tensor, xs: list[V]) -> V:
    return n.full(t.ne, float(t.params["c"]))


@formula(Op.SILU_BACK)
def silu_back(n: ArrayOps[V], t: Tensor, xs: list[V]) -> V:
    dy, x = n.f32(xs[0]), n.f32(xs[1])
    s = n.unary("sigmoid", x)
    return n.mul(n.mul(dy, s), n.add(1.0, n.mul(x, n.sub(1.0, s))))


@formula(Op.ARANGE)
def arange(n: ArrayOps[V], t: Tensor, xs: list[V]) -> V:
    return n.const(geometry.arange_values(t))


@formula(Op.DIAG_MASK_INF)
def diag_mask_inf(n: ArrayOps[V], t: Tensor, xs: list[V]) -> V:
    return n.where(n.const(geometry.diag_mask(t)), -math.inf, n.f32(xs[0]))


@formula(Op.DIAG)
def diag(n: ArrayOps[V], t: Tensor, xs: list[V]) -> V:
    """Row vector [.., 1, n] → diagonal matrices [.., n, n] (zeros off the diagonal, as ggml)."""
    return n.where(n.const(np.eye(t.ne[0], dtype=bool)), n.f32(xs[0]), 0.0)


@formula(Op.TRI)
def tri(n: ArrayOps[V], t: Tensor, xs: list[V]) -> V:
    return n.where(n.const(geometry.tri_mask(t.params["type"], t.ne[0])), n.f32(xs[0]), 0.0)


# ---------------------------------------------------------------------------- row norms and sums
@formula(Op.SUM_ROWS)
def sum_rows(n: ArrayOps[V], t: Tensor, xs: list[V]) -> V:
    return n.reduce("sum", n.f32(xs[0]), [3])


@formula(Op.MEAN)
def mean(n: ArrayOps[V], t: Tensor, xs: list[V]) -> V:
    return n.div(n.reduce("sum", n.f32(xs[0]), [3]), float(t.operand(0).ne[0]))


@formula(Op.NORM)
def norm(n: ArrayOps[V], t: Tensor, xs: list[V]) -> V:
    x = n.f32(xs[0])
    c = n.sub(x, n.mean_rows(x))
    return n.mul(c, n.div(1.0, n.unary("sqrt", n.add(n.mean_rows(n.mul(c, c)), float(t.params["eps"])))))


@formula(Op.RMS_NORM)
def rms_norm(n: ArrayOps[V], t: Tensor, xs: list[V]) -> V:
    x = n.f32(xs[0])
    return n.mul(x, n.div(1.0, n.unary("sqrt", n.add(n.mean_rows(n.mul(x, x)), float(t.params["eps"])))))


@formula(Op.L2_NORM)
def l2_norm(n: ArrayOps[V], t: Tensor, xs: list[V]) -> V:
    x = n.f32(xs[0])
    return n.mul(
        x, n.div(1.0, n.maximum(n.unary("sqrt", n.reduce("sum", n.mul(x, x), [3])), float(t.params["eps"])))
    )


@formula(Op.SOFT_MAX_BACK)
def soft_max_back(n: ArrayOps[V], t: Tensor, xs: list[V]) -> V:
    dy, y = n.f32(xs[0]), n.f32(xs[1])
    return n.mul(n.mul(n.sub(dy, n.reduce("sum", n.mul(y, dy), [3])), y), float(t.params["scale"]))


@formula(Op.RMS_NORM_BACK)
def rms_norm_back(n: ArrayOps[V], t: Tensor, xs: list[V]) -> V:
    dz, x = n.f32(xs[0]), n.f32(xs[1])
    k, eps = float(t.ne[0]), float(t.params["eps"])
    sum_xx, sum_xdz = n.reduce("sum", n.mul(x, x), [3]), n.reduce("sum", n.mul(x, dz), [3])
    rrms = n.div(1.0, n.unary("sqrt", n.add(n.div(sum_xx, k), eps)))
    return n.mul(n.add(dz, n.mul(x, n.div(n.unary("neg", sum_xdz), n.add(sum_xx, eps * k)))), rrms)


# ---------------------------------------------------------------------------- layout, gathers, windows
def dims(ne: Sequence[int]) -> list[int]:
    """The 4-D value shape (numpy order) of ggml ``ne``."""
    return [int(d) for d in reversed(ne)]


@formula(Op.CONT, Op.DUP)
def cont(n: ArrayOps[V], t: Tensor, xs: list[V]) -> V:
    return n.reshape(xs[0], dims(t.ne))


@formula(Op.CONCAT)
def concat(n: ArrayOps[V], t: Tensor, xs: list[V]) -> V:
    return n.concat([xs[0], xs[1]], geometry.ax(t.params["dim"]))


@formula(Op.SUM)
def sum_all(n: ArrayOps[V], t: Tensor, xs: list[V]) -> V:
    return n.reduce("sum", n.reshape(n.f32(xs[0]), [1, 1, 1, -1]), [3])


@formula(Op.PAD)
def pad(n: ArrayOps[V], t: Tensor, xs: list[V]) -> V:
    p, x = t.params, n.f32(xs[0])
    if not p["circular"]:
        return n.pad(x, [p[f"lp{d}"] for d in (3, 2, 1, 0)], [p[f"rp{d}"] for d in (3, 2, 1, 0)], "constant")
    for d in range(4):
        x = n.take(x, geometry.wrap_index(t, d), geometry.ax(d))
    return x


@formula(Op.PAD_REFLECT_1D)
def pad_reflect_1d(n: ArrayOps[V], t: Tensor, xs: list[V]) -> V:
    return n.pad(n.f32(xs[0]), [0, 0, 0, t.params["p0"]], [0, 0, 0, t.params["p1"]], "reflect")


@formula(Op.ADD_ID)
def add_id(n: ArrayOps[V], t: Tensor, xs: list[V]) -> V:
    bias = n.reshape(n.f32(xs[1]), [-1, t.ne[0]])  # [n_expert, ne0]
    picked = n.take(bias, n.reshape(xs[2], [t.ne[2], t.ne[1]]), 0)  # [n_tokens, n_used, ne0]
    return n.add(n.f32(xs[0]), n.reshape(picked, [1, t.ne[2], t.ne[1], t.ne[0]]))


@formula(Op.REPEAT_BACK)
def repeat_back(n: ArrayOps[V], t: Tensor, xs: list[V]) -> V:
    x = n.reshape(n.f32(xs[0]), geometry.repeat_back_shape(t))
    return n.reshape(n.reduce("sum", x, [0, 2, 4, 6]), dims(t.ne))


@formula(Op.TIMESTEP_EMBEDDING)
def timestep_embedding(n: ArrayOps[V], t: Tensor, xs: list[V]) -> V:
    arg = n.mul(n.reshape(n.f32(xs[0]), [-1, 1]), n.const(geometry.timestep_freqs(t)[None, :]))
    parts = [n.unary("cos", arg), n.unary("sin", arg)]
    if t.ne[0] % 2:  # an odd dim ends in a zero column
        parts.append(n.const(np.zeros((t.ne[1], 1), np.float32)))
    return n.reshape(n.concat(parts, 1), dims(t.ne))


@formula(Op.OPT_STEP_SGD)
def opt_step_sgd(n: ArrayOps[V], t: Tensor, xs: list[V]) -> V:
    sgd = n.reshape(n.f32(xs[2]), [2])
    lr, wd = n.take(sgd, np.array(0), 0), n.take(sgd, np.array(1), 0)
    return n.sub(n.mul(n.f32(xs[0]), n.sub(1.0, n.mul(lr, wd))), n.mul(lr, n.f32(xs[1])))


@formula(Op.CROSS_ENTROPY_LOSS_BACK)
def cross_entropy_loss_back(n: ArrayOps[V], t: Tensor, xs: list[V]) -> V:
    logits = n.f32(xs[1])
    e = n.unary("exp", n.sub(logits, n.reduce("max", logits, [3])))
    scale = n.div(n.reshape(n.f32(xs[0]), [1]), float(math.prod(t.ne[1:])))
    return n.mul(n.sub(n.div(e, n.reduce("sum", e, [3])), n.f32(xs[2])), scale)


@formula(Op.ARGSORT)
def argsort(n: ArrayOps[V], t: Tensor, xs: list[V]) -> V:
    return n.sorted_indices(xs[0], t.ne[0], largest=t.params["order"] != 0)


@formula(Op.TOP_K)
def top_k(n: ArrayOps[V], t: Tensor, xs: list[V]) -> V:
    k = t.params["k"]
    idx = n.sorted_indices(xs[0], k, largest=True)
    return n.take(idx, geometry.top_k_order(k), 3) if k > 1 else idx


@formula(Op.IM2COL)
def im2col(n: ArrayOps[V], t: Tensor, xs: list[V]) -> V:
    b = t.operand(1)
    idx, k = geometry.im2col_geometry(t)
    lead = [b.ne[3], b.ne[2]] if k == 2 else [b.ne[2], b.ne[1]]
    planes = n.concat([n.reshape(n.f32(xs[1]), [*lead, -1]), n.const(np.zeros((*lead, 1), np.float32))], 2)
    cols = n.take(planes, idx, 2)  # [N, IC, *out, *ks], the zero slot outside the input
    return n.reshape(n.transpose(cols, [0, 2, 3, 1, 4, 5] if k == 2 else [0, 2, 1, 3]), dims(t.ne))


@formula(Op.IM2COL_3D)
def im2col_3d(n: ArrayOps[V], t: Tensor, xs: list[V]) -> V:
    flat = n.concat([n.reshape(n.f32(xs[1]), [-1]), n.const(np.zeros(1, np.float32))], 0)
    return n.take(flat, geometry.im2col_3d_index(t), 0)


@formula(Op.POOL_1D, Op.POOL_2D)
def pool(n: ArrayOps[V], t: Tensor, xs: list[V]) -> V:
    a = t.operand(0)
    idx, valid, k = geometry.pool_geometry(t)
    plane = a.ne[0] * (a.ne[1] if k == 2 else 1)
    is_max = t.params["op"] == 0
    fill = np.full((a.nelements // plane, 1), -np.finfo(np.float32).max if is_max else 0.0, np.float32)
    win = n.take(n.concat([n.reshape(n.f32(xs[0]), [-1, plane]), n.const(fill)], 1), idx, 1)
    axes = list(range(1 + k, 1 + 2 * k))  # [rows, *out, *ks]
    if is_max:
        return n.reshape(n.reduce("max", win, axes), dims(t.ne))
    # each tap weighted by 1/divisor before the sum: the CPU plugin miscomputes ReduceSum followed
    # by a Multiply/Divide with a per-output constant (it fuses it along the wrong axis)
    inv = np.float32(1.0) / geometry.pool_divisor(t, valid, k)
    weights = np.broadcast_to(inv.reshape(inv.shape + (1,) * k), valid.shape)
    return n.reshape(n.reduce("sum", n.mul(win, n.const(np.ascontiguousarray(weights))), axes), dims(t.ne))


@formula(Op.UPSCALE)
def upscale(n: ArrayOps[V], t: Tensor, xs: list[V]) -> V:
    a, mode = t.operand(0), t.params["mode"]
    x = n.f32(xs[0])
    for d in (3, 2):  # batch dims: nearest index
        if t.ne[d] != a.ne[d]:
            x = n.take(x, geometry.upscale_batch_index(t.ne[d], a.ne[d]), geometry.ax(d))
    w0 = n.const(geometry.upscale_weights(t.ne[0], a.ne[0], mode))  # [ne0, a.ne0]
    w1 = n.const(geometry.upscale_weights(t.ne[1], a.ne[1], mode))  # [ne1, a.ne1]
    return n.matmul(w1, n.matmul(x, w0, tb=True))


@formula(Op.SSM_CONV)
def ssm_conv(n: ArrayOps[V], t: Tensor, xs: list[V]) -> V:
    d_conv, d_inner = t.operand(1).ne[0], t.operand(1).ne[1]
    n_t, n_s = t.ne[1], t.ne[2]
    sx = n.reshape(n.f32(xs[0]), [n_s, d_inner, -1])
    win = n.take(sx, np.arange(n_t)[:, None] + np.arange(d_conv)[None, :], 2)  # [n_s, d_inner, n_t, d_conv]
    out = n.reduce("sum", n.mul(win, n.reshape(n.f32(xs[1]), [1, d_inner, 1, d_conv])), [3])
    return n.reshape(n.transpose(n.reshape(out, [n_s, d_inner, n_t]), [0, 2, 1]), dims(t.ne))


# ---------------------------------------------------------------------------- gated delta net
@formula(Op.GATED_DELTA_NET)
def gated_delta_net(n: ArrayOps[V], t: Tensor, xs: list[V]) -> V:
    """Per token: S ← exp(g)·S; δ = (v − Sᵀk)·β; S ← S + k⊗δ; o = (Sᵀq)/√S_v (value head h reads
    key head h % H_k), all heads and sequences at once. State memory: state[s, h, j, i] = S[i][j]."""
    q_t, g_t = t.operand(0), t.operand(3)
    s_v, h_v, n_tokens, n_seqs = t.operand(2).ne
    kk = t.params["K"]
    q, k, v, g, beta, state = (n.f32(x) for x in xs)
    heads = np.arange(h_v) % q_t.ne[1]
    q, k = n.take(q, heads, 2), n.take(k, heads, 2)
    st = n.transpose(state, [0, 1, 3, 2])  # [S, H, i, j] = S[i][j]
    outs, snaps = [], []
    for tok in range(n_tokens):

        def at(x: V, shape: list[int], tok: int = tok) -> V:
            return n.reshape(n.take(x, np.array([tok]), 1), [n_seqs, h_v, *shape])

        kt = at(k, [s_v, 1])
        st = n.mul(st, n.unary("exp", at(g, [g_t.ne[0], 1])))  # per key channel i, or scalar
        delta = n.mul(n.sub(at(v, [1, s_v]), n.reduce("sum", n.mul(st, kt), [2])), at(beta, [1, 1]))
        st = n.add(st, n.mul(kt, delta))
        o = n.reduce("sum", n.mul(st, at(q, [s_v, 1])), [2])  # Sᵀq: [S, H, 1, j]
        outs.append(n.reshape(n.mul(o, 1.0 / math.sqrt(s_v)), [n_seqs, 1, h_v, s_v]))
        if n_tokens - 1 - tok < kk:
            snaps.append(st)
    pieces = [n.reshape(n.concat(outs, 1), [-1])]
    for back in range(kk):  # the last K states, newest first (zeros before the first token)
        if back < len(snaps):
            pieces.append(n.reshape(n.transpose(snaps[-1 - back], [0, 1, 3, 2]), [-1]))
        else:
            pieces.append(n.const(np.zeros(n_seqs * h_v * s_v * s_v, np.float32)))
    return n.reshape(n.concat(pieces, 0), dims(t.ne))


# ---------------------------------------------------------------------------- rope
@formula(Op.ROPE, Op.ROPE_BACK)
def rope(n: ArrayOps[V], t: Tensor, xs: list[V]) -> V:
    """ggml's rotation of the first rotated pairs of each row (the rest copied), each pair as
    ``x·cos + swap(x)·(∓sin)`` over a pair axis ([.., 2, pairs] NeoX halves, [.., pairs, 2]
    adjacent pairs): ggml's products and sums without the strided slices and interleaving Concat
    the CPU plugin runs with its reference kernels (a 512-token rope 4x slower)."""
    p, x = t.params, n.f32(xs[0])
    ne3, ne2, ne1, ne0 = t.ne[3], t.ne[2], t.ne[1], t.ne[0]
    pairs = geometry.rope_pairs(p, ne0)
    if pairs == 0:  # n_dims 0: ggml rotates nothing and copies the row
        return x
    tables = geometry.rope_tables(p, p["n_dims"], pairs)
    pos = n.reshape(n.f32(xs[1]), [-1])
    if p["mode"] & RopeType.MROPE:  # [ne2, pairs]: each pair's position plane
        base = n.take(n.transpose(n.reshape(pos, [4, ne2]), [1, 0]), geometry.rope_sections(p, pairs), 1)
    else:
        base = n.reshape(pos, [ne2, 1])
    theta_ex = n.mul(base, n.const(tables["mult"].reshape(1, pairs)))
    if xs[2] is not None:  # freq factors
        factors = n.head(n.reshape(n.f32(xs[2]), [1, 1, 1, -1]), 0, pairs)
        theta_ex = n.div(theta_ex, n.reshape(factors, [1, pairs]))
    theta = n.mul(theta_ex, float(p["freq_scale"]))
    if p["ext_factor"] != 0.0:  # YaRN
        ramp = n.const(tables["ramp"].reshape(1, pairs))
        theta = n.add(n.mul(theta, n.sub(1.0, ramp)), n.mul(theta_ex, ramp))
    neox = bool(p["mode"] & (RopeType.NEOX | RopeType.MROPE))
    axis, grouped = (3, [ne3, ne2, ne1, 2, pairs]) if neox else (4, [ne3, ne2, ne1, pairs, 2])
    table = [1, ne2, 1, 1, pairs] if neox else [1, ne2, 1, pairs, 1]
    mscale = float(tables["mscale"])
    cos = n.reshape(n.mul(n.unary("cos", theta), mscale), table)
    sin = n.reshape(n.mul(n.unary("sin", theta), -mscale if t.op == Op.ROPE_BACK else mscale), table)
    sign = n.const(np.array([-1.0, 1.0], np.float32).reshape((2, 1) if neox else (2,)))
    end = 2 * pairs
    x5 = n.reshape(x if end == ne0 else n.head(x, 0, end), grouped)
    swapped = n.take(x5, np.array([1, 0]), axis)
    out = n.reshape(n.add(n.mul(x5, cos), n.mul(swapped, n.mul(sin, sign))), [ne3, ne2, ne1, end])
    return out if end == ne0 else n.concat([out, n.head(x, end, ne0)], 3)


@formula(Op.MUL_MAT)
def mul_mat(n: ArrayOps[V], t: Tensor, xs: list[V]) -> V:
    """b @ aᵀ, a repeat-interleaved over b's batch; an f16/bf16 a sees b rounded to its type."""
    a, b = t.operand(0), t.operand(1)
    xb = n.f32(xs[1])
    if a.dtype in ("f16", "bf16") and b.dtype != a.dtype:
        xb = n.rounded(xb, a.dtype)  # ggml converts src1 to src0's vec_dot type
    return n.matmul(xb, n.expand_batch(n.f32(xs[0]), a.ne, b.ne), tb=True)


@formula(Op.OUT_PROD)
def out_prod(n: ArrayOps[V], t: Tensor, xs: list[V]) -> V:
    a, b = t.operand(0), t.operand(1)
    return n.matmul(n.f32(xs[1]), n.expand_batch(n.f32(xs[0]), a.ne, b.ne), ta=True)  # bᵀ [p, k] @ a [k, m]


@formula(Op.CONV_2D, Op.CONV_2D_DW, Op.CONV_3D)
def conv(n: ArrayOps[V], t: Tensor, xs: list[V]) -> V:
    """ggml's direct convolutions; CONV_2D and CONV_3D with an f16 kernel read f16 input taps."""
    a, b = t.operand(0), t.operand(1)
    geom = geometry.conv_geometry(t, 3 if t.op == Op.CONV_3D else 2)
    x, w = n.f32(xs[1]), n.f32(xs[0])
    if t.op != Op.CONV_2D_DW and a.dtype == "f16":
        x = n.rounded(x, "f16")
    if t.op == Op.CONV_3D:
        c, batch, oc = t.params["c"], t.params["n"], t.params["oc"]
        x = n.reshape(x, [batch, c, b.ne[2], b.ne[1], b.ne[0]])
        w = n.reshape(w, [oc, c, a.ne[2], a.ne[1], a.ne[0]])
    return n.reshape(n.conv(x, w, geom, depthwise=t.op == Op.CONV_2D_DW), dims(t.ne))


@formula(Op.CONV_TRANSPOSE_1D, Op.CONV_TRANSPOSE_2D)
def conv_transpose(n: ArrayOps[V], t: Tensor, xs: list[V]) -> V:
    """ggml's transposed convolutions (1-D as 2-D of height 1); an f16 kernel reads the input as f16."""
    a, b = t.operand(0), t.operand(1)
    x, w = n.f32(xs[1]), n.f32(xs[0])
    if a.dtype == "f16":
        x = n.rounded(x, "f16")
    if t.op == Op.CONV_TRANSPOSE_1D:
        x = n.reshape(x, [1, b.ne[1], 1, b.ne[0]])
        w = n.reshape(w, [a.ne[2], a.ne[1], 1, a.ne[0]])
    stride = t.params["s0" if t.op == Op.CONV_TRANSPOSE_1D else "stride"]
    return n.reshape(n.conv_transpose(x, w, stride), dims(t.ne))


@formula(Op.MUL_MAT_ID)
def mul_mat_id(n: ArrayOps[V], t: Tensor, xs: list[V]) -> V:
    """out[:, e, t] = as[ids[e, t]] @ b[:, e % b.ne1, t]; f16/bf16 experts see b rounded to their type."""
    as_t, b_t = t.operand(0), t.operand(1)
    n_tok, n_used, k = t.ne[2], t.ne[1], as_t.ne[0]
    experts = n.reshape(n.f32(xs[0]), [as_t.ne[2], as_t.ne[1], k])
    picked = n.take(experts, n.reshape(xs[2], [n_tok, n_used]), 0)  # [T, U, N, K]
    xb = n.f32(xs[1])
    if as_t.dtype in ("f16", "bf16") and b_t.dtype != as_t.dtype:
        xb = n.rounded(xb, as_t.dtype)
    xb = n.reshape(xb, [n_tok, b_t.ne[1], k])
    if b_t.ne[1] != n_used:
        xb = n.take(xb, np.arange(n_used) % b_t.ne[1], 1)  # slot e reads b row e % b1
    out = n.matmul(n.reshape(xb, [n_tok, n_used, 1, k]), picked, tb=True)  # [T, U, 1, N]
    return n.reshape(out, [1, n_tok, n_used, t.ne[0]])


# ---------------------------------------------------------------------------- quantized writes
def quantized_write(n: ArrayOps[V], x: V, qtype: str, shape: Sequence[int]) -> V:
    """The values a ``qtype`` tensor reads back after ggml's CPU writes ``x`` into it (``from_float``
    then ``to_float`` per 32 values, C's roundings; ``quant.ROUND_TRIPS``), in ``shape``."""
    rt = round_trip_spec(qtype)
    b = n.reshape(n.f32(x), [-1, 32])

    def inverse(num: float, den: V) -> V:  # den != 0 ? num/den : 0
        return n.where(n.ne(den, 0.0), n.div_rn(num, den), 0.0)

    if rt.symmetric:  # d = (the first value of largest magnitude) / -offset, exact: 2^-k
        d = n.mul(n.first_largest(b), -1.0 / rt.offset)
        q = n.unary("floor", n.add(n.mul_rn(b, inverse(1.0, d)), rt.offset + 0.5))
        out = n.mul(n.sub(n.minimum(q, rt.levels), rt.offset), n.rounded(d, "f16"))
    elif rt.levels == 127:  # Q8_0 as ggml's AVX kernel: 127/amax, round half to even
        amax = n.reduce("max", n.unary("abs", b), [1])
        q = n.unary("round_even", n.mul(b, inverse(127.0, amax)))
        out = n.mul(q, n.rounded(n.div_rn(amax, 127.0), "f16"))
    else:  # d = (max - min) / levels, w = q·d + min
        lo, hi = n.reduce("min", b, [1]), n.reduce("max", b, [1])
        d = n.div_rn(n.sub(hi, lo), float(rt.levels))
        q = n.unary("floor", n.add(n.mul_rn(n.sub(b, lo), inverse(1.0, d)), 0.5))
        out = n.add(n.mul_rn(n.minimum(q, rt.levels), n.rounded(d, "f16")), n.rounded(lo, "f16"))
    return n.reshape(out, shape)


@formula(Op.CPY)
def cpy(n: ArrayOps[V], t: Tensor, xs: list[V]) -> V:
    """The source's values in the destination's shape and type: a quantized destination holds
    them as ggml writes them; a copy between one quantized type moves ggml's blocks."""
    src, x = t.operand(0), xs[0]
    if t.dtype in ("i32", "i64") and src.dtype in FLOAT_TYPES:
        x = n.truncated(x, t.dtype)
    if t.is_quantized and src.dtype != t.dtype:
        return quantized_write(n, x, t.dtype, dims(t.ne))
    return n.reshape(x, dims(t.ne))


# ---------------------------------------------------------------------------- softmax / attention
def attention_mask(n: ArrayOps[V], t: Tensor, i: int, xs: list[V], rows: int, big: Sequence[int]) -> V | None:
    """SOFT_MAX's or FLASH_ATTN_EXT's mask (source ``i``) as ggml adds it: rows 0..rows-1 in f32,
    tiled over dims 2, 3 to ``big`` (ggml's i % ne), times each head's ALiBi slope; None without one."""
    mask_t = t.srcs[i]
    if mask_t is None:
        return None
    m = n.f32(xs[i])
    if mask_t.ne[1] != rows:
        m = n.take(m, np.arange(rows), 2)
    m = n.repeat(m, (mask_t.ne[0], rows, *mask_t.ne[2:]), (mask_t.ne[0], rows, big[2], big[3]))
    if t.params["max_bias"] <= 0:
        return m
    return n.mul(m, n.const(geometry.alibi_slopes(big[2], t.params["max_bias"]).reshape(1, -1, 1, 1)))


@formula(Op.SOFT_MAX)
def soft_max(n: ArrayOps[V], t: Tensor, xs: list[V]) -> V:
    w = n.mul(n.f32(xs[0]), float(t.params["scale"]))
    mask = attention_mask(n, t, 1, xs, t.ne[1], t.ne)
    sinks = xs[2] if len(xs) > 2 else None
    return n.softmax(w if mask is None else n.add(w, mask), None if sinks is None else n.f32(sinks))


def attention_scores(n: ArrayOps[V], t: Tensor, xs: list[V], s: V) -> V:
    """FLASH_ATTN_EXT's scores from the raw Q·Kᵀ ``s`` [B, H, n_q, n_kv]: scale, softcap, mask (ALiBi)."""
    scale, softcap = np.float32(t.params["scale"]), np.float32(t.params["logit_softcap"])
    if softcap != 0:
        scale = scale / softcap  # in f32, as ggml
    s = n.mul(s, float(scale))
    if softcap != 0:
        s = n.mul(n.unary("tanh", s), float(softcap))
    mask = attention_mask(n, t, 3, xs, t.operand(0).ne[1], t.operand(0).ne)
    return s if mask is None else n.add(s, mask)
