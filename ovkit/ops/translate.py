"""Graph node → ``openvino.opset16`` subgraph, one translator per op-table key.

Every value in the OpenVINO model is 4-D in numpy order ``[ne3, ne2, ne1, ne0]`` and has the
element type of its ggml tensor (bf16 inside the model; f32 at the Parameter/Result boundary).
Translators receive the node and its sources' values and may return any float type: the
builder converts the result to the node's type. Floating-point work is done in f32, as ggml's
CPU backend does, so the numbers follow ggml (not upstream's f16 shortcuts, see the op table).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import openvino as ov
import openvino.opset16 as ops

from ovkit.graph import GraphError, Tensor, ggml_index_map, round_to
from ovkit.ops.reference import tri_mask

if TYPE_CHECKING:
    from ovkit.graph import Graph

Out = Any  # an openvino Output/Node
TranslateFn = Callable[[Tensor, list[Any]], Any]

OV_TYPE: dict[str, Any] = {
    "f32": ov.Type.f32,
    "f16": ov.Type.f16,
    "bf16": ov.Type.bf16,
    "i32": ov.Type.i32,
    "i64": ov.Type.i64,
}
#: element type of the model's Parameters/Results per ggml type (bf16 crosses as f32).
BOUNDARY_TYPE: dict[str, Any] = {**OV_TYPE, "bf16": ov.Type.f32}

TRANSLATORS: dict[str, TranslateFn] = {}


def translator(*keys: str) -> Callable[[TranslateFn], TranslateFn]:
    """Register ``fn`` as the translator of the op-table ``keys``."""

    def deco(fn: TranslateFn) -> TranslateFn:
        for k in keys:
            TRANSLATORS[k] = fn
        return fn

    return deco


# ---------------------------------------------------------------------------- helpers
def const(value: Any, dtype: Any = np.float32) -> Out:
    return ops.constant(np.asarray(value, dtype=dtype))


def i64(values: Sequence[int] | int) -> Out:
    return ops.constant(np.asarray(values, dtype=np.int64))


def f32(x: Out) -> Out:
    """``x`` as f32 (ggml's CPU computes f16/bf16 ops in f32)."""
    out = x.output(0) if hasattr(x, "output") else x
    return x if out.get_element_type() == ov.Type.f32 else ops.convert(x, ov.Type.f32)


def to_type(x: Out, dtype: str) -> Out:
    """``x`` converted to the ggml type ``dtype`` (no-op when already that type)."""
    out = x.output(0) if hasattr(x, "output") else x
    target = OV_TYPE[dtype]
    if out.get_element_type() == target:
        return x
    if dtype in ("f16", "bf16") and out.get_element_type() == ov.Type.f32:
        x = rounded(x, dtype)  # survives the plugin folding Convert(f32→f16→f32) pairs away
    return ops.convert(x, target)


#: Veltkamp splitting constants 2^(24 - p) + 1 for p significant bits (f16: 11, bf16: 8).
_SPLIT = {"f16": 2.0**13 + 1.0, "bf16": 2.0**16 + 1.0}


def rounded(x: Out, dtype: str) -> Out:
    """``x`` (f32) rounded to ``dtype``'s precision, kept in f32 (ggml's intermediate f16 stores).

    A Convert pair would be folded away by the CPU plugin, so the rounding is arithmetic
    (Veltkamp splitting: round-to-nearest to the type's significant bits); f16 subnormals
    (|x| < 2^-14) round on the fixed 2^-24 grid.
    """
    if dtype == "f32":
        return x
    c = const(_SPLIT[dtype])
    t = ops.multiply(x, c)
    hi = ops.subtract(t, ops.subtract(t, x))
    if dtype != "f16":
        return hi
    sub = ops.divide(ops.round(ops.multiply(x, const(2.0**24)), "half_to_even"), const(2.0**24))
    return ops.select(ops.less(ops.abs(x), const(2.0**-14)), sub, hi)


def reshape4(x: Out, ne: Sequence[int]) -> Out:
    return ops.reshape(x, i64([int(ne[3]), int(ne[2]), int(ne[1]), int(ne[0])]), False)


def ax(dim: int) -> int:
    """OpenVINO axis of ggml dim ``dim`` in a 4-D value."""
    return 3 - dim


def slice_dim(x: Out, dim: int, start: int, stop: int, step: int = 1) -> Out:
    return ops.slice(x, i64([start]), i64([stop]), i64([step]), i64([ax(dim)]))


def tile_to(x: Out, small: Sequence[int], big: Sequence[int]) -> Out:
    """ggml repeat: tile ``x`` (ne ``small``) to ne ``big`` (each big[i] a multiple of small[i])."""
    reps = [big[3 - i] // small[3 - i] for i in range(4)]
    if all(r == 1 for r in reps):
        return x
    return ops.tile(x, i64(reps))


def broadcast_repeat(x: Out, small: Sequence[int], big: Sequence[int]) -> Out:
    """ggml binary-op broadcasting: numpy broadcast where small is 1, Tile where it divides."""
    if all(s == b or s == 1 for s, b in zip(small, big, strict=True)):
        return x
    return tile_to(x, small, big)


def expand_batch(x: Out, ne_small: Sequence[int], ne_big: Sequence[int]) -> Out:
    """Repeat-interleave dims 2, 3 of ``x`` up to ``ne_big`` (mul_mat's i02 = i12 / r2 mapping)."""
    r2 = ne_big[2] // ne_small[2]
    r3 = ne_big[3] // ne_small[3]
    if r2 == 1 and r3 == 1:
        return x
    n3, n2, n1, n0 = ne_small[3], ne_small[2], ne_small[1], ne_small[0]
    y = ops.reshape(x, i64([n3, 1, n2, 1, n1, n0]), False)
    y = ops.broadcast(y, i64([n3, r3, n2, r2, n1, n0]))
    return ops.reshape(y, i64([n3 * r3, n2 * r2, n1, n0]), False)


# ---------------------------------------------------------------------------- model building
def leaf_value(t: Tensor) -> Out:
    """A Constant leaf as an OpenVINO node (4-D)."""
    if t.is_quantized or hasattr(t.value, "to_ov_node"):
        node = t.value.to_ov_node()
        return reshape4(f32(node), t.ne)
    arr = np.asarray(t.value).reshape(tuple(reversed(t.ne)))
    if t.dtype == "bf16":
        return ops.convert(const(round_to("bf16", arr)), ov.Type.bf16)
    return ops.constant(arr)


def view_value(t: Tensor, base: Out) -> Out:
    """The value of a view/permute/reshape ``t`` read from its base's memory, as ggml indexes it."""
    base_t = t.base
    n_base = base_t.nelements
    if t.nelements == 0:
        return ops.broadcast(const(0, np.float32), i64(list(reversed(t.ne))))
    flat = ops.reshape(base, i64([n_base]), False)
    idx = ggml_index_map(t)
    lin = idx.reshape(-1)
    start = int(lin[0])
    if np.array_equal(lin, np.arange(start, start + lin.size)):
        if start == 0 and lin.size == n_base:
            return reshape4(base, t.ne)
        return reshape4(ops.slice(flat, i64([start]), i64([start + lin.size]), i64([1])), t.ne)
    perm = _permutation_of(t)
    if perm is not None:
        dims_desc, view_order, start = perm
        size = math.prod(t.ne[d] for d in dims_desc)
        src = (
            flat
            if start == 0 and size == n_base
            else ops.slice(flat, i64([start]), i64([start + size]), i64([1]))
        )
        y = ops.reshape(src, i64([t.ne[d] for d in dims_desc]), False)
        y = ops.transpose(y, i64(view_order))
        return reshape4(y, t.ne)
    return ops.gather(flat, ops.constant(idx), i64(0))


def _permutation_of(t: Tensor) -> tuple[list[int], list[int], int] | None:
    """When ``t`` is a permutation of a packed block of its base: (dims by stride desc, order, start)."""
    es = t.type_size
    dims = [d for d in range(4) if t.ne[d] > 1]
    if not dims:
        return None
    by_stride = sorted(dims, key=lambda d: t.nb[d])
    expect = es
    for d in by_stride:
        if t.nb[d] != expect:
            return None
        expect *= t.ne[d]
    dims_desc = list(reversed(by_stride))
    view_dims = sorted(dims, reverse=True)  # numpy order of the view's non-unit dims
    order = [dims_desc.index(d) for d in view_dims]
    return dims_desc, order, t.view_offs // es


def build_model(graph: Graph, outputs: Sequence[Tensor], leaves: Sequence[Tensor]) -> Any:
    """The ``openvino.Model`` computing ``outputs``; Parameters in the order of ``leaves``."""
    values: dict[int, Out] = {}
    params = []
    for leaf in leaves:
        p = ops.parameter(
            [leaf.ne[3], leaf.ne[2], leaf.ne[1], leaf.ne[0]], BOUNDARY_TYPE[leaf.dtype], name=leaf.name
        )
        params.append(p)
        values[leaf.id] = ops.convert(p, ov.Type.bf16) if leaf.dtype == "bf16" else p
    from ovkit.graph import SHAPE_ONLY_SRCS, VIEW_OPS

    for t in graph._value_nodes(outputs):
        if t.id in values:
            continue
        if t.is_leaf:
            values[t.id] = leaf_value(t)
            continue
        if t.op in VIEW_OPS:
            values[t.id] = view_value(t, values[t.base.id])
            continue
        fn = TRANSLATORS.get(t.op_key)
        if fn is None:
            raise GraphError(f"{t.describe()}: no OpenVINO translation for {t.op_key}")
        skip = SHAPE_ONLY_SRCS.get(t.op, frozenset())
        xs = [values[s.id] if s is not None and i not in skip else None for i, s in enumerate(t.srcs)]
        out = fn(t, xs)
        values[t.id] = to_type(out, t.dtype)
    results = []
    for o in outputs:
        v = values[o.id]
        if o.dtype == "bf16":
            v = ops.convert(v, ov.Type.f32)
        r = ops.result(ops.reshape(v, i64(list(o.shape)), False))
        results.append(r)
    return ov.Model(results, params, "ovkit_graph")


def model_inputs(graph: Graph, names: Sequence[str], feed: dict[str, np.ndarray]) -> list[np.ndarray]:
    """The arrays to feed the model's Parameters, in order (bf16 as f32)."""
    return [np.ascontiguousarray(feed[n]) for n in names]


# ---------------------------------------------------------------------------- elementwise
def _binary(fn: Callable[[Out, Out], Out]) -> TranslateFn:
    def tr(t: Tensor, xs: list[Out]) -> Out:
        a, b = t.srcs[0], t.srcs[1]
        assert a is not None and b is not None
        return fn(f32(xs[0]), broadcast_repeat(f32(xs[1]), b.ne, a.ne))

    return tr


translator("ADD")(_binary(ops.add))
translator("SUB")(_binary(ops.subtract))
translator("MUL")(_binary(ops.multiply))
translator("DIV")(_binary(ops.divide))


@translator("ADD1")
def _add1(t: Tensor, xs: list[Out]) -> Out:
    return ops.add(f32(xs[0]), ops.reshape(f32(xs[1]), i64([1, 1, 1, 1]), False))


@translator("ADD_ID")
def _add_id(t: Tensor, xs: list[Out]) -> Out:
    a, b, ids = xs
    b_t = t.srcs[1]
    assert b_t is not None
    bias = ops.reshape(b, i64([b_t.ne[1], b_t.ne[0]]), False)  # [n_expert, ne0]
    ids2 = ops.reshape(ids, i64([t.ne[2], t.ne[1]]), False)  # [n_tokens, n_used]
    picked = ops.gather(bias, ids2, i64(0))  # [n_tokens, n_used, ne0]
    return ops.add(a, ops.reshape(picked, i64([1, t.ne[2], t.ne[1], t.ne[0]]), False))


@translator("SCALE")
def _scale(t: Tensor, xs: list[Out]) -> Out:
    y = ops.multiply(f32(xs[0]), const(t.params["s"]))
    return ops.add(y, const(t.params["b"])) if t.params["b"] != 0.0 else y


@translator("SQR")
def _sqr(t: Tensor, xs: list[Out]) -> Out:
    x = f32(xs[0])
    return ops.multiply(x, x)


@translator("SQRT")
def _sqrt(t: Tensor, xs: list[Out]) -> Out:
    return ops.sqrt(f32(xs[0]))


@translator("CLAMP")
def _clamp(t: Tensor, xs: list[Out]) -> Out:
    return ops.minimum(ops.maximum(f32(xs[0]), const(t.params["min"])), const(t.params["max"]))


@translator("FILL")
def _fill(t: Tensor, xs: list[Out]) -> Out:
    return ops.broadcast(const(t.params["c"]), i64(list(reversed(t.ne))))


def gelu_tanh(x: Out) -> Out:
    """ggml's GELU: 0.5·x·(1 + tanh(√(2/π)·x·(1 + 0.044715·x²)))."""
    inner = ops.multiply(
        ops.multiply(x, const(math.sqrt(2.0 / math.pi))),
        ops.add(const(1.0), ops.multiply(const(0.044715), ops.multiply(x, x))),
    )
    return ops.multiply(ops.multiply(const(0.5), x), ops.add(const(1.0), ops.tanh(inner)))


def ggml_gelu(x: Out) -> Out:
    """ggml CPU GELU (GGML_GELU_FP16): tanh-GELU of f16(x), stored as f16; x ≤ -10 → 0, x ≥ 10 → x."""
    xh = rounded(x, "f16")
    table = rounded(gelu_tanh(xh), "f16")
    low = ops.less_equal(x, const(-10.0))
    high = ops.greater_equal(x, const(10.0))
    return ops.select(low, const(0.0), ops.select(high, x, table))


def silu(x: Out) -> Out:
    return ops.multiply(x, ops.sigmoid(x))


def softplus(x: Out) -> Out:
    """ggml: x > 20 ? x : log(1 + exp(x))."""
    return ops.select(ops.greater(x, const(20.0)), x, ops.log(ops.add(const(1.0), ops.exp(x))))


UNARY_FNS: dict[str, Callable[[Out], Out]] = {
    "GELU": ggml_gelu,
    "SIGMOID": ops.sigmoid,
    "SILU": silu,
    "SOFTPLUS": softplus,
    "TANH": ops.tanh,
    "EXP": ops.exp,
    "NEG": ops.negative,
}


def _unary_translator(name: str) -> TranslateFn:
    fn = UNARY_FNS[name]
    return lambda t, xs: fn(f32(xs[0]))


for _name in UNARY_FNS:
    translator(f"UNARY.{_name}")(_unary_translator(_name))


def _glu_halves(t: Tensor, xs: list[Out]) -> tuple[Out, Out]:
    a = f32(xs[0])
    if xs[1] is not None:
        return a, f32(xs[1])
    nc = t.ne[0]
    first, second = slice_dim(a, 0, 0, nc), slice_dim(a, 0, nc, 2 * nc)
    return (second, first) if t.params.get("swapped") else (first, second)


@translator("GLU.SWIGLU")
def _swiglu(t: Tensor, xs: list[Out]) -> Out:
    x0, x1 = _glu_halves(t, xs)
    return ops.multiply(silu(x0), x1)


@translator("GLU.GEGLU")
def _geglu(t: Tensor, xs: list[Out]) -> Out:
    x0, x1 = _glu_halves(t, xs)
    return ops.multiply(ggml_gelu(x0), x1)


@translator("GLU.SWIGLU_OAI")
def _swiglu_oai(t: Tensor, xs: list[Out]) -> Out:
    x0, x1 = _glu_halves(t, xs)
    alpha, limit = t.params["alpha"], t.params["limit"]
    x = ops.minimum(x0, const(limit))
    y = ops.minimum(ops.maximum(x1, const(-limit)), const(limit))
    glu = ops.divide(x, ops.add(const(1.0), ops.exp(ops.multiply(const(-alpha), x))))
    return ops.multiply(glu, ops.add(y, const(1.0)))


# ---------------------------------------------------------------------------- layout
@translator("CONT")
def _cont(t: Tensor, xs: list[Out]) -> Out:
    return reshape4(xs[0], t.ne)


@translator("CPY")
def _cpy(t: Tensor, xs: list[Out]) -> Out:
    x = xs[0]
    src = t.srcs[0]
    assert src is not None
    if t.dtype in ("i32", "i64") and src.dtype in ("f32", "f16", "bf16"):
        x = ops.convert(f32(x), OV_TYPE[t.dtype])  # truncation toward zero, as a C cast
    return reshape4(x, t.ne)


# ---------------------------------------------------------------------------- matmul
def _weight_f32(src: Tensor, x: Out) -> Out:
    return f32(x)


@translator("MUL_MAT")
def _mul_mat(t: Tensor, xs: list[Out]) -> Out:
    a, b = t.srcs[0], t.srcs[1]
    assert a is not None and b is not None
    xb = f32(xs[1])
    fused = getattr(a.value, "ov_mul_mat", None) if a.is_leaf and a.is_quantized else None
    if fused is not None and a.ne[2] == 1 and a.ne[3] == 1:
        # the quantized weight builds the matmul form the CPU plugin keeps compressed
        return reshape4(fused(xb), t.ne)
    wa = _weight_f32(a, xs[0])
    if a.dtype in ("f16", "bf16") and b.dtype != a.dtype:
        xb = rounded(xb, a.dtype)  # ggml converts src1 to src0's vec_dot type
    wa = expand_batch(wa, a.ne, (a.ne[0], a.ne[1], b.ne[2], b.ne[3]))
    return ops.matmul(xb, wa, False, True)


# ---------------------------------------------------------------------------- layout II
@translator("CONCAT")
def _concat(t: Tensor, xs: list[Out]) -> Out:
    return ops.concat([to_type(xs[0], t.dtype), to_type(xs[1], t.dtype)], ax(t.params["dim"]))


@translator("REPEAT")
def _repeat(t: Tensor, xs: list[Out]) -> Out:
    src = t.srcs[0]
    assert src is not None
    return tile_to(xs[0], src.ne, t.ne)


@translator("PAD")
def _pad(t: Tensor, xs: list[Out]) -> Out:
    p = t.params
    begin = [p["lp3"], p["lp2"], p["lp1"], p["lp0"]]
    end = [p["rp3"], p["rp2"], p["rp1"], p["rp0"]]
    return ops.pad(f32(xs[0]), i64(begin), i64(end), "constant", const(0.0))


# ---------------------------------------------------------------------------- rows
@translator("GET_ROWS")
def _get_rows(t: Tensor, xs: list[Out]) -> Out:
    a, b = t.srcs[0], t.srcs[1]
    assert a is not None and b is not None
    data = xs[0] if a.dtype == "i32" else f32(xs[0])  # [a3, a2, a1, a0]
    # indices [b2, b1, b0] pick rows of a's [a3 = b2, a2 = b1] batch: Gather with batch_dims=2
    idx = ops.reshape(xs[1], i64([b.ne[2], b.ne[1], b.ne[0]]), False)
    return ops.gather(data, idx, i64(2), 2)


@translator("SET_ROWS")
def _set_rows(t: Tensor, xs: list[Out]) -> Out:
    b, c = t.srcs[1], t.srcs[2]
    assert b is not None and c is not None
    dst = xs[0]
    rows = to_type(f32(xs[1]), t.dtype)  # [b3, b2, b1, b0] rows converted to dst type
    # row index of b's row (i1, i2, i3): c[i1, i2 % c.ne1, i3 % c.ne2]
    idx = ops.convert(xs[2], ov.Type.i64)
    idx = tile_to(idx, c.ne, (c.ne[0], b.ne[2], b.ne[3], 1))  # [1, b3, b2, b1] after tiling
    idx = ops.reshape(idx, i64([b.ne[3], b.ne[2], b.ne[1]]), False)
    i3 = np.broadcast_to(np.arange(b.ne[3])[:, None, None], (b.ne[3], b.ne[2], b.ne[1]))
    i2 = np.broadcast_to(np.arange(b.ne[2])[None, :, None], (b.ne[3], b.ne[2], b.ne[1]))
    coords = ops.concat(
        [
            ops.unsqueeze(const(i3, np.int64), i64(3)),
            ops.unsqueeze(const(i2, np.int64), i64(3)),
            ops.unsqueeze(idx, i64(3)),
        ],
        3,
    )
    return ops.scatter_nd_update(dst, coords, rows)


@translator("SET")
def _set(t: Tensor, xs: list[Out]) -> Out:
    b = t.srcs[1]
    assert b is not None
    p = t.params
    es = t.type_size
    idx = np.full((1, 1, 1, 1), p["offset"] // es, dtype=np.int64)
    for d, nb in enumerate((es, p["nb1"], p["nb2"], p["nb3"])):
        shape = [1, 1, 1, 1]
        shape[3 - d] = b.ne[d]
        idx = idx + (np.arange(b.ne[d], dtype=np.int64) * (nb // es)).reshape(shape)
    flat = ops.reshape(xs[0], i64([t.nelements]), False)
    upd = ops.reshape(to_type(xs[1], t.dtype), i64([b.nelements]), False)
    out = ops.scatter_nd_update(flat, const(idx.reshape(-1, 1), np.int64), upd)
    return reshape4(out, t.ne)


# ---------------------------------------------------------------------------- norms, reductions
def _mean_last(x: Out) -> Out:
    return ops.reduce_mean(x, i64([3]), True)


@translator("NORM")
def _norm(t: Tensor, xs: list[Out]) -> Out:
    x = f32(xs[0])
    centered = ops.subtract(x, _mean_last(x))
    var = _mean_last(ops.multiply(centered, centered))
    return ops.divide(centered, ops.sqrt(ops.add(var, const(t.params["eps"]))))


@translator("RMS_NORM")
def _rms_norm(t: Tensor, xs: list[Out]) -> Out:
    x = f32(xs[0])
    ms = _mean_last(ops.multiply(x, x))
    return ops.multiply(x, ops.divide(const(1.0), ops.sqrt(ops.add(ms, const(t.params["eps"])))))


@translator("L2_NORM")
def _l2_norm(t: Tensor, xs: list[Out]) -> Out:
    x = f32(xs[0])
    norm = ops.sqrt(ops.reduce_sum(ops.multiply(x, x), i64([3]), True))
    return ops.multiply(x, ops.divide(const(1.0), ops.maximum(norm, const(t.params["eps"]))))


@translator("SUM_ROWS")
def _sum_rows(t: Tensor, xs: list[Out]) -> Out:
    return ops.reduce_sum(f32(xs[0]), i64([3]), True)


@translator("CUMSUM")
def _cumsum(t: Tensor, xs: list[Out]) -> Out:
    return ops.cum_sum(f32(xs[0]), i64(3))


@translator("ARGSORT")
def _argsort(t: Tensor, xs: list[Out]) -> Out:
    mode = "min" if t.params["order"] == 0 else "max"
    topk = ops.topk(f32(xs[0]), i64(t.ne[0]), 3, mode, "value", "i32", stable=True)
    return topk.output(1)


@translator("DIAG")
def _diag(t: Tensor, xs: list[Out]) -> Out:
    n = t.ne[0]
    eye = const(np.eye(n, dtype=np.float32).reshape(1, 1, n, n))
    return ops.multiply(f32(xs[0]), eye)  # [.., 1, n] broadcast over rows


@translator("TRI")
def _tri(t: Tensor, xs: list[Out]) -> Out:
    mask = tri_mask(t.params["type"], t.ne[0]).astype(np.float32).reshape(1, 1, t.ne[1], t.ne[0])
    return ops.multiply(f32(xs[0]), const(mask))
