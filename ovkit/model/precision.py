"""The ``precision=`` choices of a model run (``Model``, ``run-model``, ``bench``), in one place."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ovkit.quant import Form

__all__ = ["PRECISIONS", "WEIGHT_FORMS"]

#: ``precision=`` -> the OpenVINO inference precision compiled with: "exact" is f32 (the default,
#: for comparisons); "device" is the device's default, as the real backend compiles (bf16 on CPUs
#: with AMX or avx512_bf16); "ggml" is f32 with llama.cpp CPU's matmul numerics: activations meeting
#: a quantized weight are quantized to its q8 dot type first (ovkit.ops.ggml_numerics).
PRECISIONS: dict[str, str | None] = {"exact": "f32", "device": None, "ggml": "f32"}

#: ``precision=`` -> the weights' decompression form (``ovkit.quant.Form``): "exact" and "ggml"
#: keep ggml's values bit for bit; "device" takes the device's one-node form for the asymmetric
#: types (Q4_1, Q5_1, the K-quants with mins: an f32 zero point, ggml's values to f32 rounding),
#: the form the CPU plugin's compressed FullyConnected runs fastest.
WEIGHT_FORMS: dict[str, Form] = {"exact": "fast", "device": "zero_point", "ggml": "fast"}
