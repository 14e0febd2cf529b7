"""A model's graph from its GGUF header alone: every weight a leaf of its shape and type, no data.

``ovkit check`` builds it for files far larger than memory: :class:`HeaderWeight` stands in for a
weight and refuses to be decoded, and :func:`live_peak_bytes` sizes the compute buffer as ggml's
graph allocator does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ovkit.errors import OvkitError
from ovkit.gguf import GGUFModel
from ovkit.model.arch import HParams
from ovkit.model.program import DecoderOut, GraphShape, decoder_program, input_specs


class HeaderOnlyError(OvkitError, RuntimeError):
    """Something asked for a weight's values while working from a header alone."""


@dataclass(frozen=True, slots=True)
class HeaderWeight:
    """A weight known by its name, numpy-order shape and ggml type only."""

    name: str
    shape: tuple[int, ...]
    dtype: str

    def dequantize(self) -> Any:
        raise HeaderOnlyError(f"{self.name}: built from the GGUF header alone; it has no values")

    to_ov_node = dequantize  # no values to decode either way


def header_graph(gguf: GGUFModel, hp: HParams, shape: GraphShape) -> tuple[Any, DecoderOut]:
    """The decoder graph for ``shape`` over header-only weights and the graph inputs llama.cpp
    gives it (the caches at their full ``n_ctx`` rows)."""
    from ovkit.graph import Graph

    g = Graph()
    leaves: dict[str, Any] = {
        name: g.constant(HeaderWeight(name, info.shape, info.type), name)
        for name, info in gguf.tensors.items()
    }
    for name, (shp, dtype) in input_specs(hp, shape).items():
        leaves[name] = g.input(name, shp, dtype)
    return g, decoder_program(hp, shape)(g, leaves)


def op_nodes(g: Any, out: DecoderOut) -> list[Any]:
    """The graph's op nodes in build order (leaves left out)."""
    return [t for t in g.topo(out.tensors()) if not t.is_leaf]


#: ops whose result shares its source's memory in ggml (views) or writes into it (SET_ROWS into the
#: KV cache): they take no room in the compute buffer
NO_ALLOCATION = frozenset({"VIEW", "RESHAPE", "PERMUTE", "TRANSPOSE", "SET_ROWS"})


def live_peak_bytes(g: Any, out: DecoderOut, inputs: Sequence[str] = ()) -> int:
    """Peak bytes of live intermediates while the graph runs in order, plus the named inputs
    (held for the whole run), as ggml's allocator sizes a compute buffer."""
    nodes = g.topo(out.tensors())
    last_use: dict[int, int] = {}
    for i, t in enumerate(nodes):
        for s in t.srcs:
            if s is not None:
                last_use[s.base.id] = i
    held = sum(t.nbytes for t in nodes if t.is_leaf and t.name in set(inputs))
    live, peak = 0, 0
    sizes: dict[int, int] = {}
    for i, t in enumerate(nodes):
        if not t.is_leaf and t.op not in NO_ALLOCATION:
            sizes[t.id] = t.nbytes
            live += t.nbytes
            peak = max(peak, live)
        for s in t.srcs:
            if s is not None and last_use.get(s.base.id) == i and s.base.id in sizes:
                live -= sizes.pop(s.base.id)
    return held + peak


def graph_inputs(hp: HParams, shape: GraphShape) -> Mapping[str, tuple[tuple[int, ...], str]]:
    """The graph's inputs that live in the compute buffer (tokens, positions, indices, masks):
    every input but the KV caches, which have a buffer of their own."""
    return {k: v for k, v in input_specs(hp, shape).items() if not k.startswith("cache_")}
