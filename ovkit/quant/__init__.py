"""Quantized ggml weights as OpenVINO constants: the types (:mod:`.specs`), block decoding
(:mod:`.decode`), the weight and its decompression forms (:mod:`.weight`), requantization
(:mod:`.requant`) and quantized writes (:mod:`.round_trip`); ``docs/quant.md`` describes them.
"""

from __future__ import annotations

from ovkit.dtypes import QUANT_TYPES
from ovkit.quant.decode import REPACKS, decode_blocks, reference_dequantize, repack_blocks
from ovkit.quant.requant import (
    REQUANT_CONTAINER,
    REQUANT_RULES,
    RequantDecision,
    RequantTarget,
    requant_bytes,
    requant_decision,
    requant_table,
    requant_type,
    requantize,
)
from ovkit.quant.round_trip import ROUND_TRIPS
from ovkit.quant.specs import (
    FORMS,
    HOST_TYPES,
    KNOWN_TYPES,
    QK_K,
    QUANT_SPECS,
    Form,
    QuantError,
    quant_spec,
    row_bytes,
)
from ovkit.quant.weight import (
    QuantizedWeight,
    compile_hints,
    from_blocks,
    quantize,
)

__all__ = [
    "FORMS",
    "Form",
    "HOST_TYPES",
    "KNOWN_TYPES",
    "QK_K",
    "QUANT_SPECS",
    "QUANT_TYPES",
    "QuantError",
    "QuantizedWeight",
    "REPACKS",
    "REQUANT_CONTAINER",
    "REQUANT_RULES",
    "ROUND_TRIPS",
    "RequantDecision",
    "RequantTarget",
    "compile_hints",
    "decode_blocks",
    "from_blocks",
    "quant_spec",
    "quantize",
    "reference_dequantize",
    "repack_blocks",
    "requant_bytes",
    "requant_decision",
    "requant_table",
    "requant_type",
    "requantize",
    "row_bytes",
]
