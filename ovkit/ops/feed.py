"""Fed arrays: checked against a graph's inputs and converted to the values its interpreters read.

One place for what both paths of ``Graph.compute`` need: the engine (which converts on its fast
path itself and comes here for anything that path cannot take, and for the errors) and the numpy
reference.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ovkit.dtypes import FLOAT_TYPES
from ovkit.ir import GraphError, ne4, round_to

if TYPE_CHECKING:
    from ovkit.ir import GraphIR, Tensor


def input_names(graph: GraphIR) -> frozenset[str]:
    """The names of every input of ``graph`` (needed by the outputs or not)."""
    return frozenset(t.name for t in graph.nodes if t.is_input)


def check_input_names(known: frozenset[str], names: Iterable[str]) -> None:
    """Raise :class:`GraphError` naming the fed ``names`` that are not inputs of the graph."""
    unknown = sorted(set(names) - known)
    if unknown:
        raise GraphError(f"compute: unknown inputs {unknown}; this graph's inputs are {sorted(known)}")


def prepare_feed(
    graph: GraphIR, outputs: Sequence[Tensor], inputs: Mapping[str, Any]
) -> dict[str, np.ndarray]:
    """Check and convert the fed arrays: name → 4-D array (ggml ``ne`` reversed) in the input's
    numpy dtype, for every input ``outputs`` need; a missing, unknown or misshapen input raises
    :class:`GraphError` naming it."""
    check_input_names(input_names(graph), inputs)
    feed: dict[str, np.ndarray] = {}
    for t in graph.inputs_of(outputs):
        if t.name not in inputs:
            raise GraphError(f"compute: input {t.name!r} ({t.dtype}, shape {t.shape}) was not given")
        arr = np.asarray(inputs[t.name])
        try:
            ne = ne4(arr.shape)
        except GraphError as exc:
            raise GraphError(f"compute: input {t.name!r}: {exc}") from None
        if ne != t.ne:
            raise GraphError(f"compute: input {t.name!r}: expected shape {t.shape}, given {arr.shape}")
        if t.dtype in FLOAT_TYPES and arr.dtype.kind not in "fiu":
            raise GraphError(f"compute: input {t.name!r}: expected a numeric array, given dtype {arr.dtype}")
        feed[t.name] = round_to(t.dtype, arr).reshape(tuple(reversed(t.ne)))
    return feed
