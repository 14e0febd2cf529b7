"""One OpenVINO model for every shape: the decoder's graph with ``n_tokens`` and ``n_kv`` dynamic.

ovkit's translation writes every shape as a number (ggml graphs are static), so a model built for
``n_tokens = 5`` only runs 5 tokens.  ``symbolic_model`` translates the same graph at two values of
each symbol (``n_tokens``, ``n_kv``: every corner, op for op the same model, only the numbers that
follow the symbols differ) and rewrites the first build so those numbers are computed at run time
from the inputs' lengths: each integer constant that differs becomes ``c + k·t + l·kv + m·t·kv``
(solved exactly from the corners: a reshape's ``[1, 2, 2t, 64]``, a flattened ``[64t]``), each
constant whose shape follows a symbol (SET_ROWS's batch coordinates, all one value) a broadcast
to that shape, and the Parameters get ``-1`` on the axes that differ.  One compiled model then
serves every prefill chunk and decode step, so memory does not grow with the number of shape
buckets (docs/model.md, "Memory").  Anything else that differs (a value that is not of that form,
a float constant's values) raises :class:`DynamicShapeError`, and the runner keeps static buckets.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ovkit.errors import OvkitError

SMALL = 4096  # constants up to this many elements are compared by value, larger ones by digest


class DynamicShapeError(OvkitError, ValueError):
    """The builds differ in a way ``symbolic_model`` cannot express as a function of the symbols."""


@dataclass(frozen=True, slots=True)
class Symbol:
    """A dimension made dynamic: its value at run time is the length of axis ``axis`` of the
    Parameter ``source``; the graph is built at both values of ``at``."""

    name: str
    source: str
    axis: int
    at: tuple[int, int]


def _signature(model: Any) -> list[tuple[str, Any, Any]]:
    """Per op in order: type, shape (a Parameter's partial shape, a Constant's shape) and a
    Constant's values (small ones; a digest of large ones)."""
    out: list[tuple[str, Any, Any]] = []
    for node in model.get_ordered_ops():
        kind = node.get_type_name()
        if kind == "Parameter":
            out.append((kind, node.get_partial_shape(), None))
        elif kind == "Constant":
            data = node.get_data()
            value = (
                data.copy()
                if data.size <= SMALL
                else hashlib.blake2b(data.tobytes(), digest_size=16).digest()
            )
            out.append((kind, tuple(node.get_output_shape(0)), value))
        else:
            out.append((kind, None, None))
    return out


def _solve(values: list[np.ndarray], corners: np.ndarray, what: str) -> np.ndarray:
    """Integer coefficients, one row per product of symbols (the basis of ``corners``), that give
    ``values`` (one array per corner) exactly."""
    v = np.stack([np.asarray(x, np.int64).reshape(-1) for x in values])  # (corners, elements)
    coef = np.rint(np.linalg.solve(corners.astype(np.float64), v.astype(np.float64))).astype(np.int64)
    if not np.array_equal(corners @ coef, v):
        raise DynamicShapeError(
            f"{what}: {[x.tolist() for x in values]} are not a product form of the symbols"
        )
    return coef.reshape((len(corners), *np.shape(values[0])))


