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


# ---------------------------------------------------------------------------- layout II
@reference("CONCAT")
def concat(t: Tensor, xs: list[Arr]) -> Arr:
    return np.concatenate([np.asarray(xs[0]), np.asarray(xs[1])], axis=ax(t.params["dim"]))


@reference("REPEAT")
def repeat(t: Tensor, xs: list[Arr]) -> Arr:
    return repeat_to(np.asarray(xs[0]), t.ne)


@reference("PAD")
def pad(t: Tensor, xs: list[Arr]) -> Arr:
    p = t.params
    widths = [(p[f"lp{d}"], p[f"rp{d}"]) for d in (3, 2, 1, 0)]
    return np.pad(f32(xs[0]), widths)


# ---------------------------------------------------------------------------- rows
@reference("GET_ROWS")
def get_rows(t: Tensor, xs: list[Arr]) -> Arr:
    a, idx = np.asarray(xs[0]), np.asarray(xs[1])
    if a.dtype != np.int32:
        a = f32(a)
    out = np.empty((t.ne[3], t.ne[2], t.ne[1], t.ne[0]), dtype=a.dtype)
    for i12 in range(t.ne[3]):
        for i11 in range(t.ne[2]):
            out[i12, i11] = a[i12, i11, idx[0, i12, i11]]
    return out


@reference("SET_ROWS")
def set_rows(t: Tensor, xs: list[Arr]) -> Arr:
    dst = np.array(xs[0], copy=True)
    b, c = f32(xs[1]), np.asarray(xs[2])
    c_t = t.srcs[2]
    assert c_t is not None
    for i3 in range(b.shape[0]):
        for i2 in range(b.shape[1]):
            for i1 in range(b.shape[2]):
                row = int(c[0, i3 % c_t.ne[2], i2 % c_t.ne[1], i1])
                dst[i3, i2, row] = round_to(t.dtype, b[i3, i2, i1])
    return dst


@reference("SET")
def set_(t: Tensor, xs: list[Arr]) -> Arr:
    b_t = t.srcs[1]
    assert b_t is not None
    p = t.params
    es = t.type_size
    idx = np.full((1, 1, 1, 1), p["offset"] // es, dtype=np.int64)
    for d, nb in enumerate((es, p["nb1"], p["nb2"], p["nb3"])):
        shape = [1, 1, 1, 1]
        shape[3 - d] = b_t.ne[d]
        idx = idx + (np.arange(b_t.ne[d], dtype=np.int64) * (nb // es)).reshape(shape)
    flat = np.array(xs[0], copy=True).reshape(-1)
    flat[idx.reshape(-1)] = np.asarray(xs[1]).reshape(-1)
    return flat.reshape(tuple(reversed(t.ne)))


# ---------------------------------------------------------------------------- norms, reductions
@reference("NORM")
def norm(t: Tensor, xs: list[Arr]) -> Arr:
    x = f32(xs[0]).astype(np.float64)
    mean = x.mean(axis=-1, keepdims=True)
    c = (x - mean).astype(np.float32)
    var = (c.astype(np.float64) ** 2).mean(axis=-1, keepdims=True)
    return c * (np.float32(1.0) / np.sqrt(var.astype(np.float32) + np.float32(t.params["eps"])))


@reference("RMS_NORM")
def rms_norm(t: Tensor, xs: list[Arr]) -> Arr:
    x = f32(xs[0])
    ms = (x.astype(np.float64) ** 2).mean(axis=-1, keepdims=True).astype(np.float32)
    return x * (np.float32(1.0) / np.sqrt(ms + np.float32(t.params["eps"])))


@reference("L2_NORM")
def l2_norm(t: Tensor, xs: list[Arr]) -> Arr:
    x = f32(xs[0])
    s = np.sqrt((x.astype(np.float64) ** 2).sum(axis=-1, keepdims=True)).astype(np.float32)
    return x * (np.float32(1.0) / np.maximum(s, np.float32(t.params["eps"])))


@reference("SUM_ROWS")
def sum_rows(t: Tensor, xs: list[Arr]) -> Arr:
    return f32(xs[0]).astype(np.float64).sum(axis=-1, keepdims=True).astype(np.float32)


@reference("CUMSUM")
def cumsum(t: Tensor, xs: list[Arr]) -> Arr:
    return np.cumsum(f32(xs[0]), axis=-1, dtype=np.float32)


@reference("ARGSORT")
def argsort(t: Tensor, xs: list[Arr]) -> Arr:
    x = f32(xs[0])
    key = x if t.params["order"] == 0 else -x
    return np.argsort(key, axis=-1, kind="stable").astype(np.int32)


@reference("DIAG")
def diag(t: Tensor, xs: list[Arr]) -> Arr:
    n = t.ne[0]
    return np.asarray(xs[0]) * np.eye(n, dtype=np.float32)


#: ggml_tri_type → keep(col i0, row i1)
TRI_KEEP: dict[int, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    0: lambda c, r: c >= r,  # UPPER_DIAG
    1: lambda c, r: c > r,  # UPPER
    2: lambda c, r: c <= r,  # LOWER_DIAG
    3: lambda c, r: c < r,  # LOWER
}


def tri_mask(type_: int, n: int) -> np.ndarray:
    cols = np.arange(n)[None, :]
    rows = np.arange(n)[:, None]
    return TRI_KEEP[type_](cols, rows)


@reference("TRI")
def tri(t: Tensor, xs: list[Arr]) -> Arr:
    return np.where(tri_mask(t.params["type"], t.ne[0]), f32(xs[0]), np.float32(0.0))
