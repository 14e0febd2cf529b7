"""numpy references of ggml's op semantics (the ggml CPU backend is the oracle).

Values are 4-D arrays in numpy order ``[ne3, ne2, ne1, ne0]``; f16 values are ``np.float16``,
bf16 values are float32 arrays holding bf16-rounded numbers. Each reference computes in f32
as ggml's CPU backend does and the evaluator rounds the result to the node's type.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ovkit.graph import NUMPY_DTYPE, SHAPE_ONLY_SRCS, VIEW_OPS, GraphError, Tensor, ggml_index_map, round_to

if TYPE_CHECKING:
    from ovkit.graph import Graph

Arr = np.ndarray
ReferenceFn = Callable[[Tensor, list[Any]], Arr]
REFERENCES: dict[str, ReferenceFn] = {}


def reference(*keys: str) -> Callable[[ReferenceFn], ReferenceFn]:
    """Register ``fn`` as the numpy reference of the op-table ``keys``."""

    def deco(fn: ReferenceFn) -> ReferenceFn:
        for k in keys:
            REFERENCES[k] = fn
        return fn

    return deco


def f32(x: Arr) -> Arr:
    return np.asarray(x, dtype=np.float32)


def rounded(x: Arr, dtype: str) -> Arr:
    """``x`` stored as ``dtype`` and read back as f32."""
    if dtype == "f32":
        return f32(x)
    return f32(round_to(dtype, x))


def ax(dim: int) -> int:
    return 3 - dim


def leaf_value(t: Tensor) -> Arr:
    if hasattr(t.value, "dequantize") and not isinstance(t.value, np.ndarray):
        return f32(t.value.dequantize()).reshape(tuple(reversed(t.ne)))
    return np.asarray(t.value).reshape(tuple(reversed(t.ne)))


def view_value(t: Tensor, base: Arr) -> Arr:
    """ggml's view semantics: element (i0..i3) is base memory[offs + Σ i·nb] (in elements)."""
    return base.reshape(-1)[ggml_index_map(t)]


def evaluate(graph: Graph, outputs: Sequence[Tensor], feed: dict[str, Arr]) -> list[Arr]:
    """Run ``outputs`` with the numpy references; arrays in each output's numpy shape and dtype."""
    values: dict[int, Arr] = {}
    for t in graph._value_nodes(outputs):
        if t.is_leaf:
            values[t.id] = feed[t.name].reshape(tuple(reversed(t.ne))) if t.is_input else leaf_value(t)
            continue
        if t.op in VIEW_OPS:
            values[t.id] = view_value(t, values[t.base.id])
            continue
        fn = REFERENCES.get(t.op_key)
        if fn is None:
            raise GraphError(f"{t.describe()}: no numpy reference for {t.op_key}")
        skip = SHAPE_ONLY_SRCS.get(t.op, frozenset())
        xs = [values[s.id] if s is not None and i not in skip else None for i, s in enumerate(t.srcs)]
        out = np.asarray(fn(t, xs))
        values[t.id] = round_to(t.dtype, out).reshape(tuple(reversed(t.ne)))
    return [values[o.id].reshape(o.shape).astype(NUMPY_DTYPE[o.dtype], copy=False) for o in outputs]


