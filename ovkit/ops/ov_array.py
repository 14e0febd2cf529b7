"""OpenVINO nodes for the formulas: :class:`~ovkit.ops.formulas.ArrayOps` over opset16 (``OPENVINO``)
and the small node helpers every translator uses, below both ``translate`` and ``ggml_numerics``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import openvino as ov
import openvino.opset16 as ops

from ovkit.dtypes import DTYPES, ggml_type
from ovkit.ops import geometry
from ovkit.ops.formulas import Num, Prim
from ovkit.ops.rounding import ov_div_rn, ov_mul_rn, rounded

Out = Any  # an openvino Output/Node

OV_TYPE: dict[str, Any] = {n: getattr(ov.Type, str(ggml_type(n).openvino)) for n in DTYPES}


def const(value: Any, dtype: Any = np.float32) -> Out:
    return ops.constant(np.asarray(value, dtype=dtype))


def i64(values: Sequence[int] | int) -> Out:
    return ops.constant(np.asarray(values, dtype=np.int64))


def output_of(x: Out) -> Any:
    """The (first) ``Output`` of ``x``, a Node or already an Output."""
    return x.output(0) if hasattr(x, "output") else x


def f32(x: Out) -> Out:
    """``x`` as f32 (ggml's CPU computes f16/bf16 ops in f32)."""
    return x if output_of(x).get_element_type() == ov.Type.f32 else ops.convert(x, ov.Type.f32)


def to_type(x: Out, dtype: str) -> Out:
    """``x`` converted to the ggml type ``dtype`` (no-op when already that type)."""
    out = output_of(x)
    target = OV_TYPE.get(dtype, ov.Type.f32)  # a quantized tensor's value is its f32 decode
    if out.get_element_type() == target:
        return x
    if dtype in ("f16", "bf16") and out.get_element_type() == ov.Type.f32:
        x = rounded(x, dtype)  # survives the plugin folding Convert(f32→f16→f32) pairs away
    return ops.convert(x, target)


def reshape4(x: Out, ne: Sequence[int]) -> Out:
    return ops.reshape(x, i64([int(ne[3]), int(ne[2]), int(ne[1]), int(ne[0])]), False)


def slice_dim(x: Out, dim: int, start: int, stop: int, step: int = 1) -> Out:
    return ops.slice(x, i64([start]), i64([stop]), i64([step]), i64([geometry.ax(dim)]))


def tile_to(x: Out, small: Sequence[int], big: Sequence[int]) -> Out:
    """ggml repeat: tile ``x`` (ne ``small``) to ne ``big`` (each big[i] a multiple of small[i])."""
    reps = [big[3 - i] // small[3 - i] for i in range(4)]
    if all(r == 1 for r in reps):
        return x
    return ops.tile(x, i64(reps))


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


def softmax_with_sinks(w: Out, sinks: Out | None) -> Out:
    """Softmax over the last axis; per-head (axis 1) ``sinks`` join the denominator as an extra column."""
    if sinks is None:
        return ops.softmax(w, 3)
    shape = list(output_of(w).get_partial_shape().to_shape())
    col = ops.broadcast(ops.reshape(f32(sinks), i64([1, -1, 1, 1]), False), i64([*shape[:3], 1]))
    return slice_dim(ops.softmax(ops.concat([w, col], 3), 3), 0, 0, shape[3])


def exp_f32(x: Out) -> Out:
    """exp(x) finite up to f32's limit (x ≤ 88.72): the CPU plugin's Exp saturates to +inf from
    x ≈ 88.38, so large arguments go through exp(x/2)²."""
    half = ops.exp(ops.multiply(x, const(0.5)))
    return ops.select(ops.greater(x, const(80.0)), ops.multiply(half, half), ops.exp(x))


_PRIMS: dict[str, Callable[[Out], Out]] = {
    "neg": ops.negative, "abs": ops.abs, "sign": ops.sign, "floor": ops.floor, "ceil": ops.ceiling,
    "trunc": lambda x: ops.select(ops.less(x, const(0.0)), ops.ceiling(x), ops.floor(x)),
    "round_away": lambda x: ops.round(x, "half_away_from_zero"),
    "round_even": lambda x: ops.round(x, "half_to_even"), "sqrt": ops.sqrt, "exp": exp_f32,
    "expm1": lambda x: ops.subtract(exp_f32(x), const(1.0)), "log": ops.log, "sin": ops.sin,
    "cos": ops.cos, "tanh": ops.tanh, "sigmoid": ops.sigmoid, "erf": ops.erf,
}  # fmt: skip


def _v(x: Out | Num) -> Out:
    return const(x) if isinstance(x, float | int) else x


def _binary(fn: Callable[[Out, Out], Out]) -> Callable[[Any, Out | Num, Out | Num], Out]:
    return lambda self, a, b: fn(_v(a), _v(b))


#: Largest row length x k sorted stably: OpenVINO's CPU TopK sorts stably by bubble sort (n x k
#: steps a row: 17 s for one 65,536-wide argsort), its unstable sort is fast.  Ties beyond that
#: need no fixed order: ggml sorts with std::sort, which is stable only on short rows.
STABLE_TOPK_WORK = 1 << 20


class OpenVinoOps:
    """:class:`~ovkit.ops.formulas.ArrayOps` over opset16 nodes (f32)."""

    def f32(self, x: Out) -> Out:
        return f32(x)

    add, sub, mul, div, maximum, minimum = (
        _binary(f) for f in (ops.add, ops.subtract, ops.multiply, ops.divide, ops.maximum, ops.minimum)
    )
    mul_rn, div_rn = _binary(ov_mul_rn), _binary(ov_div_rn)
    gt, ge, le, ne = (_binary(f) for f in (ops.greater, ops.greater_equal, ops.less_equal, ops.not_equal))

    def first_largest(self, x: Out) -> Out:
        # the first of the largest magnitudes, as ggml's strict ``amax < fabsf(v)`` scan finds it
        mag, n = ops.abs(x), output_of(x).get_partial_shape()[-1].get_length()
        at = ops.select(
            ops.equal(mag, ops.reduce_max(mag, i64([-1]), True)), const(np.arange(n), np.int64), i64(n)
        )
        return ops.gather_elements(x, ops.reduce_min(at, i64([-1]), True), -1)

    def where(self, cond: Out, a: Out | Num, b: Out | Num) -> Out:
        return ops.select(cond, _v(a), _v(b))

    def unary(self, name: Prim, x: Out) -> Out:
        return _PRIMS[name](x)

    def rounded(self, x: Out, dtype: str) -> Out:
        return rounded(x, dtype)

    def repeat(self, x: Out, small: Sequence[int], big: Sequence[int]) -> Out:
        # ggml's binary-op repeat: a numpy broadcast where small is 1, a Tile where it divides
        return x if all(s in (b, 1) for s, b in zip(small, big, strict=True)) else tile_to(x, small, big)

    def head(self, x: Out, start: int, stop: int) -> Out:
        return slice_dim(x, 0, start, stop)

    def truncated(self, x: Out, dtype: str) -> Out:
        return ops.convert(f32(x), OV_TYPE[dtype])

    def full(self, ne: Sequence[int], value: float) -> Out:
        return ops.broadcast(const(value), i64(list(reversed(ne))))

    def const(self, value: np.ndarray) -> Out:
        return ops.constant(value)

    def mean_rows(self, x: Out) -> Out:
        return ops.reduce_mean(x, i64([3]), True)

    def reduce(self, kind: str, x: Out, axes: Sequence[int]) -> Out:
        reduce = {"max": ops.reduce_max, "min": ops.reduce_min, "sum": ops.reduce_sum}[kind]
        return reduce(x, i64(list(axes)), True)

    def reshape(self, x: Out, shape: Sequence[int]) -> Out:
        return ops.reshape(x, i64(list(shape)), False)

    def transpose(self, x: Out, order: Sequence[int]) -> Out:
        return ops.transpose(x, i64(list(order)))

    def concat(self, xs: Sequence[Out], axis: int) -> Out:
        return ops.concat(list(xs), axis)

    def take(self, x: Out, idx: Out | np.ndarray, axis: int) -> Out:
        return ops.gather(x, const(idx, np.int64) if isinstance(idx, np.ndarray) else idx, i64(axis))

    def matmul(self, a: Out, b: Out, ta: bool = False, tb: bool = False) -> Out:
        return ops.matmul(a, b, ta, tb)

    def pad(self, x: Out, begin: Sequence[int], end: Sequence[int], mode: str) -> Out:
        return ops.pad(x, i64(list(begin)), i64(list(end)), mode, const(0.0) if mode == "constant" else None)

    def expand_batch(self, x: Out, small: Sequence[int], big: Sequence[int]) -> Out:
        return expand_batch(x, small, big)

    def conv(self, x: Out, w: Out, geom: geometry.ConvGeometry, depthwise: bool) -> Out:
        sizes, ks, s, p, d, out = geom
        # padded (or cropped) so that an unpadded convolution gives ggml's output sizes
        end = [
            (o - 1) * st + dl * (k - 1) + 1 - sz - pb
            for o, st, dl, k, sz, pb in zip(out, s, d, ks, sizes, p, strict=True)
        ]
        if any(p) or any(end):
            x = ops.pad(x, i64([0, 0, *p]), i64([0, 0, *end]), "constant", const(0.0))
        zeros = [0] * len(sizes)
        if depthwise:  # C groups of one channel: weights [C, 1, 1, *ks]
            return ops.group_convolution(x, ops.unsqueeze(w, i64(1)), s, zeros, zeros, d)
        return ops.convolution(x, w, s, zeros, zeros, d)

    def sorted_indices(self, x: Out, k: int, largest: bool) -> Out:
        stable = output_of(x).get_partial_shape()[3].get_length() * k <= STABLE_TOPK_WORK
        return ops.topk(f32(x), i64(k), 3, "max" if largest else "min", "value", "i32", stable=stable).output(
            1
        )

    def softmax(self, w: Out, sinks: Out | None) -> Out:
        # ggml: a row whose maximum is +inf computes exp(inf - inf) = NaN, and a NaN in a row (or its
        # sink) makes the row's sum NaN: the whole row is NaN. OpenVINO's Softmax keeps the NaN to its
        # own element (the CPU's ReduceMax and exp sum skip it), so both cases are selected here.
        row_max = ops.reduce_max(w, i64([3]), True)
        nan_row = ops.reduce_logical_or(ops.is_nan(w), i64([3]), True)
        if sinks is not None:
            head_sinks = ops.reshape(sinks, i64([1, -1, 1, 1]), False)
            row_max = ops.maximum(row_max, head_sinks)
            nan_row = ops.logical_or(nan_row, ops.is_nan(head_sinks))
        nan_row = ops.logical_or(nan_row, ops.equal(row_max, const(np.inf)))
        return ops.select(nan_row, const(np.nan), softmax_with_sinks(w, sinks))

    def conv_transpose(self, x: Out, w: Out, stride: int) -> Out:
        return ops.convolution_backprop_data(
            x, w, [stride, stride], pads_begin=[0, 0], pads_end=[0, 0], dilations=[1, 1]
        )


OPENVINO = OpenVinoOps()
