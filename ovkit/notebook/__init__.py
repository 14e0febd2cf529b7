"""Helpers for the walkthrough notebooks: which optional parts are here (:mod:`.probes`), formatted
tables and labelled charts (:mod:`.views`) and the small experiments the walkthroughs run
(:mod:`.experiments`).  ``from ovkit import notebook`` gives them all."""

from __future__ import annotations

from ovkit.memory import format_bytes
from ovkit.memory import unit_for as byte_scale
from ovkit.notebook.experiments import (
    layer_matmul_table,
    perf_cases_within,
    quantized_matmul_table,
    supports_op_matrix,
    tiny_llama_tensors,
    weight_release_demo,
)
from ovkit.notebook.probes import can_quantize, optional, present, quantizable
from ovkit.notebook.views import (
    OP_FAMILIES,
    Collapsed,
    MemorySteps,
    NodeProfile,
    buffer_types_report,
    coverage_frame,
    coverage_heatmap,
    fit_table,
    memory_chart,
    memory_report,
    memory_rules_report,
    op_family,
    perf_chart,
    perf_table,
    requant_chart,
)
from ovkit.report import Report, format_duration

__all__ = [
    "Collapsed",
    "MemorySteps",
    "NodeProfile",
    "OP_FAMILIES",
    "Report",
    "buffer_types_report",
    "byte_scale",
    "can_quantize",
    "coverage_frame",
    "coverage_heatmap",
    "fit_table",
    "format_bytes",
    "format_duration",
    "layer_matmul_table",
    "memory_chart",
    "memory_report",
    "memory_rules_report",
    "op_family",
    "optional",
    "perf_cases_within",
    "perf_chart",
    "perf_table",
    "present",
    "quantizable",
    "quantized_matmul_table",
    "requant_chart",
    "supports_op_matrix",
    "tiny_llama_tensors",
    "weight_release_demo",
]
