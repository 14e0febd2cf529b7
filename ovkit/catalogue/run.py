"""Run catalogue cases: the support policy first, then ovkit's graph on the device against ggml.

Per case, as test-backend-ops prints it: ``OK``, ``FAIL`` with the error, ``not supported [device]``
with the policy's reason, or ``not translatable`` (ovkit has no builder or OpenVINO translation
for an op of the case: a gap of ovkit, not a wrong result).  ``policy="upstream"`` asks the
backend's support policy about every op node of the case's graph first, as test-backend-ops'
test mode asks ``supports_op``; ``policy="none"`` runs every case ovkit can translate.

Cases run in worker processes (``workers``): one case at a time per worker, so a native crash
(an abort inside ggml or OpenVINO) costs only that case, reported as a FAIL, and the worker is
replaced.  Only the output node is compared (test-backend-ops compares every node it can).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from queue import Empty, Queue
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from ovkit.catalogue import backend_ops
from ovkit.catalogue.case import Case, build_ovkit, draw_all, ggml_inputs, index_set_err, oracle_inputs

if TYPE_CHECKING:
    import pandas as pd

Status = Literal["OK", "FAIL", "not supported", "not translatable", "no case"]
STATUSES: tuple[Status, ...] = ("OK", "FAIL", "not supported", "not translatable", "no case")
Policy = Literal["upstream", "none"]
#: A case taking longer than this in a worker process is stopped and reported as a FAIL.
CASE_TIMEOUT_S = 600.0
#: The shipped half of test-backend-ops' catalogue (op name, parameters, upstream's verdict).
SHIPPED = Path(__file__).resolve().parents[2] / "tests" / "data" / "upstream-support-verdicts.csv.gz"


@dataclass(frozen=True, slots=True)
class Row:
    """One case list row: test-backend-ops' op name and parameters."""

    op: str
    params: str

    @property
    def name(self) -> str:
        return f"{self.op}({self.params})"


@dataclass(frozen=True, slots=True)
class Result:
    """The verdict of one case."""

    op: str
    case: str
    status: Status
    detail: str = ""
    err: float | None = None
    max_err: float | None = None
    device: str = "CPU"
    #: the backend's own verdict (its support policy), also recorded with ``policy="none"``
    accepted: bool = False

    def line(self) -> str:
        """test-backend-ops' per-case line."""
        if self.status == "OK":
            return f"  {self.case}: OK"
        if self.status == "not supported":
            return f"  {self.case}: not supported [{self.device}] ({self.detail})"
        return f"  {self.case}: {self.status} {self.detail}".rstrip()


def read_rows(path: str | Path | None = None) -> list[Row]:
    """A case list: CSV with ``op_name`` and ``op_params`` columns (``.gz`` read too); the
    shipped half of test-backend-ops' catalogue by default."""
    from ovkit.ops.verdicts import read_verdicts

    p = Path(path) if path is not None else SHIPPED
    if not p.exists():
        raise FileNotFoundError(
            f"case list {str(p)!r} does not exist (expected a CSV with op_name,op_params)"
        )
    try:
        return [Row(v.op_name, v.op_params) for v in read_verdicts(p)]
    except KeyError as e:
        raise ValueError(
            f"case list {str(p)!r}: column {e.args[0]!r} missing (expected op_name,op_params)"
        ) from e


def stratified(rows: Sequence[Row], n: int, seed: int = 0, per_op: int = 3) -> list[Row]:
    """About ``n`` rows with every op present: each op's share, at least ``per_op`` rows per op
    (or all of its rows)."""
    by_op: dict[str, list[Row]] = {}
    for r in rows:
        by_op.setdefault(r.op, []).append(r)
    rng = np.random.default_rng(seed)
    frac = min(1.0, n / max(1, len(rows)))
    out: list[Row] = []
    for op_rows in by_op.values():
        k = min(len(op_rows), max(per_op, round(len(op_rows) * frac)))
        pick = sorted(rng.choice(len(op_rows), size=k, replace=False).tolist())
        out += [op_rows[i] for i in pick]
    return out


# ----------------------------------------------------------------------------------------------
# One case


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"


def _untranslatable(exc: BaseException) -> bool:
    """An ovkit gap: no builder method (AttributeError on Graph), no translation, or a type ovkit
    has no dtype for."""
    if isinstance(exc, AttributeError):
        return "Graph" in str(exc) or "Tensor" in str(exc)
    from ovkit.graph import GraphError

    text = str(exc)
    if "no OpenVINO translation" in text:
        return True
    # ovkit's builder refusing a sub-op, a type or a layout it has no translation for
    gaps = ("expected one of", "expected type", "expected dtype", "not supported")
    return isinstance(exc, GraphError) and any(s in text for s in gaps)


