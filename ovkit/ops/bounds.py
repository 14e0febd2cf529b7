"""Index operands checked against the table they index, before any value reaches OpenVINO.

ggml asserts (or reads out of bounds) when a row id, an expert id or a bias row is outside its
table; OpenVINO's Gather/Scatter return zeros or uninitialised memory instead. So ovkit checks
the values it can see: a constant index at build time, an input index on the host when the graph
is computed. Index tensors computed inside the graph (argsort → get_rows) are in range by
construction and not checked.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ovkit.ir import VIEW_OPS, GraphError, Op, ggml_index_map

if TYPE_CHECKING:
    from ovkit.ir import Tensor


@dataclass(frozen=True, slots=True)
class IndexOperand:
    """Which source of an op holds indices, which source they index, along which ggml dim."""

    index_src: int
    table_src: int  #: -1: the node's own result
    table_dim: int
    what: str  #: what one index selects, for the message ("rows", "experts")


#: op → its index operand (data, not branches).
INDEX_OPERANDS: dict[Op, IndexOperand] = {
    Op.GET_ROWS: IndexOperand(1, 0, 1, "rows"),
    Op.SET_ROWS: IndexOperand(2, 0, 1, "rows"),
    Op.MUL_MAT_ID: IndexOperand(2, 0, 2, "experts"),
    Op.ADD_ID: IndexOperand(2, 1, 1, "bias rows"),
    Op.GET_ROWS_BACK: IndexOperand(1, -1, 1, "rows"),  # -1: the table is the result itself
}


class IndexRangeError(GraphError):
    """An index operand holds a value outside the table it indexes."""


def check_values(node: Tensor, values: np.ndarray, source: str) -> None:
    """Raise :class:`IndexRangeError` unless every index of ``node``'s index operand, read from
    ``values`` (the memory of its base leaf), is inside the table."""
    spec = INDEX_OPERANDS[node.op]
    idx_t = node.srcs[spec.index_src]
    table = node if spec.table_src < 0 else node.srcs[spec.table_src]
    assert idx_t is not None and table is not None
    bound = table.ne[spec.table_dim]
    flat = np.asarray(values).reshape(-1)
    if idx_t.view_src is not None:  # a view of a leaf: its elements gathered (a plain leaf is read as is)
        flat = flat[ggml_index_map(idx_t)].reshape(-1)
    bad = np.flatnonzero((flat < 0) | (flat >= bound))
    if bad.size:
        i = int(bad[0])
        raise IndexRangeError(
            f"{node.describe()}: {source} index {int(flat[i])} (element {i} of {idx_t.describe()}) is out of "
            f"range: the table has {bound} {spec.what} (expected 0 <= index < {bound}); "
            f"{bad.size} of {flat.size} indices are outside"
        )


def _index_base(node: Tensor) -> Tensor | None:
    spec = INDEX_OPERANDS.get(node.op)
    if spec is None:
        return None
    idx_t = node.srcs[spec.index_src]
    if idx_t is None or not (idx_t.is_leaf or idx_t.op in VIEW_OPS):
        return None
    base = idx_t.base
    return base if base.is_leaf else None


def check_constant(node: Tensor) -> None:
    """At build time: a constant index operand (or a view of one) must be inside its table."""
    base = _index_base(node)
    if base is not None and not base.is_input and isinstance(base.value, np.ndarray):
        check_values(node, base.value, "constant")


def fed_index_nodes(nodes: Sequence[Tensor]) -> tuple[Tensor, ...]:
    """The nodes whose index operand is a graph input (or a view of one): what
    :func:`check_feed` looks at, found once per graph walk rather than on every compute."""
    return tuple(n for n in nodes if (b := _index_base(n)) is not None and b.is_input)


def check_feed(nodes: Sequence[Tensor], feed: Mapping[str, Any]) -> None:
    """At compute time, on the host: every index operand fed as an input must be inside its table."""
    for node in nodes:
        base = _index_base(node)
        if base is not None and base.is_input and base.name in feed:
            check_values(node, np.asarray(feed[base.name]), f"input {base.name!r}")
