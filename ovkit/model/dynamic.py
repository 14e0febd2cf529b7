"""One OpenVINO model for every token count: the decoder's graph with ``n_tokens`` dynamic.

ovkit's translation writes every shape as a number (ggml graphs are static), so a model built for
``n_tokens = a`` only runs ``a`` tokens.  ``symbolic_model`` takes the same graph translated at two
token counts ``a`` and ``b`` (op for op the same model: only the numbers that follow ``n_tokens``
differ) and rewrites the first one so those numbers are computed from the token input's length
at run time: each integer constant that differs becomes ``c + k · n`` (``k`` and ``c`` solved from
the two builds: a reshape's ``[1, 2, 2n, 64]`` or a flattened ``[64n]``), each constant whose shape
follows ``n`` (SET_ROWS's batch coordinates, all one value) a broadcast to that shape, and the
Parameters get ``-1`` on the axes that differ.  One compiled model then serves the prefill and the
decode, so memory does not grow with the number of shape buckets (docs/model.md, "Memory").
Anything else that differs (a value that is not linear in ``n``, a constant's values) raises
:class:`DynamicShapeError`, and the runner keeps its static buckets.
"""

from __future__ import annotations

from typing import Any

import numpy as np


class DynamicShapeError(ValueError):
    """The two builds differ in a way ``symbolic_model`` cannot express as a function of n."""


def _linear(va: np.ndarray, vb: np.ndarray, a: int, b: int, what: str) -> tuple[np.ndarray, np.ndarray]:
    """``(k, c)`` with ``va = c + k·a`` and ``vb = c + k·b`` elementwise, in integers."""
    diff = va.astype(np.int64) - vb.astype(np.int64)
    if np.any(diff % (a - b)):
        raise DynamicShapeError(
            f"{what}: {va.tolist()} at n={a} and {vb.tolist()} at n={b} are not linear in n"
        )
    k = diff // (a - b)
    return k, va.astype(np.int64) - k * a


def symbolic_model(model_a: Any, model_b: Any, a: int, b: int, source: str) -> Any:
    """``model_a`` (built at ``n = a``) rewritten so that n is the length of the last axis of the
    Parameter ``source`` at run time; ``model_b`` is the same graph built at ``n = b``."""
    import openvino as ov
    import openvino.opset16 as ops

    if a == b:
        raise ValueError(f"two different token counts are needed, got {a} twice")
    nodes_a, nodes_b = model_a.get_ordered_ops(), model_b.get_ordered_ops()
    if len(nodes_a) != len(nodes_b):
        raise DynamicShapeError(
            f"the builds at n={a} and n={b} differ in size ({len(nodes_a)}, {len(nodes_b)} ops)"
        )
    params = {p.get_friendly_name(): p for p in model_a.get_parameters()}
    if source not in params:
        raise ValueError(f"source {source!r} is not a Parameter (Parameters: {sorted(params)})")
    n = ops.gather(ops.shape_of(params[source], ov.Type.i64), np.int64(-1), np.int64(0))  # a scalar

    def expr(k: np.ndarray, c: np.ndarray, et: Any) -> Any:
        value = ops.add(ops.constant(c), ops.multiply(ops.constant(k), n))
        return value if et == ov.Type.i64 else ops.convert(value, et)

    new_shapes: dict[Any, Any] = {}
    for x, y in zip(nodes_a, nodes_b, strict=True):
        kind = x.get_type_name()
        if kind != y.get_type_name():
            raise DynamicShapeError(
                f"op {x.get_friendly_name()}: {kind} at n={a}, {y.get_type_name()} at n={b}"
            )
        if kind == "Parameter":
            sa, sb = x.get_partial_shape(), y.get_partial_shape()
            if sa != sb:
                dims = [-1 if da != db else da.get_length() for da, db in zip(sa, sb, strict=True)]
                new_shapes[x] = ov.PartialShape(dims)
            continue
        if kind != "Constant":
            continue
        sa, sb = tuple(x.get_output_shape(0)), tuple(y.get_output_shape(0))
        va, vb = x.get_data(), y.get_data()
        et = x.get_element_type()
        if sa == sb:
            if np.array_equal(va, vb):
                continue
            if not et.is_integral():
                raise DynamicShapeError(f"constant {x.get_friendly_name()}: its values depend on n")
            k, c = _linear(va, vb, a, b, f"constant {x.get_friendly_name()}")
            new = expr(k, c, et)
        else:
            flat_a, flat_b = va.reshape(-1), vb.reshape(-1)
            if (
                len(sa) != len(sb)
                or flat_a.size == 0
                or np.any(flat_a != flat_a[0])
                or np.any(flat_b != flat_a[0])
            ):
                raise DynamicShapeError(
                    f"constant {x.get_friendly_name()}: shape {sa} at n={a}, {sb} at n={b}"
                )
            k, c = _linear(np.array(sa), np.array(sb), a, b, f"shape of {x.get_friendly_name()}")
            new = ops.broadcast(ops.constant(flat_a[:1].reshape(())), expr(k, c, ov.Type.i64))
        for target in list(x.output(0).get_target_inputs()):
            target.replace_source_output(new.output(0))
    for param, shape in new_shapes.items():
        param.set_partial_shape(shape)
    try:
        model_a.validate_nodes_and_infer_types()
    except RuntimeError as exc:
        raise DynamicShapeError(f"the rewritten model does not validate: {str(exc).splitlines()[0]}") from exc
    return model_a