def upstream_verdict(row: Row, device_class: str = "CPU") -> tuple[bool, str]:
    """What the backend's ``supports_op`` answers for the case's output node (test-backend-ops'
    ``support`` mode, test-name quirks included, at the revision that produced the shipped
    verdicts), with the reason of a rejection."""
    from ovkit.ops import verdicts
    from ovkit.ops.policy import check_op

    try:
        info = verdicts.build_case(row.op, verdicts.parse_params(row.params))
    except verdicts.Unexpressible as exc:
        return False, f"unexpressible: {exc}"
    d = check_op(info, device_class, upstream_exact=True, revision=verdicts.CSV_REVISION)
    return d.supported, d.reason


def _run_unchecked(
    g: Any, out: Any, model: Any, names: list[str], feed: Any, device: str, core: Any
) -> np.ndarray:
    """The OpenVINO translation on ``device`` without the support policy (``policy="none"``)."""
    from ovkit.engine import GRAPH_RUN_CONFIG, run_model
    from ovkit.ir import from_model_output
    from ovkit.ops.translate import model_inputs

    prepared = g._prepare_inputs([out], feed)
    raw = run_model(model, model_inputs(g, names, prepared), device, core=core, run_config=GRAPH_RUN_CONFIG)
    return np.asarray(from_model_output(out, raw[0]))


def _judge(case: Case, actual: np.ndarray, expected: np.ndarray) -> tuple[bool, float, str]:
    from ovkit import oracle

    if actual.size != expected.size:
        return False, float("inf"), f"element count {actual.size} vs ggml {expected.size}"
    if case.err == "index_set":
        err = index_set_err(actual, expected)
        ok = err <= case.max_err
        return ok, err, "" if ok else f"ERR = {err:.9f} > {case.max_err:.9f}"
    verdict = oracle.compare(actual, expected, case.max_err)
    return verdict.ok, verdict.err, "" if verdict.ok else verdict.reason


def run_case(
    case: Case,
    policy: Policy = "upstream",
    device: str = "CPU",
    core: Any = None,
    *,
    accepted: bool = True,
    reason: str = "",
) -> Result:
    """Build both graphs, run ovkit on ``device`` and ggml's CPU backend, compare.  ``accepted``
    and ``reason``: the backend's verdict (``policy="upstream"`` runs only accepted cases)."""
    from ovkit import oracle
    from ovkit.engine import compute_graph

    base: dict[str, Any] = {"op": case.op, "case": case.name, "device": device, "accepted": accepted}
    from ovkit.quant import KNOWN_TYPES

    known = {q.lower() for q in KNOWN_TYPES}
    for leaf in case.leaves:
        if leaf.quantized and leaf.dtype.lower() not in known:
            return Result(**base, status="not translatable", detail=f"ovkit has no {leaf.dtype} weights")
    try:
        ggml_leaves = ggml_inputs(case, draw_all(case))
    except Exception as exc:
        return Result(**base, status="FAIL", detail=f"inputs: {_first_line(exc)}")
    try:
        g, out, feed = build_ovkit(case, ggml_leaves)
    except Exception as exc:
        from ovkit.graph import GraphError

        # ovkit's builder refusing a graph is a gap, not a wrong result (the builder tests keep
        # the case graphs themselves equal to test-backend-ops')
        if _untranslatable(exc) or isinstance(exc, GraphError):
            return Result(**base, status="not translatable", detail=_first_line(exc))
        return Result(**base, status="FAIL", detail=f"build: {_first_line(exc)}")
    if policy == "upstream" and not accepted:
        return Result(**base, status="not supported", detail=reason)
    try:
        model, names = g.to_model([out])
    except Exception as exc:
        status: Status = "not translatable" if _untranslatable(exc) else "FAIL"
        return Result(**base, status=status, detail=_first_line(exc))
    try:
        if policy == "upstream":  # accepted: the engine's own path (compile cache, its checks)
            actual = np.asarray(compute_graph(g, [out], feed, device, core=core)[0])
        else:
            actual = _run_unchecked(g, out, model, names, feed, device, core)
    except Exception as exc:
        return Result(**base, status="FAIL", detail=_first_line(exc))
    try:
        expected = np.asarray(oracle.ggml_program(case.program, oracle_inputs(case, ggml_leaves)))
    except Exception as exc:
        return Result(**base, status="FAIL", detail=f"ggml: {_first_line(exc)}")
    ok, err, why = _judge(case, actual, expected)
    return Result(**base, status="OK" if ok else "FAIL", detail=why, err=err, max_err=case.max_err)


