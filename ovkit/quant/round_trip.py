"""Writing quantized tensors (CPY / SET_ROWS into quantized rows): the values a tensor reads back
after ggml's CPU ``from_float`` then ``to_float``, in numpy (:func:`round_trip`) and as OpenVINO
arithmetic with C's roundings (:func:`ov_round_trip`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ovkit.dtypes import WRITABLE_QUANT_TYPES
from ovkit.quant.specs import QuantError, quant_spec


@dataclass(frozen=True, slots=True)
class RoundTrip:
    """How ggml's CPU ``from_float`` quantizes one 32-element block (then decoded as ``to_float``).

    ``symmetric``: d = (the value of largest magnitude) / -offset, q = min(levels,
    trunc(x/d + offset + 0.5)), w = (q - offset)·d (Q4_0, Q5_0); otherwise, with ``offset`` 0, d = (max - min) /
    levels, q = min(levels, trunc((x - min)/d + 0.5)), w = q·d + min (Q4_1, Q5_1); Q8_0 (``levels``
    127): d = amax/127, q = round-half-even(x · 127/amax), its AVX kernel's arithmetic.
    """

    symmetric: bool
    offset: int
    levels: int


#: The quantized types an op may write, each as ggml's CPU backend quantizes it.
ROUND_TRIPS: dict[str, RoundTrip] = {
    "q4_0": RoundTrip(True, 8, 15),
    "q4_1": RoundTrip(False, 0, 15),
    "q5_0": RoundTrip(True, 16, 31),
    "q5_1": RoundTrip(False, 0, 31),
    "q8_0": RoundTrip(False, 0, 127),
}
assert tuple(ROUND_TRIPS) == WRITABLE_QUANT_TYPES, "ovkit.dtypes lists the types specified here"


def _round_trip_spec(qtype: str) -> RoundTrip:
    spec = quant_spec(qtype)
    rt = ROUND_TRIPS.get(spec.name)
    if rt is None:
        raise QuantError(
            f"writing {spec.name} values (ggml's from_float) is not reproduced; expected one of {', '.join(WRITABLE_QUANT_TYPES)}"
        )
    return rt


def round_trip(values: np.ndarray, qtype: str) -> np.ndarray:
    """The f32 values a tensor of ``qtype`` holds after ggml's CPU backend writes ``values`` into
    it (rows along the last axis, a multiple of 32): ``to_float(from_float(values))``."""
    rt = _round_trip_spec(qtype)
    x = np.ascontiguousarray(values, dtype=np.float32)
    b = x.reshape(-1, 32)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if rt.symmetric:
            mx = np.take_along_axis(b, np.abs(b).argmax(axis=1)[:, None], axis=1)
            d = mx / np.float32(-rt.offset)
            inv = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
            q = np.minimum(np.float32(rt.levels), np.trunc(b * inv + np.float32(rt.offset + 0.5)))
            out = (q - np.float32(rt.offset)) * _f16_round(d)
        elif rt.levels == 127:
            amax = np.abs(b).max(axis=1, keepdims=True)
            inv = np.where(amax != 0, np.float32(127) / amax, np.float32(0)).astype(np.float32)
            out = np.rint(b * inv) * _f16_round(amax / np.float32(127))
        else:
            lo, hi = b.min(axis=1, keepdims=True), b.max(axis=1, keepdims=True)
            d = (hi - lo) / np.float32(rt.levels)
            inv = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
            q = np.minimum(np.float32(rt.levels), np.trunc((b - lo) * inv + np.float32(0.5)))
            out = q * _f16_round(d) + _f16_round(lo)
    return out.astype(np.float32).reshape(x.shape)


def _f16_round(v: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return v.astype(np.float16).astype(np.float32)


def ov_mul_rn(a: Any, b: Any) -> Any:
    """``a·b`` rounded to f32 before whatever adds it: the Minimum keeps the CPU plugin from
    fusing the product and a following Add into one FMA (one rounding where C has two)."""
    import openvino.opset13 as ops

    return ops.minimum(ops.multiply(a, b), ops.constant(np.finfo(np.float32).max))


def ov_split(a: Any) -> tuple[Any, Any]:
    """Veltkamp's split of an f32 Output into two halves of 12 significant bits (their products
    are exact in f32)."""
    import openvino.opset13 as ops

    t = ov_mul_rn(a, ops.constant(np.float32(4097.0)))
    hi = ops.subtract(t, ops.subtract(t, a))
    return hi, ops.subtract(a, hi)


def ov_div_rn(num: Any, den: Any) -> Any:
    """``num / den`` correctly rounded to f32, as C's division is: the CPU plugin's Divide can be
    an ulp off (a reciprocal), so the quotient and its two neighbours are compared by their exact
    residual ``num - den·q`` (Dekker's product with Veltkamp splits; finite, normal operands;
    the result's last axis has size 1)."""
    import openvino.opset13 as ops

    def c(v: float) -> Any:
        return ops.constant(np.float32(v))

    # den itself, but not a Constant: with a constant divisor the CPU plugin's fused snippet
    # kernel runs out of registers (max(min(n, d), d) is d for every ordered pair)
    den = ops.maximum(ops.minimum(num, den), den)
    dh, dl = ov_split(den)

    def cut(v: Any) -> Any:
        # a Gather of the last (size-1) axis ends a fused chain (one snippet kernel of the whole
        # computation fails to allocate registers)
        return ops.gather(v, ops.constant(np.array([0], np.int64)), ops.constant(np.int64(-1)))

    def residual(q: Any) -> Any:  # |num - den·q|, the product's rounding error included
        p = ov_mul_rn(den, q)
        qh, ql = ov_split(q)
        err = ops.add(
            ops.add(ops.add(ops.subtract(ov_mul_rn(dh, qh), p), ov_mul_rn(dh, ql)), ov_mul_rn(dl, qh)),
            ov_mul_rn(dl, ql),
        )
        return cut(ops.abs(ops.subtract(ops.subtract(num, p), err)))

    q0 = ops.divide(num, den)
    step = ov_mul_rn(ops.abs(q0), c(1.25 * 2.0**-24))  # 0.625 to 1.25 ulp: the next float
    best, best_r = q0, residual(q0)
    for q in (ops.add(q0, step), ops.subtract(q0, step)):
        r = residual(q)
        closer = ops.less(r, best_r)
        best, best_r = ops.select(closer, q, best), ops.select(closer, r, best_r)
    return cut(best)


def ov_round_trip(x: Any, qtype: str, f16_round: Callable[[Any], Any]) -> Any:
    """:func:`round_trip` as an OpenVINO subgraph of the f32 Output ``x`` (same shape);
    ``f16_round`` rounds an f32 Output to f16 values the plugin cannot fold away."""
    rt = _round_trip_spec(qtype)
    import openvino.opset13 as ops

    def c(v: float) -> Any:
        return ops.constant(np.float32(v))

    def safe_div(num: float, den: Any) -> Any:  # den != 0 ? num/den : 0
        return ops.select(ops.not_equal(den, c(0.0)), ov_div_rn(c(num), den), c(0.0))

    b = ops.reshape(x, ops.constant(np.array([-1, 32], np.int64)), False)
    axis = ops.constant(np.array([1], np.int64))
    if rt.symmetric:
        # the first value of largest magnitude, as ggml's strict ``amax < fabsf(v)`` scan finds it
        mag = ops.abs(b)
        first = ops.select(
            ops.equal(mag, ops.reduce_max(mag, axis, True)),
            ops.constant(np.arange(32, dtype=np.int64)),
            ops.constant(np.int64(32)),
        )
        at = ops.reduce_min(first, axis, True)
        d = ops.multiply(ops.gather_elements(b, at, 1), c(-1.0 / rt.offset))  # exact: 2^-k
        q = ops.floor(ops.add(ov_mul_rn(b, safe_div(1.0, d)), c(rt.offset + 0.5)))
        q = ops.minimum(q, c(rt.levels))
        out = ops.multiply(ops.subtract(q, c(rt.offset)), f16_round(d))
    elif rt.levels == 127:
        amax = ops.reduce_max(ops.abs(b), axis, True)
        q = ops.round(ops.multiply(b, safe_div(127.0, amax)), "half_to_even")
        out = ops.multiply(q, f16_round(ov_div_rn(amax, c(127.0))))
    else:
        lo, hi = ops.reduce_min(b, axis, True), ops.reduce_max(b, axis, True)
        d = ov_div_rn(ops.subtract(hi, lo), c(rt.levels))
        q = ops.floor(ops.add(ov_mul_rn(ops.subtract(b, lo), safe_div(1.0, d)), c(0.5)))
        out = ops.add(ov_mul_rn(ops.minimum(q, c(rt.levels)), f16_round(d)), f16_round(lo))
    return ops.reshape(out, ops.shape_of(x), False)
