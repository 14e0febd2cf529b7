"""``ovkit test-ops``, after llama.cpp's ``test-backend-ops``: ``mode test`` runs each curated case
the device's policy accepts and judges it against ggml (or ovkit's numpy reference); ``mode perf``
times larger cases."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Literal

from ovkit.catalogue import curated
from ovkit.catalogue.case import Case
from ovkit.catalogue.result import Result, progress_bar
from ovkit.catalogue.run import HINTS, frame, perf_case, run_case
from ovkit.runtime import Core

if TYPE_CHECKING:
    import pandas as pd

Reference = Literal["auto", "ggml", "numpy"]


#: The curated set each mode runs unless told another (``case_set``, ``--set``).
DEFAULT_SET: dict[str, str] = {"test": curated.TEST_OPS, "perf": curated.PERF}


def build_catalogue(case_set: str | None = None, mode: str = "test") -> list[Case]:
    """The curated cases of ``case_set`` (by default the set ``mode`` runs)."""
    if mode not in DEFAULT_SET:
        raise ValueError(f"mode={mode!r} is not valid (expected 'test' or 'perf')")
    return list(curated.cases(case_set or DEFAULT_SET[mode]))


def build_perf_catalogue() -> list[Case]:
    """The curated cases ``mode perf`` times."""
    return build_catalogue(mode="perf")


@dataclass(frozen=True, slots=True)
class Summary:
    """Totals of a run."""

    device: str
    mode: str
    reference: str
    passed: int
    failed: int
    unsupported: int

    @property
    def ok(self) -> bool:
        return self.failed == 0

    def lines(self) -> list[str]:
        return [f"  {self.passed}/{self.passed + self.failed} tests passed, {self.unsupported} not supported",
                f"  Backend {self.device}: {'OK' if self.ok else 'FAIL'}"]  # fmt: skip


def select(cases: Iterable[Case], ops: Sequence[str] | str | None) -> list[Case]:
    """Cases whose op key (``UNARY.GELU`` or ``UNARY:GELU``), op or sub-op is in ``ops``."""
    if ops is None:
        return list(cases)
    wanted = {o.upper().replace(":", ".") for o in ([ops] if isinstance(ops, str) else ops)}
    return [c for c in cases if wanted & op_keys(c)]


def op_keys(c: Case) -> set[str]:
    """What ``-o`` picks a case by: its op key, op and sub-op (``UNARY.GELU``, ``UNARY``, ``GELU``)."""
    return {c.op, c.op.split(".")[0], c.op.split(".")[-1]}


def _resolve(device: str | None, *, core: Core | None) -> str:
    if device is not None:
        return device
    from ovkit.engine import get_engine

    return get_engine(core).selected_device()


def _reference_kind(reference: Reference) -> str:
    from ovkit import oracle

    if reference == "ggml" and not oracle.ggml_available():
        raise RuntimeError(
            "reference 'ggml' asked for but ggml-python is not installed (pip install ggml-python)"
        )
    if reference in ("ggml", "numpy"):
        return reference
    return "ggml" if oracle.ggml_available() else "numpy"


def iter_results(mode: str = "test", ops: Sequence[str] | str | None = None,
                 device: str | None = None, reference: Reference = "auto", *,
                 core: Core | None = None, progress: bool | None = None,
                 cases: Sequence[Case] | None = None, hints: str = "exact",
                 vs_ggml: bool = False, case_set: str | None = None, isolate: bool = False,
                 workers: int = 2) -> Iterator[Result]:  # fmt: skip
    """One result per case of ``cases`` (else the curated ``case_set``), a tqdm bar on stderr;
    ``isolate``: curated cases in ``workers`` worker processes, a crash the FAIL of its case."""
    if mode not in ("test", "perf"):
        raise ValueError(f"mode={mode!r} is not valid (expected 'test' or 'perf')")
    if hints not in HINTS:
        raise ValueError(f"hints={hints!r} is not valid (expected one of: {', '.join(HINTS)})")
    dev = _resolve(device, core=core)
    pool = cases if cases is not None else build_catalogue(case_set, mode)
    picked = select(pool, ops)
    ref = _reference_kind(reference) if mode == "test" else ""
    if isolate:  # on the catalogue's worker pool
        from ovkit.catalogue import run as catalogue

        profile = getattr(getattr(core, "profile", None), "name", None)
        flags = [mode, dev, ref or "auto", hints, str(int(vs_ggml)), *([profile] if profile else [])]
        rows = [catalogue.Row(c.op, c.params) for c in picked]
        # perf in one worker: a timing shares the cores with nothing
        got = catalogue.pooled(
            rows,
            [*catalogue.WORKER_COMMAND, *flags],
            1 if mode == "perf" else max(1, workers),
            lambda r, why: Result(r.op, r.name, "FAIL", why, device=dev),
        )
        done: dict[int, Result] = {}  # the workers finish out of order: yield in the cases' order
        following = 0
        for i, r in progress_bar(got, f"test-ops {mode} {dev} (isolated)", progress, total=len(rows)):
            done[i] = r
            while following in done:
                yield done.pop(following)
                following += 1
        return
    for c in progress_bar(picked, f"test-ops {mode} {dev}", progress):
        if mode == "test":
            yield run_case(c, dev, reference=ref, hints=hints, core=core)  # type: ignore[arg-type]
        else:
            yield perf_case(c, dev, hints=hints, vs_ggml=vs_ggml, core=core)


def summarize(results: Sequence[Result], mode: str, device: str, reference: str) -> Summary:
    """The totals of a run's ``results``."""
    n = {s: sum(r.status == s for r in results) for s in ("OK", "FAIL", "not supported")}
    return Summary(device, mode, reference, n["OK"], n["FAIL"], n["not supported"])


