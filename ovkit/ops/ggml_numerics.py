"""``precision="ggml"``: a quantized matmul with llama.cpp's CPU numerics, as OpenVINO nodes.

ggml's CPU backend does not multiply a quantized weight by f32 activations: it first quantizes
each activation row to the weight type's dot type (``VEC_DOT_TYPES``: q8_0, q8_1 or q8_K blocks)
and sums integer products per block, scaled by both blocks' scales.  Here the activations are
quantized exactly as the x86 (AVX/AVX2) kernels of the vendored ggml do and decoded back to f32
(``d·q``: exact in f32 for q8_0/q8_1, whose ``d`` is an f16 value, and one f32 rounding for q8_K,
as ggml's own ``dequantize_row_q8_K``), then multiplied by the weight's exact values.  The sum
of ``(d_a·q_a)·(d_w·q_w)`` is ggml's ``d_a·d_w·Σ q_a·q_w`` up to f32 rounding of the products and
of the summation order, which is not bitwise but far below a logit NMSE of 1e-5.  The q8_1 min
term is reproduced as ggml stores it: ``m_w·s_a`` with ``s_a = f16(d_a·Σq_a)`` (a correction
``(s_a − d_a·Σq_a)·m_w`` is added to the exact-activation bias term).

Float weights need nothing here: ovkit's f16/bf16 MUL_MAT already rounds the activations to the
weight's type (their vec_dot type), and f32 weights meet f32 activations, as in ggml.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from ovkit import quant
from ovkit.quant import QuantError, QuantizedWeight, RequantTarget

#: ggml's ``type_traits_cpu[type].vec_dot_type`` (ggml-cpu.c) for every quantized weight type:
#: the format the activations are quantized to before the integer dot product.
VEC_DOT_TYPES: dict[str, str] = {
    "q4_0": "q8_0",
    "q4_1": "q8_1",
    "q5_0": "q8_0",
    "q5_1": "q8_1",
    "q8_0": "q8_0",
    "mxfp4": "q8_0",
    "nvfp4": "q8_0",
    "iq4_nl": "q8_0",
    "q1_0": "q8_0",
    "q2_K": "q8_K",
    "q3_K": "q8_K",
    "q4_K": "q8_K",
    "q5_K": "q8_K",
    "q6_K": "q8_K",
    "iq2_xxs": "q8_K",
    "iq2_xs": "q8_K",
    "iq3_xxs": "q8_K",
    "iq3_s": "q8_K",
    "iq2_s": "q8_K",
    "iq1_s": "q8_K",
    "iq1_m": "q8_K",
    "iq4_xs": "q8_K",
    "tq1_0": "q8_K",
    "tq2_0": "q8_K",
}
assert set(VEC_DOT_TYPES) == set(quant.KNOWN_TYPES), "every type ovkit decodes has its dot type"

#: Elements per activation block of each dot type.
DOT_BLOCK: dict[str, int] = {"q8_0": 32, "q8_1": 32, "q8_K": quant.QK_K}


def vec_dot_type(qtype: str) -> str:
    """The dot type ggml's CPU quantizes activations to for a ``qtype`` weight."""
    return VEC_DOT_TYPES[quant.quant_spec(qtype).name]


def _ops() -> Any:
    import openvino.opset13 as ops

    return ops


def _c(v: float) -> Any:
    return _ops().constant(np.float32(v))


def _f16(x: Any) -> Any:
    """f32 Output rounded to f16 values (ggml's ``GGML_CPU_FP32_TO_FP16``: round to nearest even)."""
    from ovkit.ops.rounding import rounded

    return rounded(x, "f16")


@dataclass(frozen=True, slots=True)
class QuantizedActivations:
    """Activations after ggml's ``quantize_row_q8_*`` and decoded back: ``values`` (f32, the input's
    shape) and, for q8_1, per block ``sums`` = d·Σq exactly and ``stored_sums`` = ggml's f16 ``s``."""

    values: Any
    sums: Any = None  # [..., k/32]
    stored_sums: Any = None  # [..., k/32]


def _blocks(x: Any, block: int) -> Any:
    return _ops().reshape(x, _ops().constant(np.array([-1, block], np.int64)), False)


def _q8_0(x: Any, with_sums: bool) -> QuantizedActivations:
    """x86 ``quantize_row_q8_0`` / ``quantize_row_q8_1``: per 32, amax = max|x|, d = amax/127 stored
    as f16, q = round-half-even(x · (127/amax)) (the AVX kernel's multiplier, not the reference
    C code's 1/d: the two differ in the last bit); q8_1 also stores s = f16(d·Σq) with d in f32."""
    ops = _ops()
    b = _blocks(x, 32)
    axis = ops.constant(np.array([1], np.int64))
    amax = ops.reduce_max(ops.abs(b), axis, True)
    nonzero = ops.not_equal(amax, _c(0.0))
    inv = ops.select(nonzero, quant._ov_div_rn(_c(127.0), amax), _c(0.0))
    q = ops.round(ops.multiply(b, inv), "half_to_even")
    d = quant._ov_div_rn(amax, _c(127.0))
    values = ops.reshape(ops.multiply(q, _f16(d)), ops.shape_of(x), False)
    if not with_sums:
        return QuantizedActivations(values)
    qsum = ops.reduce_sum(q, axis, True)
    sums_shape = ops.concat([_leading(x), ops.constant(np.array([-1], np.int64))], 0)
    sums = ops.reshape(ops.multiply(qsum, _f16(d)), sums_shape, False)
    stored = ops.reshape(_f16(ops.multiply(qsum, d)), sums_shape, False)
    return QuantizedActivations(values, sums, stored)