def run_row(row: Row, policy: Policy = "upstream", device: str = "CPU", core: Any = None) -> Result:
    """:func:`run_case` of one case list row; rows no builder knows are ``no case``."""
    from ovkit.devices import device_class

    accepted, reason = upstream_verdict(row, str(device_class(device)))
    try:
        case = backend_ops.build(row.op, row.params)
    except backend_ops.NoCase as exc:
        return Result(row.op, row.name, "no case", str(exc), device=device, accepted=accepted)
    return run_case(case, policy, device, core, accepted=accepted, reason=reason)


def translatable(row: Row) -> tuple[bool, str]:
    """Whether ovkit can build the row's graph and has an OpenVINO translation for every op node
    (without running it), with the reason when not; ``no case`` rows are not translatable."""
    from ovkit.catalogue.case import ovkit_graph
    from ovkit.ir import VIEW_OPS
    from ovkit.ops.translate import TRANSLATORS

    try:
        g, out = ovkit_graph(backend_ops.build(row.op, row.params))
    except backend_ops.NoCase as exc:
        return False, f"no case: {exc}"
    except Exception as exc:
        return False, _first_line(exc)
    for t in g.value_nodes([out]):
        if not t.is_leaf and t.op not in VIEW_OPS and t.op_key not in TRANSLATORS:
            return False, f"no OpenVINO translation for {t.op_key}"
    return True, ""


def coverage_rows(
    rows: Sequence[Row], device_class: str = "CPU", progress: bool | None = None
) -> pd.DataFrame:
    """Every row classified without running it: the backend's verdict and ovkit's translation
    (op, case, accepted, translatable, reason): the catalogue view over the whole list."""
    import pandas as pd
    from tqdm import tqdm

    out = []
    for r in tqdm(rows, desc="classifying", unit="case", file=sys.stderr, leave=False,
                  disable=not progress if progress is not None else None):  # fmt: skip
        accepted, why = upstream_verdict(r, device_class)
        ok, reason = translatable(r)
        out.append({"op": r.op, "case": r.name, "accepted": accepted, "translatable": ok,
                    "reason": reason or why})  # fmt: skip
    return pd.DataFrame(out, columns=["op", "case", "accepted", "translatable", "reason"])


# ----------------------------------------------------------------------------------------------
# Many cases: worker processes


def _worker_main() -> None:
    """``python -m ovkit.catalogue.run POLICY DEVICE``: read one JSON row per line, answer one
    JSON result per line (the parent's pool protocol)."""
    policy, device = sys.argv[1], sys.argv[2]
    for line in sys.stdin:
        op, params = json.loads(line)
        r = run_row(Row(op, params), policy, device)  # type: ignore[arg-type]
        sys.stdout.write(json.dumps(asdict(r)) + "\n")
        sys.stdout.flush()


#: How a worker process starts (``python -m ovkit.catalogue.run POLICY DEVICE``).
WORKER_COMMAND: tuple[str, ...] = (sys.executable, "-m", "ovkit.catalogue.run")


class _Worker:
    """One child process answering rows; replaced when it dies."""

    def __init__(self, policy: str, device: str) -> None:
        # no gdb backtrace on a ggml abort: the debugger would hold the pipe open
        env = dict(os.environ, OMP_NUM_THREADS="1", GGML_NO_BACKTRACE="1")
        self.proc = subprocess.Popen(
            [*WORKER_COMMAND, policy, device],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
        )

    def ask(self, row: Row, timeout: float) -> dict[str, Any] | None:
        """The child's answer, or None when it died or took longer than ``timeout`` seconds."""
        import select

        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            self.proc.stdin.write(json.dumps([row.op, row.params]) + "\n")
            self.proc.stdin.flush()
            deadline = time.monotonic() + timeout
            # poll: a dead child's pipe can stay open (inherited by a grandchild), so never block
            while not select.select([self.proc.stdout], [], [], 1.0)[0]:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.proc.kill()
                    return None
            line = self.proc.stdout.readline()
        except (BrokenPipeError, OSError):
            return None
        return json.loads(line) if line else None

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        self.proc.wait(timeout=30)


