"""Run catalogue cases: the support policy first, then ovkit's graph on the device against ggml,
in worker processes (costliest first, small ones batched into one compile; a crash costs its case)."""

from __future__ import annotations

import json
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from functools import partial
from pathlib import Path
from queue import Empty, Queue
from typing import TYPE_CHECKING, Any, Literal, cast

import numpy as np

from ovkit.catalogue import backend_ops
from ovkit.catalogue.case import Case, build_ovkit, draw_all, ggml_inputs, oracle_inputs, ovkit_graph
from ovkit.catalogue.result import STATUSES, Result, Status, error_line, judge, progress_bar
from ovkit.child import Child, ChildCrashed, ChildTimedOut, serve
from ovkit.errors import OvkitError
from ovkit.ops import verdict_csv
from ovkit.runtime import Core

if TYPE_CHECKING:
    import pandas as pd

Policy = Literal["upstream", "none"]
#: A case taking longer than this in a worker process is stopped and reported as a FAIL.
CASE_TIMEOUT_S = 600.0
#: The largest case list read (the shipped half of test-backend-ops' catalogue is 1.2 MiB).
MAX_CASE_LIST_BYTES = 64 << 20


@dataclass(frozen=True, slots=True)
class Row:
    """One case list row: test-backend-ops' op name and parameters."""

    op: str
    params: str

    @property
    def name(self) -> str:
        return f"{self.op}({self.params})"


def read_rows(path: str | Path | None = None) -> list[Row]:
    """A case list CSV (``op_name``, ``op_params``), by default the shipped half of test-backend-ops'
    catalogue."""
    import csv
    import io

    from ovkit.files import read_text

    p = Path(path) if path is not None else verdict_csv.SHIPPED
    what = "a case list CSV with columns op_name,op_params"
    text = read_text(p, max_bytes=MAX_CASE_LIST_BYTES, what=what)
    reader = csv.DictReader(io.StringIO(text, newline=""))
    try:
        missing = [c for c in ("op_name", "op_params") if c not in (reader.fieldnames or ())]
        if missing:
            raise ValueError(
                f"case list {str(p)!r}: column {missing[0]!r} missing (expected columns op_name,op_params; "
                f"found {', '.join(reader.fieldnames or ()) or 'none'})"
            )
        return [Row((r["op_name"] or "").strip(), (r["op_params"] or "").strip()) for r in reader]
    except csv.Error as exc:  # a field past csv's limit, a NUL: not a case list
        raise ValueError(f"case list {str(p)!r}: not a CSV case list ({exc}; expected {what})") from None


def stratified(rows: Sequence[Row], n: int, seed: int = 0, per_op: int = 3) -> list[Row]:
    """About ``n`` rows, each op's share but at least ``per_op`` of its rows."""
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


# -- One case --------------------------------------------------------------------------------------


def _ovkit_gap(exc: BaseException) -> bool:
    """An ovkit gap (a builder method or tensor attribute it lacks, a node it cannot translate)."""
    from ovkit.ir import GraphIR, Tensor, TranslationGapError

    if isinstance(exc, AttributeError):
        return isinstance(exc.obj, (GraphIR, Tensor))
    return isinstance(exc, TranslationGapError)


def upstream_verdict(row: Row, device_class: str = "CPU") -> tuple[bool, str]:
    """The backend's ``supports_op`` on the case's output node (at the shipped verdicts' revision)
    and the reason of a rejection."""
    from ovkit.catalogue.verdicts import Unexpressible, build_case
    from ovkit.ops.policy import check_op

    try:
        info = build_case(row.op, row.params)
    except Unexpressible as exc:
        return False, f"unexpressible: {exc}"
    d = check_op(info, device_class, upstream_exact=True, revision=verdict_csv.CSV_REVISION)
    return d.supported, d.reason


#: Compile hints of a run: ``exact`` = f32 inference precision (ggml's numbers); ``upstream`` =
#: upstream's naive path (its execution-mode hint, no precision hint: bf16 MatMuls where there is bf16).
HINTS: tuple[str, ...] = ("exact", "upstream")
Reference = Literal["ggml", "numpy"]


