"""Upstream ``supports_op`` verdicts as data: test-backend-ops' parameter notation, the verdict
CSV and the ggml node records a case is asked about.

:data:`SHIPPED` (package data) holds, per test-backend-ops case, the op name, the case's parameters
in test-backend-ops notation (``type=f32,ne_a=[5,7,11,13],v=0``) and the real backend's verdict.
:func:`leaf`, :func:`view`, :func:`permute`, :func:`transpose` and :func:`node` build
:class:`~ovkit.ir.OpInfo` records the way ggml's builders lay tensors out.  The rows are replayed
against the policy by :mod:`ovkit.catalogue.verdicts` (each as its runnable case's output node).
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ovkit.ir import Op, OpInfo, pad_ne
from ovkit.ops.policy import Revision

#: The revision that produced the shipped CSV (see :class:`ovkit.ops.policy.Revision`).
CSV_REVISION = Revision.V
#: The shipped test-backend-ops verdicts (op_name, op_params, supported), package data.
SHIPPED = Path(__file__).resolve().parents[1] / "data" / "upstream-support-verdicts.csv.gz"

# ----------------------------------------------------------------------------------------------
# Parsing test-backend-ops notation


def parse_params(text: str) -> dict[str, Any]:
    """``type=f32,ne=[1,2,3,4],split`` -> ``{"type": "f32", "ne": [1, 2, 3, 4], "split": True}``."""
    out: dict[str, Any] = {}
    for item in re.findall(r"[^,\[]+(?:\[[^\]]*\])?", text):
        item = item.strip()
        if not item:
            continue
        if "=" not in item:
            out[item] = True
            continue
        key, raw = item.split("=", 1)
        out[key] = _value(raw)
    return out


def _value(raw: str) -> Any:
    if raw.startswith("[") and raw.endswith("]"):
        inner = raw[1:-1]
        return [_value(x) for x in inner.split(",")] if inner else []
    for conv in (int, float):
        try:
            return conv(raw)
        except ValueError:
            pass
    return raw


@dataclass(frozen=True, slots=True)
class Verdict:
    """One CSV row."""

    op_name: str
    op_params: str
    supported: bool

    @property
    def params(self) -> dict[str, Any]:
        return parse_params(self.op_params)


def read_verdicts(path: str | Path) -> list[Verdict]:
    """All rows of a verdict CSV (columns op_name, op_params, supported); ``.gz`` is read too."""
    import gzip

    p = Path(path)
    with gzip.open(p, "rt", newline="") if p.suffix == ".gz" else open(p, newline="") as f:
        rows = list(csv.DictReader(f))
    return [Verdict(r["op_name"], r["op_params"], r["supported"].strip() == "1") for r in rows]


# ----------------------------------------------------------------------------------------------
# Building nodes the way ggml does


def leaf(dtype: str, ne: Sequence[int], name: str = "") -> OpInfo:
    """ggml_new_tensor."""
    return OpInfo(Op.NONE, dtype, pad_ne(ne), name=name)


def _base(t: OpInfo) -> OpInfo:
    return t.view_src if t.view_src is not None else t


def view(
    t: OpInfo, ne: Sequence[int], nb: Sequence[int] | None = None, name: str = "", offset: int = 0
) -> OpInfo:
    """ggml_view_4d(t, ne, nb1..nb3, offset) (nb[0] stays the element size)."""
    s = t.strides
    nb4 = (s[0], *nb) if nb is not None else s
    offs = offset + (t.view_offs if t.view_src is not None else 0)
    return OpInfo(
        Op.VIEW, t.dtype, pad_ne(ne), (t,), nb=pad_ne(nb4), name=name, view_src=_base(t), view_offs=offs
    )


def permute(t: OpInfo, axes: Sequence[int], op: str = Op.PERMUTE, name: str = "") -> OpInfo:
    """ggml_permute(t, a0, a1, a2, a3): dim i of t becomes dim axes[i]."""
    ne, nb = [0] * 4, [0] * 4
    for i, ax in enumerate(axes):
        ne[ax], nb[ax] = t.ne[i], t.strides[i]
    return OpInfo(op, t.dtype, pad_ne(ne), (t,), nb=pad_ne(nb), name=name, view_src=_base(t))


def transpose(t: OpInfo, name: str = "") -> OpInfo:
    return permute(t, (1, 0, 2, 3), op=Op.TRANSPOSE, name=name)


def node(
    op: str,
    dtype: str,
    ne: Sequence[int],
    srcs: Iterable[OpInfo | None],
    *,
    sub_op: str | None = None,
    name: str = "out",
    inplace_of: OpInfo | None = None,
    **params: Any,
) -> OpInfo:
    """An op node; ``inplace_of`` makes it a view of that tensor (ggml ``*_inplace``)."""
    ne4 = pad_ne(ne)
    if inplace_of is not None:
        return OpInfo(op, dtype, ne4, tuple(srcs), sub_op=sub_op, params=params, name=name,
                      nb=inplace_of.strides, view_src=_base(inplace_of),
                      view_offs=inplace_of.view_offs if inplace_of.view_src is not None else 0)  # fmt: skip
    return OpInfo(op, dtype, ne4, tuple(srcs), sub_op=sub_op, params=params, name=name)


__all__ = [
    "CSV_REVISION",
    "SHIPPED",
    "Verdict",
    "leaf",
    "node",
    "parse_params",
    "permute",
    "read_verdicts",
    "transpose",
    "view",
]
