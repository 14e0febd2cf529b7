"""ggml's f16/bf16 stores as OpenVINO arithmetic: an f32 value rounded to the type, kept in f32.

Used by the op translation and by ggml's matmul numerics (``precision="ggml"``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import openvino.opset16 as ops

__all__ = ["rounded"]


def const(value: float) -> Any:
    return ops.constant(np.asarray(value, dtype=np.float32))


#: Veltkamp splitting constants 2^(24 - p) + 1 for p significant bits (f16: 11, bf16: 8).
_SPLIT = {"f16": 2.0**13 + 1.0, "bf16": 2.0**16 + 1.0}


def rounded(x: Any, dtype: str) -> Any:
    """``x`` (f32) rounded to ``dtype``'s precision, kept in f32 (ggml's intermediate f16 stores).

    A Convert pair would be folded away by the CPU plugin, so the rounding is arithmetic
    (Veltkamp splitting: round-to-nearest to the type's significant bits); f16 subnormals
    (|x| < 2^-14) round on the fixed 2^-24 grid.
    """
    if dtype == "f32":
        return x
    c = const(_SPLIT[dtype])
    big = ops.greater(ops.abs(x), const(2.0**100))  # split a scaled copy: c·x must not overflow
    xs = ops.select(big, ops.multiply(x, const(2.0**-64)), x)
    t = ops.multiply(xs, c)
    hi = ops.subtract(t, ops.subtract(t, xs))
    hi = ops.select(big, ops.multiply(hi, const(2.0**64)), hi)
    hi = ops.select(ops.is_finite(x), hi, x)  # ±inf/nan pass through
    if dtype != "f16":
        return hi
    sub = ops.divide(ops.round(ops.multiply(x, const(2.0**24)), "half_to_even"), const(2.0**24))
    return ops.select(ops.less(ops.abs(x), const(2.0**-14)), sub, hi)
