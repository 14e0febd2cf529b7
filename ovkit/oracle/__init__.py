"""Real-ggml oracle: compute any catalogue op with ggml's own CPU backend (via ggml-python).

Why: ovkit's ops must reproduce ggml's numbers.  The oracle runs the very same builder functions
(``ggml_add``, ``ggml_rope_ext``, ...) on ggml's CPU backend from numpy inputs, so tests and
benchmarks compare ovkit's OpenVINO results against ggml itself, judged as test-backend-ops
judges (:mod:`ovkit.nmse`).

- :mod:`.loader`: ggml-python loaded on first use (:func:`ggml_available` asks, nothing loads at
  import), ggml's types, bf16 values (:class:`Typed`) and quantized blocks (:class:`QuantArray`,
  :func:`quantize`, :func:`dequantize`).
- :mod:`.graphs`: :func:`ggml_call` (one builder by name), :func:`ggml_compute` (any ggml graph),
  :func:`ggml_program` (a program written with ``Graph``'s method names, on :class:`GgmlBuilder`),
  :func:`program_session` (built, not run: ``supports_op`` first) and the benchmarks.

Inputs are numpy arrays (f32, f16, i32, i64; float64 is converted to f32), :class:`Typed`
(e.g. :func:`as_bf16`) or :class:`QuantArray` (raw ggml blocks from :func:`quantize`).
"""

from __future__ import annotations

from ovkit.dtypes import QUANT_TYPES, bf16_round
from ovkit.nmse import compare, nmse, same_ne
from ovkit.oracle.graphs import (
    DEFAULT_N_THREADS,
    GgmlBuilder,
    GgmlTensor,
    ggml_benchmark,
    ggml_benchmark_program,
    ggml_call,
    ggml_compute,
    ggml_dot_f16_in_f16,
    ggml_get_rows_quant,
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
    load_ggml,
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
    "ggml_benchmark",
    "ggml_benchmark_program",
    "ggml_call",
    "ggml_compute",
    "ggml_dot_f16_in_f16",
    "ggml_get_rows_quant",
    "ggml_module",
    "ggml_mul_mat_quant",
    "ggml_program",
    "load_ggml",
    "nmse",
    "program_session",
    "quantize",
    "quantize_blocks",
    "same_ne",
    "type_id",
    "type_size",
]
