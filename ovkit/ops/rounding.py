"""C's roundings as OpenVINO arithmetic: ggml's f16/bf16 stores (an f32 value rounded to the type,
kept in f32), products and quotients rounded to f32 as C rounds them.  Used by the op translation
and by ggml's numerics (``precision="ggml"``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import openvino.opset16 as ops


def const(value: float) -> Any:
    return ops.constant(np.asarray(value, dtype=np.float32))


#: Veltkamp splitting constants 2^(24 - p) + 1 for p significant bits (f16: 11, bf16: 8).
_SPLIT = {"f16": 2.0**13 + 1.0, "bf16": 2.0**16 + 1.0}
#: The smallest f32 magnitude that rounds to f16's infinity (65504 and half its spacing, 16).
_F16_OVERFLOW = 65520.0


def _split(x: Any, dtype: str) -> Any:
    """Veltkamp splitting: ``x`` rounded to nearest (ties to even) at the type's significant bits;
    finite while c·x does not overflow."""
    t = ops.multiply(x, const(_SPLIT[dtype]))
    return ops.subtract(t, ops.subtract(t, x))


def rounded(x: Any, dtype: str) -> Any:
    """``x`` (f32) rounded to ``dtype``'s precision, kept in f32 (ggml's intermediate f16 stores),
    in arithmetic: the CPU plugin folds a Convert pair away.  Few nodes on purpose: a model has
    three of these per layer, and the plugin's compile time grows with the node count."""
    if dtype == "f32":
        return x
    if dtype == "f16":
        mag = ops.abs(x)  # subnormals (below 2^-14) on f16's 2^-24 grid; ±inf from 65520 up, as ggml
        # not (x + 0.75) - 0.75: the plugin folds a chain of constant additions into one
        sub = ops.multiply(ops.round(ops.multiply(x, const(2.0**24)), "half_to_even"), const(2.0**-24))
        out = ops.select(ops.less(mag, const(2.0**-14)), sub, _split(x, dtype))
        return ops.select(ops.greater_equal(mag, const(_F16_OVERFLOW)), ops.multiply(x, const(np.inf)), out)
    big = ops.greater(ops.abs(x), const(2.0**100))  # bf16 spans f32's range: split a scaled copy
    hi = _split(ops.select(big, ops.multiply(x, const(2.0**-64)), x), dtype)
    hi = ops.select(big, ops.multiply(hi, const(2.0**64)), hi)
    return ops.select(ops.is_finite(x), hi, x)  # ±inf/nan pass through


def ov_mul_rn(a: Any, b: Any) -> Any:
    """``a·b`` rounded to f32 before whatever adds it: the Minimum keeps the CPU plugin from
    fusing the product and a following Add into one FMA (one rounding where C has two)."""
    return ops.minimum(ops.multiply(a, b), const(float(np.finfo(np.float32).max)))


def ov_split(a: Any) -> tuple[Any, Any]:
    """Veltkamp's split of an f32 Output into two halves of 12 significant bits (their products
    are exact in f32)."""
    t = ov_mul_rn(a, const(4097.0))
    hi = ops.subtract(t, ops.subtract(t, a))
    return hi, ops.subtract(a, hi)


def ov_div_rn(num: Any, den: Any) -> Any:
    """``num / den`` correctly rounded to f32, as C's division is: the CPU plugin's Divide can be
    an ulp off (a reciprocal), so the quotient and its two neighbours are compared by their exact
    residual ``num - den·q`` (Dekker's product with Veltkamp splits; finite, normal operands;
    the result's last axis has size 1)."""
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
    step = ov_mul_rn(ops.abs(q0), const(1.25 * 2.0**-24))  # 0.625 to 1.25 ulp: the next float
    best, best_r = q0, residual(q0)
    for q in (ops.add(q0, step), ops.subtract(q0, step)):
        r = residual(q)
        closer = ops.less(r, best_r)
        best, best_r = ops.select(closer, q, best), ops.select(closer, r, best_r)
    return cut(best)
