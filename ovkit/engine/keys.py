"""What identifies a compiled model: the cache key, and the structure digests of a plain
``openvino.Model`` and of a graph's outputs."""

from __future__ import annotations

import hashlib
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ovkit.ir import GraphIR, Tensor


@dataclass(frozen=True, slots=True)
class CacheKey:
    """Everything that makes two compiled models different."""

    structure: Hashable
    device: str
    core_id: int
    properties: tuple[tuple[str, str], ...]
    stateful: bool
    states: tuple[tuple[str, str], ...]


def model_structure_key(model: Any) -> str:
    """A digest of an ``openvino.Model``'s structure: op types, wiring, types, shapes, attributes,
    constant bytes, Parameter and Result names.  Generated friendly names are ignored."""
    h = hashlib.sha256()
    index: dict[str, int] = {}  # friendly name -> position (wrappers are fresh objects per call)
    for i, op in enumerate(model.get_ordered_ops()):
        index[op.get_friendly_name()] = i
        kind = op.get_type_name()
        h.update(f"|{i}:{kind}:{op.get_type_info().version_id}".encode())
        for inp in op.inputs():
            src = inp.get_source_output()
            h.update(f"<{index.get(src.get_node().get_friendly_name(), -1)}.{src.get_index()}".encode())
        for out in op.outputs():
            h.update(f">{out.get_element_type().to_string()}{out.get_partial_shape()}".encode())
        try:
            attrs = op.get_attributes()
        except Exception:
            attrs = {}
        h.update(repr(sorted((k, repr(v)) for k, v in attrs.items())).encode())
        if kind == "Parameter":
            h.update(op.get_friendly_name().encode())
        elif kind == "Result":
            h.update(repr(sorted(op.output(0).get_names())).encode())
        elif kind == "Constant":
            h.update(np.ascontiguousarray(op.get_data()).tobytes())
    return h.hexdigest()


#: Marks a structure key that holds a value known by its identity only (``_value_digest``): it is
#: valid in this process, never on disk, where another process's object may have the same id.
PROCESS_LOCAL = "process-local:"


def _value_digest(value: Any) -> str:
    """Bytes of a constant (numpy array or quantized weight) for the structure key."""
    if value is None:
        return ""
    if isinstance(value, np.ndarray):
        return hashlib.sha256(np.ascontiguousarray(value).tobytes()).hexdigest()
    digest = getattr(value, "digest", None)  # quantized weights: blocks + type + shape + form
    if isinstance(digest, str):
        return digest
    return f"{PROCESS_LOCAL}{id(value)}"  # another weight object: equal only to itself


def graph_structure_key(graph: GraphIR, outputs: Sequence[Tensor]) -> str:
    """A digest of what ``outputs`` compute: per node op, sub-op, ne, nb, dtype, view offset,
    params, wiring, input names and constant bytes (generated ids are not part of it)."""
    nodes = graph.topo(list(outputs))
    pos = {t.id: i for i, t in enumerate(nodes)}
    h = hashlib.sha256()
    local = False
    for t in nodes:
        srcs = tuple(-1 if s is None else pos[s.id] for s in t.srcs)
        view, after = (-1 if d is None else pos[d.id] for d in (t.view_src, t.after))
        params = sorted((k, repr(v)) for k, v in (t.params or {}).items())
        name = t.name if t.is_input else ""
        edges = (srcs, view, after)
        h.update(
            repr((t.op, t.sub_op, t.ne, t.nb, t.dtype, t.view_offs, params, edges, t.is_input, name)).encode()
        )
        if t.value is not None:
            digest = _value_digest(t.value)
            local |= digest.startswith(PROCESS_LOCAL)
            h.update(digest.encode())
    h.update(repr([pos[o.id] for o in outputs]).encode())
    return PROCESS_LOCAL + h.hexdigest() if local else h.hexdigest()