def hints_config(g: Any, out: Any, hints: str) -> Any:
    """The run config of ``hints`` for ``out``'s graph (None: ``Graph.compute``'s own, exact f32)."""
    from ovkit.engine import DEFAULT_RUN_CONFIG, naive_run_config

    if hints not in HINTS:
        raise ValueError(f"hints={hints!r} is not valid (expected one of: {', '.join(HINTS)})")
    if hints == "exact":
        return None
    first = next((t.op for t in g.topo([out]) if not t.is_leaf), None)
    return naive_run_config(first, DEFAULT_RUN_CONFIG)


def policy_rejection(g: Any, out: Any, device: str) -> str | None:
    """The first rejection's reason of ovkit's policy for ``device``'s class on ``out``'s graph, or None."""
    from ovkit.devices import device_class
    from ovkit.ops.policy import graph_decisions

    for t, decision in graph_decisions(g, [out], str(device_class(device))):
        if not decision.supported:
            return decision.reason or f"{t.describe()} rejected"
    return None


def effective_precision(core: Core | None) -> str:
    """The inference precision the device reported for the engine's last run."""
    from ovkit.engine import get_engine

    runner = get_engine(core).last_runner
    return (runner.graph.effective.inference_precision or "") if runner is not None else ""


@dataclass(frozen=True, slots=True)
class _Ready:
    """A case with its reference computed, waiting for its OpenVINO inference (model, inputs)."""

    case: Case
    base: dict[str, Any]
    model: Any
    inputs: list[np.ndarray]
    out: Any
    expected: np.ndarray


def _compile(model: Any, device: str, threads: int | None, *, core: Core | None) -> Any:
    """``model`` compiled for exact f32 on ``threads`` threads, outside the engine's cache."""
    from ovkit.devices import device_class as class_of
    from ovkit.engine import EngineError, RunConfig, get_engine

    # (a simulated device compiles on the real CPU and makes f32 exact there itself)
    props = RunConfig(inference_precision="f32", num_threads=threads).properties(class_of(device))
    try:
        return get_engine(core).core.compile_model(model, device, props)
    except RuntimeError as exc:
        lines = [x for x in str(exc).strip().splitlines() if x.strip()]
        raise EngineError(f"compile_model failed on {device}: {lines[-1] if lines else exc}") from exc


def _infer(
    ready: Sequence[_Ready], device: str, threads: int | None, *, core: Core | None
) -> list[np.ndarray | Exception]:
    """Each case's OpenVINO output or exception, the cases merged into one model compiled once."""
    import openvino as ov

    from ovkit.ir import from_model_output

    try:
        model = ready[0].model if len(ready) == 1 else ov.Model(
            [x for r in ready for x in r.model.get_results()],
            [p for r in ready for p in r.model.get_parameters()],
        )  # fmt: skip
        request = _compile(model, device, threads, core=core).create_infer_request()
        request.infer([a for r in ready for a in r.inputs])
        return [np.asarray(from_model_output(r.out, request.get_output_tensor(i).data.copy()))
                for i, r in enumerate(ready)]  # fmt: skip
    except Exception as exc:  # one case spoils a batch: each on its own says which
        return (
            [exc] if len(ready) == 1 else [x for r in ready for x in _infer([r], device, threads, core=core)]
        )


class _NoOracle(OvkitError):
    """ggml's CPU backend (the installed ggml-python) does not support a node of the case."""


def _ggml_result(case: Case, leaves: Mapping[str, Any], threads: int | None) -> np.ndarray:
    """The case on ggml's CPU backend, asked ``supports_op`` on every node first (a node without a
    kernel would abort the process)."""
    from ovkit import oracle

    n_threads = threads if threads is not None else oracle.DEFAULT_N_THREADS
    s = oracle.program_session(case.program, dict(leaves), n_threads=n_threads)
    try:
        g = s.g
        for t in s.tensors():
            if t.contents.op != 0 and not g.ggml_backend_supports_op(s.backend, t):
                node = oracle.GgmlTensor(t)
                srcs = [oracle.GgmlTensor(t.contents.src[i]).dtype for i in range(2) if t.contents.src[i]]
                raise _NoOracle(
                    f"the installed ggml's CPU backend does not support {node.op}"
                    f"({', '.join(srcs)} -> {node.dtype}): nothing to compare with"
                )
        s.run()
        return np.asarray(s.results()[0])
    finally:
        s.close()


