"""Every catalogue case three ways: ovkit on OpenVINO, the real backend (``supports_op`` on every
tensor, then the compute on ``OPENVINO0``, in a child), both against ggml's CPU backend; the
verdicts against ovkit's policy at the installed revision, so a disagreement names a rule."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from ovkit.ops.policy import Revision, check_op
from ovkit.upstream import cases
from ovkit.upstream.build import require
from ovkit.upstream.isolate import Isolated

if TYPE_CHECKING:
    import pandas as pd

    from ovkit.catalogue.case import Case
    from ovkit.catalogue.result import Result
    from ovkit.catalogue.run import Row

#: The device class the installed backend runs on here (GGML_OPENVINO_DEVICE unset: CPU).
DEVICE_CLASS = "CPU"


@dataclass(frozen=True, slots=True)
class ThreeWay:
    """One case run three ways."""

    op: str
    case: str
    max_nmse: float
    ovkit_status: str  #: ``ovkit test-ops``'s status: OK, FAIL, not supported
    ovkit_nmse: float | None  #: ovkit vs ggml's CPU backend
    ovkit_supported: bool  #: ovkit's policy at the installed revision, every node
    ovkit_rule: str  #: the gate that rejects (``""`` when supported)
    upstream_status: str  #: OK, FAIL, not supported, CRASH, TIMEOUT, ERROR
    upstream_nmse: float | None  #: the real backend vs ggml's CPU backend
    upstream_supported: bool | None  #: every tensor supported (None: the call crashed)
    upstream_rejects: str = ""  #: the tensors the real backend rejects (``op name``)
    detail: str = ""  #: crash signal, error text, ovkit's failure

    @property
    def agrees(self) -> bool:
        """The real backend's verdict equals ovkit's policy (False when it crashed)."""
        return self.upstream_supported is not None and self.upstream_supported == self.ovkit_supported

    def record(self) -> dict[str, Any]:
        """The fields and ``agrees``, as the JSON output and :func:`three_way` show them."""
        return {**asdict(self), "agrees": self.agrees}

    def line(self) -> str:
        """``  CASE: upstream OK (NMSE 1.2e-14) | ovkit OK (NMSE 0.0e+00) | policy: supported, agrees``."""

        def side(status: str, nmse: float | None) -> str:
            return f"{status} (NMSE {nmse:.1e})" if nmse is not None else status

        if self.upstream_status == "no case":  # neither side can build it: nothing to compare
            return f"  {self.case}: no case — {self.detail}"
        policy = "supported" if self.ovkit_supported else f"not supported [{self.ovkit_rule}]"
        verdict = "agrees" if self.agrees else "DISAGREES"
        extra = f" — {self.detail}" if self.detail else ""
        return (
            f"  {self.case}: upstream {side(self.upstream_status, self.upstream_nmse)}"
            f" | ovkit {side(self.ovkit_status, self.ovkit_nmse)} | policy: {policy}, {verdict}{extra}"
        )


def graph_verdict(g: Any, out: Any, revision: Revision, device_class: str = DEVICE_CLASS) -> tuple[bool, str]:
    """ovkit's policy on every op node of a built graph: (supported, first rejecting gate)."""
    nodes = [t for t in g.topo([out]) if not t.is_leaf]
    decisions = (check_op(t, device_class, upstream_exact=True, revision=revision) for t in nodes)
    rejected = next((d for d in decisions if not d.supported), None)
    return (True, "") if rejected is None else (False, rejected.gate)


def three_way_case(
    c: Case, worker: Isolated, revision: Revision, *, varied: Mapping[str, Any] | None = None
) -> ThreeWay:
    """One case three ways (the real backend in ``worker``'s child); ``varied``: the
    ``shapes``/``dtype`` :func:`cases.vary` applied to the catalogue case ``c`` came from."""
    from ovkit.catalogue.run import run_case

    ours = run_case(c, "CPU", reference="ggml")
    return _three_way(c, ours, {"cmd": "case", "name": c.name, **(varied or {})}, worker, revision)


def three_way_row(row: Row, worker: Isolated, revision: Revision) -> ThreeWay:
    """One test-backend-ops catalogue row three ways: ovkit (as ``--policy none``) and the real
    backend, both against ggml's CPU backend; ovkit's policy at ``revision`` on every op node."""
    from ovkit.catalogue import backend_ops
    from ovkit.catalogue import run as catalogue

    ours = catalogue.run_row(row, policy="none")
    try:
        case = backend_ops.build(row.op, row.params)
    except backend_ops.NoCase as exc:
        return ThreeWay(row.op, row.name, max_nmse=0.0, ovkit_status=ours.status, ovkit_nmse=ours.err,
                        ovkit_supported=False, ovkit_rule="no case", upstream_status="no case",
                        upstream_nmse=None, upstream_supported=None, detail=str(exc))  # fmt: skip
    request = {"cmd": "catalogue_case", "op": row.op, "params": row.params}
    return _three_way(case, ours, request, worker, revision, row)


