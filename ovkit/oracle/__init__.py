"""Real-ggml oracle: any op on ggml's own CPU backend (ggml-python, loaded on first use by
:mod:`.loader`; graphs and programs run by :mod:`.graphs`), so ovkit is compared with ggml itself."""

from __future__ import annotations

from ovkit.dtypes import QUANT_TYPES, bf16_round
from ovkit.nmse import compare, nmse, same_ne
from ovkit.oracle.graphs import (
    DEFAULT_N_THREADS,
    GgmlBuilder,
    GgmlTensor,
    ggml_benchmark_program,
    ggml_call,
    ggml_compute,
    ggml_dot_f16_in_f16,
    ggml_mul_mat_quant,
    ggml_program,
    program_session,
)
from ovkit.oracle.loader import (
    GgmlUnavailableError,
    QuantArray,
    Typed,
    as_bf16,
    block_size,
    dequantize,
    ggml_available,
    ggml_module,
    quantize,
    quantize_blocks,
    type_id,
    type_size,
)

__all__ = [
    "DEFAULT_N_THREADS",
    "QUANT_TYPES",
    "GgmlBuilder",
    "GgmlTensor",
    "GgmlUnavailableError",
    "QuantArray",
    "Typed",
    "as_bf16",
    "bf16_round",
    "block_size",
    "compare",
    "dequantize",
    "ggml_available",
    "ggml_benchmark_program",
    "ggml_call",
    "ggml_compute",
    "ggml_dot_f16_in_f16",
    "ggml_module",
    "ggml_mul_mat_quant",
    "ggml_program",
    "nmse",
    "program_session",
    "quantize",
    "quantize_blocks",
    "same_ne",
    "type_id",
    "type_size",
]