def _leading(x: Any) -> Any:
    """The shape of ``x`` without its last axis (an i64 Output)."""
    ops = _ops()
    shape = ops.shape_of(x)
    rank = x.get_partial_shape().rank.get_length()
    return ops.gather(shape, ops.constant(np.arange(rank - 1, dtype=np.int64)), ops.constant(np.int64(0)))


def _q8_k(x: Any) -> QuantizedActivations:
    """``quantize_row_q8_K_ref`` (x86 uses it as is): per 256, max = the first value of largest
    magnitude, iscale = -127/max, q = min(127, nearest_int(iscale·x)) (round half to even),
    d = 1/iscale in f32; a zero block stays zero.  (The repacked Q4_K kernels quantize with
    ±127/amax, which gives the same d·q.)"""
    ops = _ops()
    b = _blocks(x, quant.QK_K)
    axis = ops.constant(np.array([1], np.int64))
    mag = ops.abs(b)
    amax = ops.reduce_max(mag, axis, True)
    first = ops.select(
        ops.equal(mag, amax),
        ops.constant(np.arange(quant.QK_K, dtype=np.int64)),
        ops.constant(np.int64(quant.QK_K)),
    )
    signed = ops.gather_elements(b, ops.reduce_min(first, axis, True), 1)
    nonzero = ops.not_equal(amax, _c(0.0))
    iscale = quant._ov_div_rn(_c(-127.0), ops.select(nonzero, signed, _c(1.0)))
    q = ops.minimum(ops.round(ops.multiply(b, iscale), "half_to_even"), _c(127.0))
    d = quant._ov_div_rn(_c(1.0), iscale)
    values = ops.select(nonzero, ops.multiply(q, d), _c(0.0))
    return QuantizedActivations(ops.reshape(values, ops.shape_of(x), False))


def quantize_activations(x: Any, dot_type: str) -> QuantizedActivations:
    """f32 Output ``x`` [..., k] quantized per row to ``dot_type`` blocks as ggml's CPU does."""
    k = x.get_partial_shape()[-1].get_length()
    block = DOT_BLOCK.get(dot_type)
    if block is None:
        raise QuantError(f"dot type {dot_type!r} is not one of {', '.join(DOT_BLOCK)}")
    if k % block:
        raise QuantError(f"rows of {k} activations are not whole {dot_type} blocks of {block}")
    if dot_type == "q8_K":
        return _q8_k(x)
    return _q8_0(x, with_sums=dot_type == "q8_1")


@dataclass(frozen=True)
class GgmlNumericsWeight(QuantizedWeight):
    """A quantized weight whose MUL_MAT follows llama.cpp's CPU numerics (module docstring).

    ``source_type``: the weight's type in the GGUF, which picks the dot type (Q5_0 is repacked to
    Q8_0 blocks by ovkit; both quantize activations to q8_0, as ggml's table says).
    """

    source_type: str = ""

    @property
    def dot_type(self) -> str:
        return vec_dot_type(self.source_type or self.qtype)

    @cached_property
    def digest(self) -> str:
        """The weight's digest marked "ggml" (a graph with these numerics compiles on its own)."""
        return f"{QuantizedWeight.digest.func(self)}|ggml:{self.dot_type}"  # type: ignore[attr-defined]

    def ov_mul_mat(self, b: Any) -> Any:
        """``b @ W.T`` with ``b`` quantized to the dot type first; f32 Output [..., n, rows]."""
        ops = _ops()
        act = quantize_activations(b, self.dot_type)
        out = QuantizedWeight.ov_mul_mat(self, act.values.output(0))
        bias = self.decoded.bias
        if act.sums is None or bias is None or self.requant is not RequantTarget.NATIVE:
            return out
        # ggml adds m_w · f16(d_a·Σq_a); the product above holds m_w · d_a·Σq_a exactly
        delta = ops.subtract(act.stored_sums, act.sums)
        return ops.add(out, ops.matmul(delta, ops.constant(bias), False, True)).output(0)

    def expert_activations(self, b: Any) -> Any:
        """MUL_MAT_ID's activations quantized to the experts' dot type.  (The q8_1 min term's f16
        ``s`` is not reproduced here: the experts' product is one MatMul.)"""
        return quantize_activations(b, self.dot_type).values

    def __reduce__(self) -> tuple[Any, ...]:
        return (with_ggml_numerics, (QuantizedWeight.__reduce__(self)[1], self.source_type))


def with_ggml_numerics(weight: Any, source_type: str = "") -> GgmlNumericsWeight:
    """``weight`` (a :class:`QuantizedWeight` or its constructor arguments) with ggml's numerics."""
    if isinstance(weight, tuple):
        weight = QuantizedWeight(*weight)
    return GgmlNumericsWeight(
        weight.qtype, weight.shape, weight.raw, weight.name, weight.form, weight.requant, source_type
    )
