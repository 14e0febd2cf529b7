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