def test_ops(ops: Sequence[str] | str | None = None, device: str | None = None,
             reference: Reference = "auto", *, core: Core | None = None,
             progress: bool | None = None, hints: str = "exact",
             case_set: str | None = None) -> pd.DataFrame:  # fmt: skip
    """``mode test`` as a DataFrame (one row per case: op, case, status, detail, err, max_err, ...)."""
    return frame(list(iter_results("test", ops, device, reference, core=core, progress=progress,
                                    hints=hints, case_set=case_set)))  # fmt: skip


# Not a pytest test despite its name.
test_ops.__test__ = False  # type: ignore[attr-defined]


def perf_ops(ops: Sequence[str] | str | None = None, device: str | None = None, *,
             core: Core | None = None, progress: bool | None = None, hints: str = "exact",
             vs_ggml: bool = False) -> pd.DataFrame:  # fmt: skip
    """``mode perf`` as a DataFrame (us_per_run, gflops or gbps per case; ggml_us_per_run with
    ``vs_ggml=True``: ggml's own CPU backend timed on the same case)."""
    return frame(
        list(iter_results("perf", ops, device, progress=progress, hints=hints, vs_ggml=vs_ggml, core=core))
    )


def catalogue_table(mode: str = "test", case_set: str | None = None) -> pd.DataFrame:
    """The cases themselves (op, case label, inputs as ``name:type[ne]``) without running anything."""
    import pandas as pd

    rows = [(c.op, c.name, ", ".join(f"{lf.name}:{lf.dtype}{list(lf.ne)}" for lf in c.leaves))
            for c in build_catalogue(case_set, mode)]  # fmt: skip
    return pd.DataFrame(rows, columns=["op", "case", "inputs"])


def main(mode: str = "test", ops: Sequence[str] | str | None = None, device: str | None = None,
         reference: Reference = "auto", *, core: Core | None = None, as_json: bool = False,
         progress: bool | None = None, out: Any = None, isolate: bool = False, workers: int = 2,
         hints: str = "exact", vs_ggml: bool = False, case_set: str | None = None) -> int:  # fmt: skip
    """The CLI body: a line per case and the totals (or JSON); 1 on any failure.  ``isolate``: the
    cases in ``workers`` worker processes (a crash becomes a FAIL line)."""
    from tqdm import tqdm

    from ovkit.simulate import SimulatedCore

    stream = out or sys.stdout
    dev = _resolve(device, core=core)
    ref = _reference_kind(reference) if mode == "test" else ""
    simulated = isinstance(core, SimulatedCore)
    if not as_json:
        label = dev
        if isinstance(core, SimulatedCore):
            label += f" [SIMULATED {core.profile.name}: policy of the {dev} class, runs on the CPU]"
        hint_text = "" if hints == "exact" else f", {hints} hints"
        print(f"Testing {label} (mode {mode}{', reference ' + ref if ref else ''}{hint_text})", file=stream)
    source = iter_results(mode, ops, dev, reference, progress=progress, hints=hints, vs_ggml=vs_ggml,
                          case_set=case_set, isolate=isolate, workers=workers, core=core)  # fmt: skip
    results: list[Result] = []
    for r in source:
        results.append(r)
        if not as_json:
            tqdm.write(r.line(), file=stream)
    summary = summarize(results, mode, dev, ref)
    if as_json:
        counts = {"passed": summary.passed, "failed": summary.failed, "not_supported": summary.unsupported}
        payload = {"device": dev, "simulated": simulated, "mode": mode, "hints": hints, "reference": ref,
                   "summary": counts, "cases": [asdict(r) for r in results]}  # fmt: skip
        print(json.dumps(payload, indent=2), file=stream)
    else:
        print("\n".join(summary.lines()), file=stream)
    return 0 if summary.ok else 1


