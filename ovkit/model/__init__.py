"""GGUF models as llama.cpp builds them: the graph, a runner, placement, memory and profiles."""

from __future__ import annotations

from ovkit.model.arch import ARCHS, ArchSpec, HParams, ModelError
from ovkit.model.program import GraphShape, decoder_layer, decoder_program
from ovkit.model.runner import Generation, Model
from ovkit.model.synthetic import WEIGHT_TYPES, synthetic

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
