"""Helpers for the op tests: run a graph's OpenVINO translation without the support policy."""

from __future__ import annotations

from typing import Any

import numpy as np

from ovkit.engine import GRAPH_RUN_CONFIG, run_model
from ovkit.ir import from_model_output
from ovkit.ops.feed import prepare_feed
from ovkit.ops.translate import model_inputs


def run_translation(g: Any, out: Any, data: dict[str, np.ndarray], device: str = "CPU") -> np.ndarray:
    """``out``'s OpenVINO translation compiled and run on ``device`` directly (policy bypassed)."""
    model, names = g.to_model([out])
    feed = prepare_feed(g, [out], data)
    return from_model_output(
        out, run_model(model, model_inputs(names, feed), device, run_config=GRAPH_RUN_CONFIG)[0]
    )