def _prepare(case: Case, device: str, policy: Policy, reference: Reference, hints: str,
             threads: int | None, verdict: tuple[bool, str] | None, *,
             core: Core | None) -> Result | _Ready:  # fmt: skip
    """:func:`run_case` up to the inference: the verdict when it comes earlier, else the case ready."""
    from ovkit.engine import compute_graph
    from ovkit.ir import GraphError, UnsupportedOpError
    from ovkit.quant import KNOWN_TYPES

    base: dict[str, Any] = {"op": case.op, "case": case.name, "device": device, "reference": reference}
    known = {q.lower() for q in KNOWN_TYPES}
    for leaf in case.leaves:
        if leaf.quantized and leaf.dtype.lower() not in known:
            return Result(**base, status="not translatable", detail=f"ovkit has no {leaf.dtype} weights")
    # translatable? asked of the graph without values first: drawing and quantizing the inputs
    # (ggml's IQ types build their grids for seconds) is wasted on a case ovkit cannot run
    try:
        gap = _untranslated_node(*ovkit_graph(case))
        if gap is None:
            ggml_leaves = ggml_inputs(case, draw_all(case))
            g, out, feed = build_ovkit(case, ggml_leaves)
    except Exception as exc:
        # ovkit's builder refusing a graph (a sub-op, type or layout) is a gap, not a wrong result
        # (the builder tests keep the case graphs themselves equal to test-backend-ops')
        if _ovkit_gap(exc) or isinstance(exc, GraphError):
            return Result(**base, status="not translatable", detail=error_line(exc))
        return Result(**base, status="FAIL", detail=f"build: {error_line(exc)}")
    if gap is not None:
        return Result(**base, status="not translatable", detail=gap)
    if verdict is None:  # ovkit's own policy for the device's class
        reason = policy_rejection(g, out, device)
        verdict = (reason is None, reason or "")
    base["accepted"] = verdict[0]
    if policy == "upstream" and not verdict[0]:
        return Result(**base, status="not supported", detail=verdict[1])
    try:
        model, inputs = (None, []) if policy == "upstream" else g.translation(out, feed)
    except Exception as exc:
        status: Status = "not translatable" if _ovkit_gap(exc) else "FAIL"
        return Result(**base, status=status, detail=error_line(exc))
    try:
        if reference == "ggml":
            expected = _ggml_result(case, oracle_inputs(case, ggml_leaves), threads)
        else:
            expected = np.asarray(g.compute(out, feed, mode="reference"))
    except _NoOracle as exc:
        return Result(**base, status="no case", detail=str(exc))
    except Exception as exc:
        return Result(**base, status="FAIL", detail=f"reference ({reference}): {error_line(exc)}")
    if policy == "upstream":  # accepted: the engine's own path (its policy check of every node)
        try:
            actual = compute_graph(g, [out], feed, device, core=core, config=hints_config(g, out, hints))[0]
        except UnsupportedOpError as exc:  # a node it refuses, as test-backend-ops' test mode asks
            return Result(**base, status="not supported", detail=f"(every node asked) {exc}")
        except Exception as exc:
            return Result(**base, status="FAIL", detail=error_line(exc))
        base["precision"] = effective_precision(core)
        return _judged(_Ready(case, base, model, inputs, out, expected), np.asarray(actual))
    return _Ready(case, base, model, inputs, out, expected)


def _judged(r: _Ready, actual: np.ndarray | Exception) -> Result:
    """The verdict on ovkit's output (or the exception that stopped it) against the reference."""
    if isinstance(actual, Exception):
        return Result(**r.base, status="FAIL", detail=error_line(actual))
    return judge(r.case, actual, r.expected, r.base["reference"], **r.base)


def run_case(case: Case, device: str = "CPU", *, core: Core | None = None,
             policy: Policy = "upstream", reference: Reference = "ggml", hints: str = "exact",
             threads: int | None = None, verdict: tuple[bool, str] | None = None) -> Result:  # fmt: skip
    """One case: ovkit's graph, the support policy (``"upstream"``: ``verdict`` or ovkit's own for
    ``device``'s class; ``"none"``: run what translates), a run on ``device``, the comparison."""
    r = _prepare(case, device, policy, reference, hints, threads, verdict, core=core)
    return r if isinstance(r, Result) else _judged(r, _infer([r], device, threads, core=core)[0])


