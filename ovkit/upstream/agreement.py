"""Live policy agreement: the installed backend's ``supports_op`` on every ``test-ops`` case and
every shipped verdict row against ``ovkit.ops.policy`` at its revision; each difference names
ovkit's rejecting gate, or when only the backend rejects, another revision's that would."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ovkit.catalogue.case import ovkit_graph
from ovkit.catalogue.result import progress_bar
from ovkit.catalogue.verdicts import Unexpressible, build_case
from ovkit.ir import OpInfo
from ovkit.ops.policy import Revision, check_op
from ovkit.ops.verdict_csv import SHIPPED, Verdict, read_verdicts
from ovkit.upstream import cases
from ovkit.upstream.build import UpstreamBuild, require
from ovkit.upstream.isolate import Isolated
from ovkit.upstream.ops import DEVICE_CLASS, graph_verdict

#: Rows per child request (a crash re-asks that chunk's rows one at a time).
CHUNK = 256


@dataclass(frozen=True, slots=True)
class Difference:
    """One case where the real backend and ovkit's policy answer differently."""

    source: str  #: ``catalogue`` or ``test-backend-ops``
    case: str
    upstream: bool | None  #: None: the call crashed
    ovkit: bool
    rule: str  #: the gate that decides it (see the module docstring)
    detail: str = ""


@dataclass(slots=True)
class Agreement:
    """Counts per source, the differences, and the cases that could not be asked."""

    build: UpstreamBuild
    revision: Revision
    compared: Counter[str] = field(default_factory=Counter)
    agreeing: Counter[str] = field(default_factory=Counter)
    differences: list[Difference] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)  #: reason -> rows
    csv_changed: int = 0  #: rows whose live verdict differs from the verdict recorded in the CSV

    @property
    def total(self) -> int:
        return sum(self.compared.values())

    @property
    def percent(self) -> float:
        return 100.0 * sum(self.agreeing.values()) / self.total if self.total else 0.0

    def lines(self) -> list[str]:
        out = [f"Live supports_op of {self.build.describe().splitlines()[0]}",
               f"against ovkit.ops.policy revision {self.revision.value} (device class {DEVICE_CLASS}, quirks on)"]  # fmt: skip
        for src in self.compared:
            out.append(f"  {src:17s} {self.agreeing[src]:6d}/{self.compared[src]:<6d} agree")
        for reason, n in self.skipped.most_common():
            out.append(f"  not asked ({n}): {reason}")
        if self.csv_changed:
            out.append(f"  {self.csv_changed} test-backend-ops rows answer differently from the recorded CSV")
        for d in self.differences:
            up = "CRASH" if d.upstream is None else ("yes" if d.upstream else "no")
            out.append(f"  DIFFERS {d.source}: {d.case}: upstream {up}, ovkit {'yes' if d.ovkit else 'no'}"
                       f" — rule {d.rule}{': ' + d.detail if d.detail else ''}")  # fmt: skip
        out.append(f"  agreement: {self.percent:.2f} % of {self.total} cases")
        return out


def other_rule(info: OpInfo, revision: Revision) -> str:
    """The gate of another revision that rejects ``info``, or ``"no rule"`` when none does."""
    for rev in Revision:
        if rev == revision:
            continue
        d = check_op(info, DEVICE_CLASS, upstream_exact=True, revision=rev)
        if not d.supported:
            return f"{d.gate} (revision {rev.value} only)"
    return "no rule in any revision"


def _catalogue(result: Agreement, worker: Isolated, progress: bool | None) -> None:
    for c in progress_bar(cases.catalogue(), "agreement: catalogue", progress):
        ours, rule = graph_verdict(*ovkit_graph(c), result.revision)
        out = worker.call({"cmd": "case", "name": c.name, "compute": False})
        theirs = out.reply["supported"] if out.ok else None
        result.compared["catalogue"] += 1
        if theirs == ours:
            result.agreeing["catalogue"] += 1
            continue
        rejects = [f"{n['op']} {n['name']}".strip() for n in out.reply.get("nodes", []) if not n["supported"]]
        detail = out.detail if not out.ok else ("upstream rejects " + ", ".join(rejects) if rejects else "")
        result.differences.append(
            Difference("catalogue", c.name, theirs, ours, rule or "no ovkit rule", detail)
        )


def _ask_rows(worker: Isolated, rows: Sequence[Verdict]) -> list[dict[str, Any]]:
    """The child's answer per row; a crash in a chunk re-asks its rows one by one."""
    request = [[v.op_name, v.op_params] for v in rows]
    out = worker.call({"cmd": "support_rows", "rows": request})
    if out.ok:
        return list(out.reply["rows"])
    if len(rows) == 1:
        return [{"crash": f"{out.status} {out.detail}"}]
    return [r for v in rows for r in _ask_rows(worker, [v])]


def _rows(result: Agreement, worker: Isolated, verdicts: Sequence[Verdict], progress: bool | None) -> None:
    src = "test-backend-ops"
    chunks = [verdicts[i : i + CHUNK] for i in range(0, len(verdicts), CHUNK)]
    for chunk in progress_bar(chunks, "agreement: test-backend-ops", progress, unit="chunk"):
        for v, answer in zip(chunk, _ask_rows(worker, chunk), strict=True):
            if "skip" in answer:
                result.skipped[answer["skip"]] += 1
                continue
            try:
                info = build_case(v.op_name, v.op_params)
            except Unexpressible as exc:  # the child could not build it either
                result.skipped[str(exc)] += 1
                continue
            d = check_op(info, DEVICE_CLASS, upstream_exact=True, revision=result.revision)
            theirs = answer.get("supported")
            result.compared[src] += 1
            if theirs is not None and theirs != v.supported:
                result.csv_changed += 1
            if theirs == d.supported:
                result.agreeing[src] += 1
                continue
            rule = d.gate if not d.supported else other_rule(info, result.revision)
            result.differences.append(
                Difference(
                    src, f"{v.op_name}({v.op_params})", theirs, d.supported, rule, answer.get("crash", "")
                )
            )


def agreement(verdicts: Iterable[Verdict] | None = None, *, catalogue: bool = True,
              revision: Revision | None = None, progress: bool | None = None) -> Agreement:  # fmt: skip
    """Ask the installed backend about every buildable case and compare with the policy."""
    build = require()
    rows = list(read_verdicts(SHIPPED) if verdicts is None else verdicts)
    result = Agreement(build, revision or build.revision or Revision.N)
    with Isolated() as worker:
        if catalogue:
            _catalogue(result, worker, progress)
        _rows(result, worker, rows, progress)
    return result
