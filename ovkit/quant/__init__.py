"""Quantized ggml weights as OpenVINO constants: the types (:mod:`.specs`), block decoding
(:mod:`.decode`), the weight and its decompression forms (:mod:`.weight`), requantization
(:mod:`.requant`) and writing quantized tensors (:mod:`.round_trip`).

A :class:`QuantizedWeight` wraps the raw ggml blocks of a weight.  Upstream's types (Q4_0, Q4_1,
Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, MXFP4) are decoded once into integer weights ``q``, per-group scales
and (for the asymmetric types) per-group biases, so that ``w = scale * q + bias`` reproduces
ggml's ``to_float`` exactly (upstream's extraction yields the same integers and scales).  The
types upstream refuses (:data:`HOST_TYPES`: Q5_0, Q2_K, Q3_K, the IQ and TQ types, NVFP4, Q1_0)
are decoded on the host to ggml's f32 values and become a plain f32 constant (f16 where every
value is exact in f16).

Decompression forms (docs/quant.md has the measurements):

- ``"upstream"``: upstream's subgraph — ``Constant(int) → Convert(f16) → [Subtract(zp)] →
  Multiply(f16 scale) → Reshape → Convert(f32)`` with a *rounded* integer zero point for the
  asymmetric types (u4/u8), f8e8m0 scales for MXFP4.  ``"upstream_bias"``: the same with
  upstream's exact f16 zero point (its test-graph path).
- ``"fast"`` (default): a form the OpenVINO CPU plugin keeps compressed in a ``FullyConnected``
  *and* that is exact.  Every type becomes a *symmetric* signed container (i4 for 4-bit, i8 for
  5/6/8-bit and MXFP4's exact integers) with ``Convert → Multiply``; the asymmetric types store
  ``q - 8`` / ``q - 16`` and their bias moves out of the weight:
  ``x @ (s*q + b)^T = x @ (s*(q-o))^T + groupsum(x) @ (b + s*o)^T`` — a second MatMul over k/32
  columns.  Hostile blocks (docs/quant.md): a weight with NaN/inf values is the f32 constant of
  ggml's values, and MXFP4's subnormal scales (exponent bytes 0, 1) go in a second i8 weight whose
  product is scaled down at run time.

``mul_mat`` uses :meth:`QuantizedWeight.ov_mul_mat`; ``get_rows`` and everything else use
:meth:`QuantizedWeight.to_ov_node` (f32 ``[rows, k]``).  Upstream's requantization policy is the
table :data:`REQUANT_RULES`, queried by :func:`requant_type`.  Writing a quantized tensor (CPY,
SET_ROWS) reads back ggml's ``to_float(from_float(x))``: :func:`round_trip` (numpy) and
:func:`ov_round_trip` (OpenVINO) for the types of :data:`ROUND_TRIPS`.
"""

from __future__ import annotations

from ovkit.dtypes import QUANT_TYPES, WRITABLE_QUANT_TYPES
from ovkit.quant.decode import REPACKS, Decoded, decode_blocks, reference_dequantize, repack_blocks
from ovkit.quant.requant import (
    REQUANT_CONTAINER,
    REQUANT_GROUPED,
    REQUANT_RULES,
    RequantDecision,
    RequantRule,
    RequantTarget,
    requant_bytes,
    requant_decision,
    requant_refusal,
    requant_table,
    requant_type,
    requantize,
)
from ovkit.quant.round_trip import ROUND_TRIPS, RoundTrip, ov_div_rn, ov_mul_rn, ov_round_trip, round_trip
from ovkit.quant.specs import (
    FORMS,
    HOST_SPECS,
    HOST_TYPES,
    KNOWN_TYPES,
    QK_K,
    QUANT_SPECS,
    Form,
    QuantError,
    QuantSpec,
    checked_shape,
    n_rows,
    quant_spec,
    row_bytes,
)
from ovkit.quant.weight import (
    NO_DYNQ_CONTAINERS,
    TINY_SHIFT,
    QuantizedWeight,
    compile_hints,
    from_blocks,
    packed_constant,
    quantize,
)

__all__ = [
    "Decoded",
    "FORMS",
    "Form",
    "HOST_SPECS",
    "HOST_TYPES",
    "KNOWN_TYPES",
    "NO_DYNQ_CONTAINERS",
    "QK_K",
    "QUANT_SPECS",
    "QUANT_TYPES",
    "QuantError",
    "QuantSpec",
    "QuantizedWeight",
    "REPACKS",
    "REQUANT_CONTAINER",
    "REQUANT_GROUPED",
    "REQUANT_RULES",
    "ROUND_TRIPS",
    "RequantDecision",
    "RequantRule",
    "RequantTarget",
    "RoundTrip",
    "TINY_SHIFT",
    "WRITABLE_QUANT_TYPES",
    "checked_shape",
    "compile_hints",
    "decode_blocks",
    "from_blocks",
    "n_rows",
    "ov_div_rn",
    "ov_mul_rn",
    "ov_round_trip",
    "packed_constant",
    "quant_spec",
    "quantize",
    "reference_dequantize",
    "repack_blocks",
    "requant_bytes",
    "requant_decision",
    "requant_refusal",
    "requant_table",
    "requant_type",
    "requantize",
    "round_trip",
    "row_bytes",
]
