"""The ``precision=`` choices of a model run (``Model``, ``run-model``, ``bench``), in one place."""

from __future__ import annotations

__all__ = ["PRECISIONS"]

#: ``precision=`` -> the OpenVINO inference precision compiled with: "exact" is f32 (the default,
#: for comparisons); "device" is the device's default, as the real backend compiles (bf16 on CPUs
#: with AMX or avx512_bf16); "ggml" is f32 with llama.cpp CPU's matmul numerics: activations meeting
#: a quantized weight are quantized to its q8 dot type first (ovkit.ops.ggml_numerics).
PRECISIONS: dict[str, str | None] = {"exact": "f32", "device": None, "ggml": "f32"}