def _three_way(c: Case, ours: Result, request: dict[str, Any], worker: Isolated, revision: Revision,
               row: Row | None = None) -> ThreeWay:  # fmt: skip
    """ovkit's result ``ours`` and policy on ``c`` beside the worker's answer to ``request``."""
    from ovkit.catalogue.case import ovkit_graph
    from ovkit.catalogue.run import upstream_verdict

    try:
        supported, rule = graph_verdict(*ovkit_graph(c), revision)
    except Exception:  # ovkit cannot build a row's graph: the policy on the output node alone
        if row is None:
            raise
        supported, reason = upstream_verdict(row, DEVICE_CLASS)
        rule = "" if supported else reason
    base: dict[str, Any] = {"op": c.op, "case": c.name, "max_nmse": c.max_err, "ovkit_status": ours.status,
                            "ovkit_nmse": ours.err, "ovkit_supported": supported, "ovkit_rule": rule}  # fmt: skip
    detail = ours.detail if ours.status in ("FAIL", "not translatable") else ""
    out = worker.call(request)
    if not out.ok:
        return ThreeWay(**base, upstream_status=out.status, upstream_nmse=None, upstream_supported=None,
                        detail=f"{out.detail}{'; ' + detail if detail else ''}")  # fmt: skip
    reply = out.reply
    rejects = ", ".join(f"{n['op']} {n['name']}".strip() for n in reply["nodes"] if not n["supported"])
    nmse = reply.get("nmse")
    if not reply["supported"]:
        status = "not supported"
    elif "compute_error" in reply:
        status, detail = "FAIL", f"{reply['compute_error']}: {worker.stderr_tail()}"
    elif nmse is None:
        status, detail = "FAIL", f"shape {reply.get('shape')} differs from ggml's"
    else:
        status = reply["status"]  # the judge's, in the worker: the case's own error and bound
    return ThreeWay(**base, upstream_status=status, upstream_nmse=nmse, upstream_supported=reply["supported"],
                    upstream_rejects=rejects, detail=detail)  # fmt: skip


def iter_three_way(
    picked: Sequence[Case] | None = None, *, rows: Sequence[Row] | None = None, progress: bool | None = None
) -> Iterator[ThreeWay]:
    """``picked`` (default: the whole catalogue; :func:`three_way_case`) or test-backend-ops
    catalogue ``rows`` (:func:`three_way_row`) three ways, in one isolated child."""
    from ovkit.catalogue.result import progress_bar

    revision = require().revision or Revision.N
    items: Sequence[Any] = rows if rows is not None else list(cases.catalogue() if picked is None else picked)
    run = three_way_row if rows is not None else three_way_case
    desc = "test-backend-ops --upstream" if rows is not None else "test-ops --upstream"
    with Isolated() as worker:
        for x in progress_bar(items, desc, progress):
            yield run(x, worker, revision)


def run_varied(
    name: str, shapes: Mapping[str, Sequence[int]] | None = None, dtype: str | None = None
) -> ThreeWay:
    """The catalogue case ``name`` with other input shapes / float dtype (the op explorer's
    edits) three ways, in a fresh isolated child."""
    revision = require().revision or Revision.N
    varied = {"shapes": {k: list(v) for k, v in (shapes or {}).items()}, "dtype": dtype}
    c = cases.vary(cases.find_case(name), shapes, dtype)
    with Isolated() as worker:
        return three_way_case(c, worker, revision, varied=varied)


def three_way(picked: Sequence[Case] | None = None, **kw: Any) -> pd.DataFrame:
    """:func:`iter_three_way` as a DataFrame (one row per case, plus ``agrees``)."""
    import pandas as pd

    return pd.DataFrame([r.record() for r in iter_three_way(picked, **kw)])


def summary_lines(results: Sequence[ThreeWay], revision: Revision | None) -> list[str]:
    """Totals: verdict agreement and each side's statuses."""
    from collections import Counter

    asked = [r for r in results if r.upstream_status != "no case"]
    agree = sum(r.agrees for r in asked)
    ups = Counter(r.upstream_status for r in results)
    ours = Counter(r.ovkit_status for r in results)
    rev = revision.value if revision else "?"
    return [
        f"  {agree}/{len(asked)} verdicts agree with ovkit's policy (revision {rev})",
        "  upstream: " + ", ".join(f"{n} {s}" for s, n in ups.most_common()),
        "  ovkit:    " + ", ".join(f"{n} {s}" for s, n in ours.most_common()),
    ]


def cli(args: Any) -> int:
    """``ovkit test-ops --upstream``: one line per case, totals; 1 when a verdict disagrees or the
    real backend crashed."""
    from tqdm import tqdm

    from ovkit import testops

    build = require()
    progress = False if getattr(args, "no_progress", False) else None
    backend_ops = getattr(args, "catalogue", "ovkit") == "test-backend-ops"
    source = (
        iter_three_way(rows=testops.backend_ops_rows(args), progress=progress)
        if backend_ops
        else iter_three_way(testops.select(cases.catalogue(), args.op), progress=progress)
    )
    if not args.json:
        assert build.ggml is not None
        what = "the test-backend-ops catalogue" if backend_ops else "ovkit's catalogue"
        print(f"Testing OPENVINO0 (the real backend: {build.ggml.package} {build.ggml.version}, policy revision "
              f"{build.revision}) and ovkit on CPU, each against ggml's CPU backend ({what})")  # fmt: skip
    results: list[ThreeWay] = []
    for r in source:
        results.append(r)
        if not args.json:
            tqdm.write(r.line(), file=sys.stdout)
    if args.json:
        print(json.dumps({"revision": build.revision, "cases": [r.record() for r in results]}, indent=2))
    else:
        print("\n".join(summary_lines(results, build.revision)))
    asked = [r for r in results if r.upstream_status != "no case"]
    return 0 if all(r.agrees and r.upstream_status != "CRASH" for r in asked) else 1