# -- Command line (``ovkit test-ops``; registered in ovkit.cli.COMMANDS). --------------------------
def add_cli_args(p: Any) -> None:
    """Arguments of ``ovkit test-ops`` (test-backend-ops' ``[mode] [-o op] [-b backend]``)."""
    add = p.add_argument
    add("mode", nargs="?", default="test", choices=("test", "perf"), help="test (default) or perf")
    add("-o", "--op", action="append", metavar="OP", help="only this op (repeatable), e.g. MUL_MAT, GELU")
    add("-b", "--device", metavar="DEVICE", help="device id (default: GGML_OPENVINO_DEVICE)")
    add("--reference", choices=("auto", "ggml", "numpy"), default="auto", help="reference (default auto)")
    add("--simulate", metavar="PROFILE", help="use a simulated device set (e.g. laptop)")
    add("--json", action="store_true", help="print JSON instead of text")
    add("--no-progress", action="store_true", help="no progress bar on stderr")
    add("--isolate", action="store_true", help="run in worker processes: a crash becomes a FAIL line")
    add("--vs-ggml", action="store_true", help="perf: also time ggml's CPU backend on each case")
    add("--set", choices=curated.SETS, help="the curated set to run (default: test-ops in mode test, perf "
        "in mode perf; ggml: the comparison set of the tests against ggml)")  # fmt: skip
    add("--catalogue", choices=("ovkit", "test-backend-ops"), default="ovkit", help="ovkit's own cases "
        "(default) or test-backend-ops' catalogue (the shipped half, or --cases)")  # fmt: skip
    add("--cases", metavar="FILE", help="test-backend-ops: a case list CSV (op_name,op_params)")
    add("--policy", choices=("upstream", "none"), default="upstream", help="test-backend-ops: upstream = "
        "only what the backend accepts (default); none = every case")  # fmt: skip
    add("--workers", type=int, default=2, metavar="N",
        help="worker processes (--isolate, test-backend-ops; 0: in this process; at most twice the cores)")  # fmt: skip
    add("--sample", type=int, metavar="N", help="test-backend-ops: a stratified sample of about N rows")
    add("--hints", choices=HINTS, default="exact", help="exact: f32 inference precision (default); "
        "upstream: the naive path's execution-mode hint")  # fmt: skip


def cli(args: Any) -> int:
    """Run ``ovkit test-ops`` from parsed arguments."""
    from ovkit.catalogue.run import check_workers
    from ovkit.usage import UsageError, make_core

    try:
        check_workers(args.workers, "--workers ")
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if args.catalogue == "test-backend-ops":  # test-backend-ops' own case list
        from ovkit.catalogue import run as catalogue

        return catalogue.main(backend_ops_rows(args), args.policy, args.device or "CPU", workers=args.workers,
                              isolate=args.isolate, progress=False if args.no_progress else None)  # fmt: skip
    core = make_core(args.simulate)
    if args.device is not None and args.device not in list(core.available_devices):
        raise UsageError(
            f"device {args.device!r} is not available (expected one of: {', '.join(core.available_devices)})"
        )
    keys = set().union(*(op_keys(c) for c in curated.cases()))
    unknown = [o for o in args.op or [] if o.upper().replace(":", ".") not in keys]
    if unknown:
        raise UsageError(f"unknown op {unknown[0]!r} (expected one of: {', '.join(sorted(keys))})")
    return main(args.mode, args.op, args.device, args.reference, as_json=args.json, isolate=args.isolate,
                workers=args.workers, progress=False if args.no_progress else None, hints=args.hints,
                vs_ggml=args.vs_ggml, case_set=args.set, core=core)  # fmt: skip


def backend_ops_rows(args: Any) -> list[Any]:
    """The test-backend-ops rows ``--cases``, ``-o`` and ``--sample`` pick."""
    from ovkit.catalogue import run as catalogue
    from ovkit.usage import UsageError, check_count

    if args.mode != "test":
        raise UsageError("--catalogue test-backend-ops runs mode test only")
    if args.sample is not None:
        check_count("--sample", args.sample, low=1)
    try:
        rows = catalogue.read_rows(args.cases)
    except ValueError as exc:  # FileReadError (not a regular UTF-8 file ...) or not a case list
        raise UsageError(str(exc)) from None
    if args.op:
        wanted = {o.upper() for o in args.op}
        unknown = sorted(wanted - {r.op for r in rows})
        if unknown:
            raise UsageError(f"unknown op {unknown[0]!r} in this case list")
        rows = [r for r in rows if r.op in wanted]
    return catalogue.stratified(rows, args.sample) if args.sample else rows
