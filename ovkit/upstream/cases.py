"""The cases run side by side with the real backend: the curated ``test-ops`` set and the
benchmark's small graph, found by name in both processes (inputs drawn from the name's seed)."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence
from typing import Any

from ovkit.catalogue import case as catalogue_case
from ovkit.catalogue import curated
from ovkit.catalogue.case import Case
from ovkit.catalogue.curated.build import INDEX_KINDS, case, f
from ovkit.ir import pad_ne


def _small_graph(g: Any, x: Mapping[str, Any]) -> Any:
    """One pre-norm MLP step, llama-style: rms_norm → scale by a weight → mul_mat → silu → add."""
    h = g.mul(g.rms_norm(x["x"], 1e-6), x["norm"])
    return g.add(g.silu(g.mul_mat(x["w"], h)), x["x"])


#: Cases that are not in the catalogue: the benchmark's small graph.
EXTRA_CASES: tuple[Case, ...] = (
    case("mul_mat", {"x": f(256, 4), "norm": f(256), "w": f(256, 256)}, op="GRAPH:MLP", program=_small_graph),
)


@functools.cache
def catalogue() -> tuple[Case, ...]:
    """The ``test-ops`` set of the curated catalogue, in its order."""
    return curated.cases(curated.TEST_OPS)


def find_case(name: str) -> Case:
    """The curated case or :data:`EXTRA_CASES`' called ``name`` (``MUL_MAT(type=f32,...)``); KeyError
    naming it when unknown."""
    return next((c for c in EXTRA_CASES if c.name == name), None) or curated.find(name)


def ggml_inputs(c: Case) -> dict[str, Any]:
    """The case's inputs as ggml leaves take them (bf16 as Typed, quantized as raw blocks),
    drawn as ``ovkit test-ops`` draws them."""
    return catalogue_case.ggml_inputs(c, catalogue_case.draw_all(c))


#: The float types a case's float inputs can be switched to (:func:`vary`).
FLOAT_DTYPES: tuple[str, ...] = ("f32", "f16", "bf16")


def vary(c: Case, shapes: Mapping[str, Sequence[int]] | None = None, dtype: str | None = None) -> Case:
    """``c`` with other input shapes (numpy order, by input name) and/or float dtype (its label
    kept): the op explorer's edits, rebuilt the same way in the worker process."""
    shapes = dict(shapes or {})
    unknown = set(shapes) - {lf.name for lf in c.leaves}
    if unknown:
        names = ", ".join(lf.name for lf in c.leaves)
        raise ValueError(f"{c.op}: no input named {sorted(unknown)} (inputs: {names})")
    if dtype is not None and dtype not in FLOAT_DTYPES:
        raise ValueError(f"dtype {dtype!r}: expected one of {', '.join(FLOAT_DTYPES)}")
    leaves = []
    for lf in c.leaves:
        new = lf
        if lf.name in shapes:
            new = dataclasses.replace(new, ne=pad_ne(tuple(reversed(shapes[lf.name]))))
        if dtype is not None and lf.dtype in FLOAT_DTYPES and lf.init.kind not in INDEX_KINDS:
            new = dataclasses.replace(new, dtype=dtype)
        leaves.append(new)
    return dataclasses.replace(c, leaves=tuple(leaves))
