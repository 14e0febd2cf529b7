"""GGUF models as llama.cpp builds them: the graph, a runner, placement, memory and profiles."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ovkit.model.arch import ARCHS, ArchSpec, HParams, ModelError
from ovkit.model.program import GraphShape, decoder_layer, decoder_program
from ovkit.model.synthetic import WEIGHT_TYPES, synthetic

if TYPE_CHECKING:
    from ovkit.model.runner import Generation, Model


def __getattr__(name: str) -> Any:
    """The runner (and the engine under it) loads on first use: the header-only tools
    (``ovkit.model.header``, ``ovkit check``) never need it."""
    if name in ("Generation", "Model"):
        return getattr(importlib.import_module("ovkit.model.runner"), name)
    raise AttributeError(f"module 'ovkit.model' has no attribute {name!r}")


__all__ = [
    "ARCHS",
    "ArchSpec",
    "decoder_layer",
    "decoder_program",
    "Generation",
    "GraphShape",
    "HParams",
    "Model",
    "ModelError",
    "synthetic",
    "WEIGHT_TYPES",
]