def repeat_to(x: Arr, big: Sequence[int]) -> Arr:
    """ggml repeat: tile 4-D ``x`` to the ne ``big``."""
    reps = [big[3 - i] // x.shape[i] for i in range(4)]
    return np.tile(x, reps) if any(r != 1 for r in reps) else x


# ---------------------------------------------------------------------------- elementwise
def _binary(fn: Callable[[Arr, Arr], Arr]) -> ReferenceFn:
    def ref(t: Tensor, xs: list[Arr]) -> Arr:
        return fn(f32(xs[0]), repeat_to(f32(xs[1]), t.ne))

    return ref


reference("ADD")(_binary(np.add))
reference("SUB")(_binary(np.subtract))
reference("MUL")(_binary(np.multiply))
reference("DIV")(_binary(np.divide))


@reference("ADD1")
def add1(t: Tensor, xs: list[Arr]) -> Arr:
    return f32(xs[0]) + f32(xs[1]).reshape(1, 1, 1, 1)


@reference("ADD_ID")
def add_id(t: Tensor, xs: list[Arr]) -> Arr:
    a, b, ids = f32(xs[0]), f32(xs[1]), xs[2]
    # a [1, n_tok, n_used, ne0]; b [.., .., n_expert, ne0]; ids [1, 1, n_tok, n_used]
    bias = b.reshape(-1, b.shape[-1])
    return a + bias[ids.reshape(ids.shape[-2], ids.shape[-1])][None]


@reference("SCALE")
def scale(t: Tensor, xs: list[Arr]) -> Arr:
    return f32(xs[0]) * np.float32(t.params["s"]) + np.float32(t.params["b"])


@reference("SQR")
def sqr(t: Tensor, xs: list[Arr]) -> Arr:
    x = f32(xs[0])
    return x * x


@reference("SQRT")
def sqrt(t: Tensor, xs: list[Arr]) -> Arr:
    with np.errstate(invalid="ignore"):
        return np.sqrt(f32(xs[0]))


@reference("CLAMP")
def clamp(t: Tensor, xs: list[Arr]) -> Arr:
    return np.minimum(np.maximum(f32(xs[0]), np.float32(t.params["min"])), np.float32(t.params["max"]))


@reference("FILL")
def fill(t: Tensor, xs: list[Arr]) -> Arr:
    return np.full(tuple(reversed(t.ne)), t.params["c"], dtype=np.float32)


def gelu_tanh(x: Arr) -> Arr:
    x = f32(x)
    c = np.float32(math.sqrt(2.0 / math.pi))
    return (
        np.float32(0.5)
        * x
        * (np.float32(1.0) + np.tanh(c * x * (np.float32(1.0) + np.float32(0.044715) * x * x)))
    )


def ggml_gelu(x: Arr) -> Arr:
    """ggml's CPU GELU: the f16 lookup table (GGML_GELU_FP16) indexed by f16(x); ±10 cut-offs."""
    x = f32(x)
    table = rounded(gelu_tanh(rounded(x, "f16")), "f16")
    return np.where(x <= -10.0, np.float32(0.0), np.where(x >= 10.0, x, table))


def sigmoid(x: Arr) -> Arr:
    with np.errstate(over="ignore"):
        return np.float32(1.0) / (np.float32(1.0) + np.exp(-f32(x)))


def silu(x: Arr) -> Arr:
    return f32(x) * sigmoid(x)


def softplus(x: Arr) -> Arr:
    x = f32(x)
    with np.errstate(over="ignore"):
        return np.where(x > 20.0, x, np.log1p(np.exp(np.minimum(x, 20.0))).astype(np.float32))


def _exp(x: Arr) -> Arr:
    with np.errstate(over="ignore"):
        return np.exp(f32(x))


UNARY_FNS: dict[str, Callable[[Arr], Arr]] = {
    "GELU": ggml_gelu,
    "SIGMOID": sigmoid,
    "SILU": silu,
    "SOFTPLUS": softplus,
    "TANH": lambda x: np.tanh(f32(x)),
    "EXP": _exp,
    "NEG": lambda x: -f32(x),
}


def _unary_reference(fn: Callable[[Arr], Arr]) -> ReferenceFn:
    return lambda t, xs: fn(xs[0])


for _name, _fn in UNARY_FNS.items():
    reference(f"UNARY.{_name}")(_unary_reference(_fn))


def glu_halves(t: Tensor, xs: list[Arr]) -> tuple[Arr, Arr]:
    a = f32(xs[0])
    if xs[1] is not None:
        return a, f32(xs[1])
    nc = t.ne[0]
    first, second = a[..., :nc], a[..., nc : 2 * nc]
    return (second, first) if t.params.get("swapped") else (first, second)


@reference("GLU.SWIGLU")
def swiglu(t: Tensor, xs: list[Arr]) -> Arr:
    x0, x1 = glu_halves(t, xs)
    return silu(x0) * x1


@reference("GLU.GEGLU")
def geglu(t: Tensor, xs: list[Arr]) -> Arr:
    x0, x1 = glu_halves(t, xs)
    return ggml_gelu(x0) * x1


@reference("GLU.SWIGLU_OAI")
def swiglu_oai(t: Tensor, xs: list[Arr]) -> Arr:
    x0, x1 = glu_halves(t, xs)
    alpha, limit = np.float32(t.params["alpha"]), np.float32(t.params["limit"])
    x = np.minimum(x0, limit)
    y = np.clip(x1, -limit, limit)
    with np.errstate(over="ignore"):
        glu = x / (np.float32(1.0) + np.exp(-alpha * x))
    return glu * (y + np.float32(1.0))


# ---------------------------------------------------------------------------- layout
@reference("CONT")
def cont(t: Tensor, xs: list[Arr]) -> Arr:
    return np.asarray(xs[0]).reshape(tuple(reversed(t.ne)))


@reference("CPY")
def cpy(t: Tensor, xs: list[Arr]) -> Arr:
    x = np.asarray(xs[0])
    if t.dtype in ("i32", "i64") and x.dtype.kind == "f":
        x = np.trunc(f32(x)).astype(NUMPY_DTYPE[t.dtype])
    return x.reshape(tuple(reversed(t.ne)))


# ---------------------------------------------------------------------------- matmul
def expand_batch(x: Arr, ne_big2: int, ne_big3: int) -> Arr:
    """Repeat-interleave dims 2, 3 (numpy axes 1, 0) up to the given sizes (i02 = i12 / r2)."""
    r3 = ne_big3 // x.shape[0]
    r2 = ne_big2 // x.shape[1]
    return np.repeat(np.repeat(x, r3, axis=0), r2, axis=1)


@reference("MUL_MAT")
def mul_mat(t: Tensor, xs: list[Arr]) -> Arr:
    a_t, b_t = t.srcs[0], t.srcs[1]
    assert a_t is not None and b_t is not None
    a = f32(xs[0])
    b = f32(xs[1])
    if a_t.dtype in ("f16", "bf16") and b_t.dtype != a_t.dtype:
        b = rounded(b, a_t.dtype)
    a = expand_batch(a, b_t.ne[2], b_t.ne[3])
    return np.matmul(b.astype(np.float64), np.swapaxes(a, -1, -2).astype(np.float64)).astype(np.float32)
