"""The OpenVINO model the engine compiles: its ports, and what is done to it before compiling
(identical small constants shared, the stateful transformation)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ovkit.dtypes import OPENVINO_NUMPY
from ovkit.engine.errors import EngineError, InputError


# -- ports -------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class PortSpec:
    """One input or output of a compiled model: name, OpenVINO type, shape (-1 = dynamic)."""

    name: str
    index: int
    ov_type: str
    shape: tuple[int, ...]

    @property
    def dtype(self) -> np.dtype[Any]:
        return OPENVINO_NUMPY.get(self.ov_type, np.dtype(np.float32))

    def accepts(self, shape: tuple[int, ...]) -> bool:
        return len(shape) == len(self.shape) and all(
            w < 0 or w == g for w, g in zip(self.shape, shape, strict=True)
        )


def dims(partial_shape: Any) -> tuple[int, ...]:
    """The static lengths of an OpenVINO partial shape, -1 for a dynamic dimension."""
    if partial_shape.rank.is_dynamic:
        raise EngineError(f"inputs of dynamic rank are not supported (got {partial_shape})")
    return tuple(d.get_length() if d.is_static else -1 for d in partial_shape)


def port_name(port: Any, fallback: str) -> str:
    """A port's tensor name (the first in order when it has several), else its node's name."""
    names = port.get_names()
    if names:
        return str(sorted(names)[0]) if len(names) > 1 else str(next(iter(names)))
    try:
        return str(port.get_node().get_friendly_name())
    except Exception:
        return fallback


def port_specs(ports: Sequence[Any], prefix: str) -> tuple[PortSpec, ...]:
    """The specs of a compiled model's inputs (named after their Parameter) or outputs."""
    specs = []
    for i, port in enumerate(ports):
        if prefix == "input":
            name = str(port.get_node().get_friendly_name())
        else:
            name = port_name(port, f"{prefix}{i}")
        specs.append(PortSpec(name, i, port.get_element_type().to_string(), dims(port.get_partial_shape())))
    return tuple(specs)


# -- building the model to compile: shared constants, stateful transformation -----------------
ModelFactory = Callable[[], Any]


#: Constants up to this many bytes are shared by value (shapes, axes, scalars; never weights).
SHARED_CONSTANT_BYTES = 256


def share_constants(model: Any) -> int:
    """Make identical small constants one node each (translators make one per use; compile time
    grows with the node count); returns how many were merged."""
    first: dict[tuple[str, tuple[int, ...], bytes], Any] = {}
    merged = 0
    for op in model.get_ordered_ops():
        if op.get_type_name() != "Constant" or op.get_byte_size() > SHARED_CONSTANT_BYTES:
            continue
        out = op.output(0)
        key = (out.get_element_type().get_type_name(), tuple(out.get_shape()), op.get_data().tobytes())
        kept = first.setdefault(key, op)
        if kept is not op:
            for target in list(out.get_target_inputs()):
                target.replace_source_output(kept.output(0))
            merged += 1
    return merged


def state_specs(model: Any, states: Mapping[str, str]) -> dict[str, PortSpec]:
    """The spec of each state input (its Parameter), checking that its output exists."""
    params = {p.get_friendly_name(): p for p in model.get_parameters()}
    results = {port_name(o, ""): o for o in model.outputs}
    specs = {}
    for inp, out in states.items():
        if inp not in params:
            raise InputError(f"state {inp!r}: no input of that name (inputs: {sorted(params)})")
        if out not in results:
            raise InputError(f"state {inp!r}: no output named {out!r} (outputs: {sorted(results)})")
        p = params[inp]
        specs[inp] = PortSpec(inp, -1, p.get_element_type().to_string(), dims(p.get_partial_shape()))
    return specs


def make_stateful(model: Any, states: Mapping[str, str]) -> dict[str, str]:
    """OpenVINO's MakeStateful, as upstream: each (input, output) pair becomes a variable."""
    from openvino._offline_transformations import apply_make_stateful_transformation

    before = {v.get_info().variable_id for v in model.get_variables()}
    apply_make_stateful_transformation(model, dict(states))
    after = [
        v.get_info().variable_id for v in model.get_variables() if v.get_info().variable_id not in before
    ]
    mapping: dict[str, str] = {}
    for inp, out in states.items():
        guess = inp + out  # MakeStateful names a variable <param><result>
        mapping[inp] = guess if guess in after else next(v for v in after if v.startswith(inp))
    return mapping