def perf_case(c: Case, device: str, *, core: Core | None = None, min_seconds: float = 0.2,
              max_runs: int = 200, hints: str = "exact", vs_ggml: bool = False) -> Result:  # fmt: skip
    """Median time per steady-state run (compile excluded) and GFLOPS or GB/s."""
    from ovkit import oracle
    from ovkit.engine import compute_graph

    base: dict[str, Any] = {"op": c.op, "case": c.name, "device": device}
    try:
        leaves = ggml_inputs(c, draw_all(c))
        g, out, feed = build_ovkit(c, leaves)
    except Exception as exc:
        return Result(**base, status="FAIL", detail=f"build: {type(exc).__name__}: {exc}")
    reason = policy_rejection(g, out, device)
    if reason is not None:
        return Result(**base, status="not supported", detail=reason)
    cfg = hints_config(g, out, hints)
    try:
        result = compute_graph(g, [out], feed, device, core=core, config=cfg)[0]  # compile + warm up
        compute_graph(g, [out], feed, device, core=core, config=cfg)
        base["precision"] = effective_precision(core)
        times: list[float] = []
        start = time.perf_counter()
        while len(times) < 3 or (time.perf_counter() - start < min_seconds and len(times) < max_runs):
            t0 = time.perf_counter()
            compute_graph(g, [out], feed, device, core=core, config=cfg)
            times.append(time.perf_counter() - t0)
    except Exception as exc:
        return Result(**base, status="FAIL", detail=error_line(exc))
    seconds = statistics.median(times)
    if vs_ggml and oracle.ggml_available():
        runs = max(3, min(len(times), 50))
        time.sleep(0.1)  # let OpenVINO's worker threads go idle before ggml's OpenMP threads run
        bench = oracle.ggml_benchmark_program(c.program, leaves, n_runs=runs, warmup=2)
        base["ggml_us_per_run"] = bench.median_s * 1e6
    if c.flops:
        return Result(**base, status="OK", us_per_run=seconds * 1e6, gflops=c.flops / seconds / 1e9)
    weights = sum(lf.nbytes for lf in leaves.values() if isinstance(lf, oracle.QuantArray))  # block bytes
    moved = c.nbytes or sum(a.nbytes for a in feed.values()) + weights + np.asarray(result).nbytes
    return Result(**base, status="OK", us_per_run=seconds * 1e6, gbps=moved / seconds / 1e9)


def run_row(row: Row, policy: Policy = "upstream", device: str = "CPU", *,
            core: Core | None = None, threads: int | None = None) -> Result:  # fmt: skip
    """:func:`run_case` of one case list row (with the backend's verdict), timed."""
    return run_rows([row], policy, device, threads=threads, core=core)[0]


def run_rows(rows: Sequence[Row], policy: Policy = "upstream", device: str = "CPU", *,
             core: Core | None = None, threads: int | None = None) -> list[Result]:  # fmt: skip
    """:func:`run_row` of each row, their inferences merged into one compile (shared in ``seconds``)."""
    from ovkit.devices import device_class

    done: list[Result | _Ready] = []
    seconds: list[float] = []
    for row in rows:
        t0 = time.perf_counter()
        accepted, reason = upstream_verdict(row, str(device_class(device)))
        try:
            case = backend_ops.build(row.op, row.params)
        except backend_ops.NoCase as exc:
            done.append(Result(row.op, row.name, "no case", str(exc), device=device, accepted=accepted))
        else:
            done.append(
                _prepare(case, device, policy, "ggml", "exact", threads, (accepted, reason), core=core)
            )
        seconds.append(time.perf_counter() - t0)
    ready = [r for r in done if isinstance(r, _Ready)]
    t0 = time.perf_counter()
    actual = (
        dict(zip(map(id, ready), _infer(ready, device, threads, core=core), strict=True)) if ready else {}
    )
    share = (time.perf_counter() - t0) / max(1, len(ready))
    out = []
    for r, s in zip(done, seconds, strict=True):
        if isinstance(r, _Ready):
            r, s = _judged(r, actual[id(r)]), s + share
        out.append(replace(r, seconds=round(s, 4)))
    return out