def _pooled(rows: Sequence[Row], policy: str, device: str, workers: int, timeout: float) -> Iterator[Result]:
    todo: Queue[Row] = Queue()
    for r in rows:
        todo.put(r)
    done: Queue[Result | None] = Queue()

    def serve() -> None:
        w = _Worker(policy, device)
        while True:
            try:
                row = todo.get_nowait()
            except Empty:
                break
            got = w.ask(row, timeout)
            if got is None:
                code = w.proc.wait()
                why = "timeout" if code == -9 else f"signal {-code}" if code < 0 else f"exit code {code}"
                crashed = f"the worker process crashed ({why})"
                done.put(
                    Result(
                        row.op, row.name, "FAIL", crashed, device=device, accepted=upstream_verdict(row)[0]
                    )
                )
                w = _Worker(policy, device)
            else:
                done.put(Result(**got))
        w.close()
        done.put(None)

    threads = [threading.Thread(target=serve, daemon=True) for _ in range(max(1, workers))]
    for t in threads:
        t.start()
    alive = len(threads)
    while alive:
        res = done.get()
        if res is None:
            alive -= 1
        else:
            yield res
    for t in threads:
        t.join()


def iter_results(
    rows: Iterable[Row],
    policy: Policy = "upstream",
    device: str = "CPU",
    *,
    workers: int = 0,
    isolate: bool = False,
    progress: bool | None = None,
) -> Iterator[Result]:
    """Results as they come (worker order), with a tqdm bar on stderr.  ``workers=0`` runs in
    this process; ``isolate`` (or ``workers > 0``) runs in child processes."""
    from tqdm import tqdm

    if policy not in ("upstream", "none"):
        raise ValueError(f"policy={policy!r} is not valid (expected 'upstream' or 'none')")
    todo = list(rows)
    if workers < 0:
        raise ValueError(f"workers={workers} is not valid (expected 0 or more)")
    source: Iterable[Result]
    if workers or isolate:
        source = _pooled(todo, policy, device, max(1, workers), CASE_TIMEOUT_S)
    else:
        source = (run_row(r, policy, device) for r in todo)
    bar = tqdm(source, total=len(todo), desc=f"test-backend-ops {device} (policy {policy})", unit="case",
               file=sys.stderr, leave=False, disable=not progress if progress is not None else None)  # fmt: skip
    yield from bar


def run(
    rows: Iterable[Row] | None = None,
    policy: Policy = "upstream",
    device: str = "CPU",
    *,
    workers: int = 0,
    isolate: bool = False,
    progress: bool | None = None,
) -> pd.DataFrame:
    """The catalogue as a DataFrame: one row per case (op, case, status, detail, err, max_err)."""
    import pandas as pd

    todo = read_rows() if rows is None else list(rows)
    results = list(iter_results(todo, policy, device, workers=workers, isolate=isolate, progress=progress))
    return pd.DataFrame([asdict(r) for r in results], columns=[*Result.__dataclass_fields__])


def per_op(results: pd.DataFrame) -> pd.DataFrame:
    """Totals per op: one column per status, rows and the share passing."""
    import pandas as pd

    t = pd.crosstab(results["op"], results["status"]).reindex(columns=list(STATUSES), fill_value=0)
    t["rows"] = t.sum(axis=1)
    t["passed %"] = (100.0 * t["OK"] / t["rows"]).round(1)
    return t.sort_values("rows", ascending=False)


if __name__ == "__main__":
    _worker_main()


def main(
    rows: Sequence[Row],
    policy: Policy = "upstream",
    device: str = "CPU",
    *,
    workers: int = 0,
    isolate: bool = False,
    progress: bool | None = None,
    out: Any = None,
) -> int:
    """``ovkit test-ops --catalogue test-backend-ops``: one line per case, totals per op, then the
    summary; 1 on any FAIL."""
    import pandas as pd
    from tqdm import tqdm

    stream = out or sys.stdout
    print(f"Testing {device} (test-backend-ops catalogue, {len(rows)} cases, policy {policy})", file=stream)
    results = []
    for r in iter_results(rows, policy, device, workers=workers, isolate=isolate, progress=progress):
        results.append(r)
        tqdm.write(r.line(), file=stream)
    df = pd.DataFrame([asdict(r) for r in results], columns=[*Result.__dataclass_fields__])
    if results:
        print("\nTotals per op:", file=stream)
        print(per_op(df).to_string(), file=stream)
    counts = {s: int((df["status"] == s).sum()) for s in STATUSES}
    ran = counts["OK"] + counts["FAIL"]
    print(f"\n  {counts['OK']}/{ran} tests passed; " + ", ".join(f"{n} {s}" for s, n in counts.items() if s not in ("OK",)),
          file=stream)  # fmt: skip
    print(f"  Backend {device}: {'FAIL' if counts['FAIL'] else 'OK'}", file=stream)
    return 1 if counts["FAIL"] else 0