def symbolic_model(build: Callable[[Mapping[str, int]], Any], symbols: Sequence[Symbol]) -> Any:
    """The model ``build({symbol: value})`` returns, built at the first value of every symbol and
    rewritten so each symbol is read from its input at run time (the module docstring).  Other
    corners are built one at a time and only their small constants are kept."""
    import openvino as ov
    import openvino.opset16 as ops

    names = [s.name for s in symbols]
    points = list(itertools.product(*(s.at for s in symbols)))  # every corner; the first is kept
    for s in symbols:
        if s.at[0] == s.at[1]:
            raise ValueError(f"symbol {s.name}: two different values are needed, got {s.at}")
    subsets = [c for r in range(len(symbols) + 1) for c in itertools.combinations(range(len(symbols)), r)]
    corners = np.array([[int(np.prod([p[i] for i in sub])) for sub in subsets] for p in points], np.int64)
    model = build(dict(zip(names, points[0], strict=True)))
    first = model.get_ordered_ops()
    sigs = [_signature(model)]
    for p in points[1:]:
        sigs.append(_signature(build(dict(zip(names, p, strict=True)))))
        if len(sigs[-1]) != len(first):
            raise DynamicShapeError(f"the builds at {points[0]} and {p} differ in size")
    params = {prm.get_friendly_name(): prm for prm in model.get_parameters()}
    value_of = []
    for s in symbols:
        if s.source not in params:
            raise ValueError(
                f"symbol {s.name}: {s.source!r} is not a Parameter (Parameters: {sorted(params)})"
            )
        shape = ops.shape_of(params[s.source], ov.Type.i64)
        value_of.append(ops.gather(shape, np.int64(s.axis), np.int64(0)))  # a scalar

    def expr(coef: np.ndarray, et: Any) -> Any:
        total = None
        for sub, k in zip(subsets, coef, strict=True):
            if not np.any(k):
                continue
            term: Any = ops.constant(np.ascontiguousarray(k))
            for i in sub:
                term = ops.multiply(term, value_of[i])
            total = term if total is None else ops.add(total, term)
        assert total is not None  # the corners differ, so some coefficient is not zero
        return total if et == ov.Type.i64 else ops.convert(total, et)

    new_shapes: dict[Any, Any] = {}
    for i, node in enumerate(first):
        kinds = {sig[i][0] for sig in sigs}
        if len(kinds) > 1:
            raise DynamicShapeError(f"op {node.get_friendly_name()}: {sorted(kinds)} in the builds")
        kind, shape0, value0 = sigs[0][i]
        if kind == "Parameter":
            shapes = [sig[i][1] for sig in sigs]
            if any(sh != shape0 for sh in shapes):
                dims = [
                    -1 if len({str(sh[d]) for sh in shapes}) > 1 else shape0[d].get_length()
                    for d in range(len(shape0))
                ]
                new_shapes[node] = ov.PartialShape(dims)
            continue
        if kind != "Constant":
            continue
        shapes, values = [sig[i][1] for sig in sigs], [sig[i][2] for sig in sigs]
        what = f"constant {node.get_friendly_name()}"
        et = node.get_element_type()
        if all(sh == shape0 for sh in shapes):
            if all(np.array_equal(v, value0) if isinstance(v, np.ndarray) else v == value0 for v in values):
                continue
            if not et.is_integral() or not isinstance(value0, np.ndarray):
                raise DynamicShapeError(f"{what}: its values depend on {', '.join(names)}")
            new = expr(_solve(values, corners, what), et)
        else:
            if not all(isinstance(v, np.ndarray) and v.size for v in values):
                raise DynamicShapeError(f"{what}: its shape {shapes} follows the symbols (a large constant)")
            flat = [np.asarray(v).reshape(-1) for v in values]
            uniform = all(np.all(v == flat[0][0]) for v in flat)
            if not uniform or len({len(sh) for sh in shapes}) > 1:
                raise DynamicShapeError(f"{what}: its shape {shapes} follows the symbols, its values vary")
            sizes = _solve([np.array(sh, np.int64) for sh in shapes], corners, f"shape of {what}")
            new = ops.broadcast(ops.constant(flat[0][:1].reshape(())), expr(sizes, ov.Type.i64))
        for target in list(node.output(0).get_target_inputs()):
            target.replace_source_output(new.output(0))
    for param, shape in new_shapes.items():
        param.set_partial_shape(shape)
    try:
        model.validate_nodes_and_infer_types()
    except RuntimeError as exc:
        raise DynamicShapeError(f"the rewritten model does not validate: {str(exc).splitlines()[0]}") from exc
    return model