def _untranslated_node(g: Any, out: Any) -> str | None:
    """The first op node of ``out``'s graph ovkit has no OpenVINO translation for, as a reason."""
    from ovkit.ir import VIEW_OPS
    from ovkit.ops.translate import TRANSLATORS

    for t in g.value_nodes([out]):
        if not t.is_leaf and t.op not in VIEW_OPS and t.op_key not in TRANSLATORS:
            return f"no OpenVINO translation for {t.op_key}"
    return None


def translatable(row: Row) -> tuple[bool, str]:
    """Whether ovkit builds and translates the row's graph (without running it), else why not."""
    try:
        gap = _untranslated_node(*ovkit_graph(backend_ops.build(row.op, row.params)))
    except backend_ops.NoCase as exc:
        return False, f"no case: {exc}"
    except Exception as exc:
        return False, error_line(exc)
    return gap is None, gap or ""


def coverage_rows(
    rows: Sequence[Row], device_class: str = "CPU", progress: bool | None = None
) -> pd.DataFrame:
    """Every row classified without running it: the backend's verdict and ovkit's translation (its
    ``status`` OK when ovkit translates it)."""
    import pandas as pd

    out = []
    for r in progress_bar(rows, "classifying", progress):
        accepted, why = upstream_verdict(r, device_class)
        ok, reason = translatable(r)
        status = "OK" if ok else "no case" if reason.startswith("no case") else "not translatable"
        out.append({"op": r.op, "case": r.name, "status": status, "accepted": accepted, "translatable": ok,
                    "reason": reason or why})  # fmt: skip
    return pd.DataFrame(out, columns=["op", "case", "status", "accepted", "translatable", "reason"])


# -- Many cases: worker processes ------------------------------------------------------------------


#: Environment variable telling a worker process how many threads each side may use.
THREADS_ENV = "OVKIT_CATALOGUE_THREADS"


def _worker_main() -> None:
    """``python -m ovkit.catalogue.run POLICY DEVICE`` (test-backend-ops rows) or ``... MODE DEVICE
    REFERENCE HINTS VS_GGML [PROFILE]`` (curated cases, ``ovkit test-ops --isolate``; VS_GGML 0 or
    1): JSON lists of rows in, of results out."""
    from ovkit.catalogue import curated
    from ovkit.usage import make_core

    kind, device, *rest = sys.argv[1:]
    threads = int(os.environ.get(THREADS_ENV, "0")) or None
    reference, hints, vs_ggml, *profile = rest or ["", "", "0"]
    core = None if kind in ("upstream", "none") else make_core(profile[0] if profile else None)

    def run(rows: list[Row]) -> list[Result]:
        if core is None:  # test-backend-ops rows
            return run_rows(rows, kind, device, threads=threads)  # type: ignore[arg-type]
        cases = [curated.find(r.name) for r in rows]
        if kind == "perf":
            return [perf_case(c, device, hints=hints, vs_ggml=vs_ggml == "1", core=core) for c in cases]
        return [
            run_case(c, device, reference=reference, hints=hints, threads=threads, core=core)  # type: ignore[arg-type]
            for c in cases
        ]

    serve(lambda line: json.dumps([asdict(r) for r in run([Row(*x) for x in json.loads(line)])]))


#: How a worker process starts (its arguments: :func:`_worker_main`).
WORKER_COMMAND: tuple[str, ...] = (sys.executable, "-m", "ovkit.catalogue.run")


def check_workers(workers: int, flag: str = "workers=") -> int:
    """``workers`` when 0 (run in this process) up to twice the cores, else a ValueError naming it."""
    cores = os.cpu_count() or 1
    if not 0 <= workers <= 2 * cores:
        raise ValueError(
            f"{flag}{workers}: expected 0 (in this process) to {2 * cores} (twice the {cores} cores)"
        )
    return workers


def _abort_message(text: str) -> str:
    """A crashed worker's last line (``ggml.c:7717: GGML_ASSERT(imatrix != NULL) failed``)."""
    lines = [x.strip() for x in text.splitlines() if x.strip()]
    if not lines:
        return ""
    asserts = [x for x in lines if "GGML_ASSERT" in x or "GGML_ABORT" in x]
    last = (asserts or lines)[-1]
    where, _, what = last.partition(": ")
    return f"{where.rsplit('/', 1)[-1]}: {what}" if what and "/" in where else last[:200]


