"""Node by node: ovkit, llama.cpp's CPU build and the real backend on the same fed tokens.

Every side evaluates one batch from an empty cache and captures each named node (llama.cpp's in a
child whose ``cb_eval`` callback reads them); nodes match by (name, occurrence) and compare flat in
ggml's order.  A failing real backend's node becomes a single-op case for ``ovkit test-ops``.
``records``: the findings; ``llama_side``: the child; ``diff``: ovkit's side and the comparison.
"""

from ovkit.model.compare.cli import add_cli_args, cli
from ovkit.model.compare.diff import compare_model, run_ovkit
from ovkit.model.compare.llama_side import Capture, backend_precision, run_llama
from ovkit.model.compare.records import (
    AGAINST,
    DEFAULT_THRESHOLD,
    F32_RERUN,
    BackendFailure,
    CompareError,
    ModelComparison,
    NodeDiff,
)

__all__ = [
    "AGAINST",
    "DEFAULT_THRESHOLD",
    "F32_RERUN",
    "BackendFailure",
    "Capture",
    "CompareError",
    "ModelComparison",
    "NodeDiff",
    "add_cli_args",
    "backend_precision",
    "cli",
    "compare_model",
    "run_llama",
    "run_ovkit",
]
