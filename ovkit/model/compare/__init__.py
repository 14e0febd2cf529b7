"""Node by node: ovkit, llama.cpp's CPU build and the real backend on the same fed tokens.

:func:`compare_model` evaluates one batch (the prompt, plus ``n`` greedy continuations of
llama.cpp's CPU build) from an empty cache on every side and captures each named node's output.
llama.cpp's sides run in a child process (:mod:`ovkit.child`) whose ``cb_eval`` scheduler callback
asks for the wanted nodes and reads them with ``ggml_backend_tensor_get``; a node is asked for
only when the node after it is not a view (the real backend cannot start a graph piece at a
reshape of the previous piece's output).  ovkit runs its graph once with every named node as an
extra output.  Nodes are matched by (name, occurrence) among computed f32 nodes and compared flat
in ggml's memory order.  When the real backend fails, :class:`BackendFailure` rebuilds the node
that throws as a single-op case for ``ovkit test-ops --upstream --cases FILE``.

``records`` holds what it finds, ``llama_side`` the child (``python -m ovkit.model.compare
REQUEST.json``), ``diff`` ovkit's side and the comparison, ``cli`` the command.
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