def _worker(argv: Sequence[str], threads: int) -> Child:
    """A worker child answering rows (a SIGILL names ggml-python's build: the oracle it runs)."""
    from ovkit.native import sigill_hint_for

    # ovkit.child adds GGML_NO_BACKTRACE=1: a ggml abort ends the worker at once
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), **{THREADS_ENV: str(threads)})
    return Child(argv, env=env, sigill_hint=partial(sigill_hint_for, "ggml-python-openvino"))


def _ask(worker: Child, rows: Sequence[Row], timeout: float) -> list[dict[str, Any]] | str:
    """The worker's answers about ``rows``, or why it gave none (its death and last words)."""
    try:
        return cast(
            list[dict[str, Any]],
            json.loads(worker.ask(json.dumps([[r.op, r.params] for r in rows]), timeout)),
        )
    except ChildTimedOut:
        return "the worker process crashed (timeout)"
    except ChildCrashed as exc:
        said = _abort_message(exc.death.stderr)
        return f"the worker process crashed ({exc.death.describe()})" + (f": {said}" if said else "")


def cost(row: Row) -> int:
    """A row's expected run time as the number of its input elements (no builder: 0)."""
    try:
        case = backend_ops.build(row.op, row.params)
    except Exception:
        return 0
    return sum(int(np.prod(leaf.ne, dtype=np.int64)) for leaf in case.leaves)


#: ggml builds these types' quantization grids on their first use in a process: 1 to 12 s of
#: processor time each (iq1_s, iq1_m share one), so their rows all go to one worker.
GRID_TYPES = ("iq1_s", "iq1_m", "iq2_xxs", "iq2_xs", "iq2_s", "iq3_xxs", "iq3_s")


def _pinned(row: Row) -> bool:
    """Whether the row quantizes to a :data:`GRID_TYPES` type."""
    import re

    return any(t in GRID_TYPES for t in re.findall(r"=(iq\w+?)(?:,|$)", row.params))


#: Rows asked of a worker at once (their compiles merged into one), and the largest cost
#: (input elements) of a row that joins such a batch: bigger rows go alone.
BATCH_ROWS = 8
BATCH_MAX_COST = 1 << 22


