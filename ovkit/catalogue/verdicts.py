"""Upstream ``supports_op`` verdicts replayed against the policy, each row as the output node of
its runnable case's graph; rows whose graph is not known are *unexpressible*, counted with a reason."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ovkit.catalogue import backend_ops
from ovkit.catalogue.case import Case, ovkit_graph
from ovkit.errors import OvkitError
from ovkit.ir import GGML_SRC_ORDER, IN_PLACE_WRITES, GraphError, Op, OpInfo, pad_ne
from ovkit.ops.policy import Revision, SupportDecision, check_op
from ovkit.ops.verdict_csv import CSV_REVISION, Verdict, parse_params
from ovkit.quant import QuantError

#: ggml ops no test-backend-ops case is named after: a leaf, the sub-op parents (a unary or GLU
#: case is named after its sub-op) and user callbacks.
NO_CASE_OPS = frozenset(
    {Op.NONE, Op.UNARY, Op.GLU, Op.MAP_CUSTOM1, Op.MAP_CUSTOM2, Op.MAP_CUSTOM3, Op.CUSTOM}
)
#: ggml ops newer than ovkit's :class:`~ovkit.ir.Op` (after the reference test-backend-ops source).
NEWER_GGML_OPS = frozenset({"DSV4_HC_PRE", "DSV4_HC_POST", "DSV4_HC_COMB", "LIGHTNING_INDEXER"})
#: ggml ops (GGML_OP_*) whose test case's output node is that op (used for ops no case builder
#: knows: the op-membership gate decides them whatever the graph).
GGML_OPS: frozenset[str] = frozenset(o for o in Op if not o.sub_op and o not in NO_CASE_OPS) | NEWER_GGML_OPS


class Unexpressible(OvkitError):
    """The case's graph cannot be rebuilt; the message is the reason."""


def _output_op(op_name: str) -> tuple[str, str | None]:
    """The ggml op and sub-op of the output node of a case named ``op_name`` (``"ABS"`` is UNARY)."""
    for parent in (Op.UNARY, Op.GLU):
        sub = Op.sub_op_named(parent, op_name)
        if sub is not None:
            return parent.value, sub.sub_op
    return op_name, None


def _stand_in(case: Case, params: dict[str, Any]) -> OpInfo:
    """A case ovkit's builder refuses as its output op over its leaves, so the type and membership
    gates that decide it upstream see every type (an in-place write's output: the destination's)."""
    op, sub_op = _output_op(case.op)
    srcs = tuple(OpInfo(Op.NONE, lf.dtype, pad_ne(lf.ne), name=lf.name) for lf in case.leaves)
    dst = [s.dtype for s in srcs if s.name in _DESTINATIONS]
    dtype = dst[0] if op in IN_PLACE_WRITES and dst else str(params.get("type", "f32"))
    ne = srcs[0].ne
    order = GGML_SRC_ORDER.get(Op(op)) if op in IN_PLACE_WRITES else None
    if order is not None:
        srcs = tuple(srcs[i] for i in order)
    return OpInfo(op, dtype, ne, srcs, sub_op=sub_op, name="out")


#: The leaf names test-backend-ops gives an in-place write's destination.
_DESTINATIONS = frozenset({"dst", "dst_buf"})


def _type_of(params: dict[str, Any]) -> str:
    """A case's data type as its parameters name it (f32 when they name none)."""
    return str(params.get("type", params.get("type_input", params.get("type_a", "f32"))))


def build_case(op_name: str, op_params: str) -> OpInfo:
    """The output node test-backend-ops builds for ``op_name(op_params)``: the op info of the
    runnable case's graph; raises Unexpressible."""
    params = parse_params(op_params)
    try:
        case = backend_ops.case_of(op_name, op_params, params)
    except backend_ops.NoBuilder as e:
        if op_name in GGML_OPS:
            # An op no case builder knows: the backend does not register it, membership decides.
            return OpInfo(op_name, _type_of(params), (1, 1, 1, 1), name="out")
        raise Unexpressible(f"unknown test case {op_name}") from e
    except KeyError as e:
        raise Unexpressible(f"parameter {e.args[0]!r} missing for {op_name}") from e
    try:
        _, out = ovkit_graph(case)
    except (GraphError, QuantError):  # a type, layout or parameter ovkit's builder refuses
        return _stand_in(case, params)
    info: OpInfo = out.op_info()
    return info


# ----------------------------------------------------------------------------------------------
# Agreement


@dataclass(frozen=True, slots=True)
class CaseResult:
    verdict: Verdict
    decision: SupportDecision | None  #: None when unexpressible
    unexpressible: str = ""

    @property
    def agrees(self) -> bool:
        return self.decision is not None and self.decision.supported == self.verdict.supported


@dataclass(slots=True)
class Agreement:
    """Outcome of replaying every verdict."""

    results: list[CaseResult] = field(default_factory=list)

    @property
    def total(self) -> int:
        return len(self.results)

    @property
    def expressible(self) -> int:
        return sum(r.decision is not None for r in self.results)

    @property
    def agreeing(self) -> int:
        return sum(r.agrees for r in self.results)

    @property
    def disagreements(self) -> list[CaseResult]:
        return [r for r in self.results if r.decision is not None and not r.agrees]

    def unexpressible_by_reason(self) -> Counter[str]:
        return Counter(r.unexpressible for r in self.results if r.decision is None)

    def summary(self) -> str:
        lines = [
            f"agreement: {self.agreeing}/{self.expressible} expressible rows agree ({self.total} rows in total)"
        ]
        for reason, n in self.unexpressible_by_reason().most_common():
            lines.append(f"  unexpressible ({n}): {reason}")
        return "\n".join(lines)


def replay(verdicts: Iterable[Verdict], device_class: str = "CPU", *,
           upstream_exact: bool = True, revision: Revision | str = CSV_REVISION) -> Agreement:  # fmt: skip
    """Ask the policy about every verdict's case and compare."""
    out = Agreement()
    for v in verdicts:
        try:
            info = build_case(v.op_name, v.op_params)
        except Unexpressible as e:
            out.results.append(CaseResult(v, None, str(e)))
            continue
        d = check_op(info, device_class, upstream_exact=upstream_exact, revision=revision)
        out.results.append(CaseResult(v, d))
    return out


__all__ = ["GGML_OPS", "Agreement", "CaseResult", "Unexpressible", "build_case", "replay"]
