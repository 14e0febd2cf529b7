"""Writing quantized tensors (CPY / SET_ROWS into quantized rows): how ggml's CPU ``from_float``
quantizes each writable type (``ovkit.ops.formulas.quantized_write`` computes it) and OpenVINO
arithmetic with C's roundings."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ovkit.dtypes import WRITABLE_QUANT_TYPES
from ovkit.quant.specs import QuantError, quant_spec


@dataclass(frozen=True, slots=True)
class RoundTrip:
    """How ggml's CPU ``from_float`` quantizes one 32-element block: symmetric (Q4_0, Q5_0) about
    ``offset``, or from the block's minimum; ``levels`` the largest integer (Q8_0: 127)."""

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


def round_trip_spec(qtype: str) -> RoundTrip:
    """The :class:`RoundTrip` of ``qtype``; QuantError for a type ovkit does not write."""
    spec = quant_spec(qtype)
    rt = ROUND_TRIPS.get(spec.name)
    if rt is None:
        raise QuantError(
            f"writing {spec.name} values (ggml's from_float) is not reproduced; expected one of {', '.join(WRITABLE_QUANT_TYPES)}"
        )
    return rt


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