def pooled(
    rows: Sequence[Row],
    argv: Sequence[str],
    workers: int,
    failed: Callable[[Row, str], Result],
    timeout: float = CASE_TIMEOUT_S,
) -> Iterator[tuple[int, Result]]:
    """(index, result) as ``workers`` children of ``argv`` finish them: costliest rows first, small
    ones batched, :data:`GRID_TYPES` rows to the first worker; a crashed batch is asked again row by
    row, and ``failed(row, why)`` is the result of a row its worker crashed on."""
    threads = max(1, (os.cpu_count() or 1) // workers)  # each worker's share of the cores
    started = [_worker(argv, threads) for _ in range(workers)]  # they start while we sort
    costs = [cost(r) for r in rows]
    pinned: Queue[tuple[int, Row]] = Queue()
    todo: Queue[tuple[int, Row]] = Queue()
    for i in sorted(range(len(rows)), key=lambda i: -costs[i]):
        (pinned if _pinned(rows[i]) else todo).put((i, rows[i]))
    done: Queue[tuple[int, Result] | None] = Queue()

    def take(queues: tuple[Queue[tuple[int, Row]], ...]) -> list[tuple[int, Row]]:
        for q in queues:
            batch: list[tuple[int, Row]] = []
            try:
                while len(batch) < BATCH_ROWS:
                    batch.append(q.get_nowait())
                    if costs[batch[0][0]] > BATCH_MAX_COST:
                        break
            except Empty:
                pass
            if batch:
                return batch
        return []

    def serve(first: Child, queues: tuple[Queue[tuple[int, Row]], ...]) -> None:
        w, spare = first, None
        again: list[list[tuple[int, Row]]] = []
        while batch := (again.pop() if again else take(queues)):
            got = _ask(w, [row for _, row in batch], timeout)
            if not isinstance(got, str):
                for (i, _), r in zip(batch, got, strict=True):
                    done.put((i, Result(**r)))
                continue
            crashed = got
            w.close()
            # after one crash keep a replacement started: the next crash costs no start-up
            w, spare = spare or _worker(argv, threads), _worker(argv, threads)
            if len(batch) > 1:
                again += [[x] for x in batch]
                continue
            done.put((batch[0][0], failed(batch[0][1], crashed)))
        for x in (w, spare):
            if x is not None:
                x.close()
        done.put(None)

    pool = [
        threading.Thread(target=serve, args=(w, (pinned, todo) if k == 0 else (todo,)), daemon=True)
        for k, w in enumerate(started)
    ]
    for t in pool:
        t.start()
    alive = len(pool)
    while alive:
        res = done.get()
        if res is None:
            alive -= 1
        else:
            yield res
    for t in pool:
        t.join()


def _indexed(
    rows: Sequence[Row], policy: Policy, device: str, workers: int, isolate: bool, progress: bool | None
) -> Iterator[tuple[int, Result]]:
    if policy not in ("upstream", "none"):
        raise ValueError(f"policy={policy!r} is not valid (expected 'upstream' or 'none')")
    check_workers(workers)
    source: Iterable[tuple[int, Result]]
    if workers or isolate:
        from ovkit.devices import device_class

        cls = str(device_class(device))  # a crashed row's verdict, for the device it ran for

        def failed(row: Row, why: str) -> Result:
            return Result(
                row.op, row.name, "FAIL", why, device=device, accepted=upstream_verdict(row, cls)[0]
            )

        source = pooled(rows, [*WORKER_COMMAND, policy, device], max(1, workers), failed)
    else:
        source = ((i, run_row(r, policy, device)) for i, r in enumerate(rows))
    yield from progress_bar(source, f"test-backend-ops {device} (policy {policy})", progress, total=len(rows))


def frame(results: Iterable[Result]) -> pd.DataFrame:
    """Results as a DataFrame, one row per case, columns the :class:`Result` fields."""
    import pandas as pd

    return pd.DataFrame([asdict(r) for r in results], columns=[*Result.__dataclass_fields__])


def run(rows: Iterable[Row] | None = None, policy: Policy = "upstream", device: str = "CPU", *,
        workers: int = 0, isolate: bool = False, progress: bool | None = None) -> pd.DataFrame:  # fmt: skip
    """The catalogue as a DataFrame, one row per case in the rows' order."""
    todo = read_rows() if rows is None else list(rows)
    got = dict(_indexed(todo, policy, device, workers, isolate, progress))
    return frame(got[i] for i in range(len(todo)))


def per_op(results: pd.DataFrame) -> pd.DataFrame:
    """Totals per op: one column per status, rows and the share passing."""
    import pandas as pd

    t = pd.crosstab(results["op"], results["status"]).reindex(columns=list(STATUSES), fill_value=0)
    t["rows"] = t.sum(axis=1)
    t["passed %"] = (100.0 * t["OK"] / t["rows"]).round(1)
    return t.sort_values("rows", ascending=False)


def main(rows: Sequence[Row], policy: Policy = "upstream", device: str = "CPU", *,
         workers: int = 0, isolate: bool = False, progress: bool | None = None,
         out: Any = None) -> int:  # fmt: skip
    """``ovkit test-ops --catalogue test-backend-ops``: a line per case, totals per op; 1 on a FAIL."""
    from tqdm import tqdm

    stream = out or sys.stdout
    print(f"Testing {device} (test-backend-ops catalogue, {len(rows)} cases, policy {policy})", file=stream)
    print(f"  the backend's verdict: ovkit's copy of its supports_op (revision {verdict_csv.CSV_REVISION}),"
          " not a column of the case list", file=stream)  # fmt: skip
    got: dict[int, Result] = {}
    for i, r in _indexed(list(rows), policy, device, workers, isolate, progress):
        got[i] = r
        tqdm.write(r.line(), file=stream)
    df = frame(got[i] for i in sorted(got))
    if got:
        print("\nTotals per op:", file=stream)
        print(per_op(df).to_string(), file=stream)
    counts = {s: int((df["status"] == s).sum()) for s in STATUSES}
    ran = counts["OK"] + counts["FAIL"]
    others = ", ".join(f"{n} {s}" for s, n in counts.items() if s != "OK")
    print(f"\n  {counts['OK']}/{ran} tests passed; {others}", file=stream)
    print(f"  Backend {device}: {'FAIL' if counts['FAIL'] else 'OK'}", file=stream)
    return 1 if counts["FAIL"] else 0


if __name__ == "__main__":
    _worker_main()
