"""The verdict of one op case, whichever harness ran it, the one judge that decides it
(:func:`judge`), and the line test-backend-ops prints for it."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import numpy as np

if TYPE_CHECKING:
    from ovkit.catalogue.case import Case

T = TypeVar("T")
Status = Literal["OK", "FAIL", "not supported", "not translatable", "no case"]
STATUSES: tuple[Status, ...] = ("OK", "FAIL", "not supported", "not translatable", "no case")


def error_line(exc: BaseException) -> str:
    """``Type: first line``: an error as one result line shows it (OpenVINO's span many lines)."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"


def progress_bar(
    items: Iterable[T], desc: str, progress: bool | None, unit: str = "case", **kw: Any
) -> Iterable[T]:
    """``items`` with a tqdm bar on stderr (``progress`` None: tqdm decides, off without a terminal)."""
    from tqdm import tqdm

    disable = None if progress is None else not progress
    return tqdm(items, desc=desc, unit=unit, file=sys.stderr, leave=False, disable=disable, **kw)


@dataclass(frozen=True, slots=True)
class Result:
    """One case's verdict: ``err`` against ``max_err`` (NMSE, or the op's own error), the policy's
    reason when not supported; a perf run adds the time per run and the rate."""

    op: str
    case: str
    status: Status
    detail: str = ""
    err: float | None = None
    max_err: float | None = None
    device: str = "CPU"
    #: the backend's own verdict (its support policy), recorded by the catalogue runner
    accepted: bool = False
    #: wall seconds the case took (inputs, both graphs, compile, both runs, the check)
    seconds: float | None = None
    #: what the result was compared with (``ggml`` or ``numpy``); shown in the OK line when set
    reference: str = ""
    #: the inference precision the device reported for the run
    precision: str = ""
    us_per_run: float | None = None
    gflops: float | None = None
    gbps: float | None = None
    #: perf with ``vs_ggml``: ggml's CPU backend timed on the same case
    ggml_us_per_run: float | None = None

    def line(self) -> str:
        """The per-case line, as test-backend-ops prints it (perf: time per run and rate)."""
        if self.status == "not supported":
            return f"  {self.case}: not supported [{self.device}] {self.detail}".rstrip()
        if self.status != "OK":
            return f"  {self.case}: {self.status} {self.detail}".rstrip()
        if self.us_per_run is not None:
            rate = (
                f"{self.gflops:10.2f} GFLOPS" if self.gflops is not None else f"{self.gbps or 0.0:10.2f} GB/s"
            )
            vs = ""
            if self.ggml_us_per_run:
                vs = f"   ggml CPU {self.ggml_us_per_run:10.2f} us/run ({self.us_per_run / self.ggml_us_per_run:5.2f}x)"
            return f"  {self.case:70s} {self.us_per_run:12.2f} us/run {rate}{vs}"
        if self.err is None or not self.reference:
            return f"  {self.case}: OK"
        prec = f", {self.precision}" if self.precision not in ("", "f32", "model") else ""
        return f"  {self.case}: OK (NMSE {self.err:.2e} <= {self.max_err:.0e}, ref {self.reference}{prec})"


#: The error kinds a case names in its ``err``: NMSE (after test-backend-ops' NaN and inf checks) or
#: test_top_k's index-set distance (:func:`~ovkit.catalogue.case.index_set_err`).
ERROR_KINDS: tuple[str, ...] = ("nmse", "index_set")


def judge(case: Case, actual: Any, expected: Any, against: str = "reference", /, **fields: Any) -> Result:
    """The verdict on ``actual`` against ``expected`` (``against`` names it): the same ggml tensor,
    then the case's own error within ``case.max_err``; ``fields``: the :class:`Result`'s others."""
    from ovkit.catalogue.case import index_set_err
    from ovkit.nmse import compare, same_ne

    if case.err not in ERROR_KINDS:
        raise ValueError(
            f"case {case.name}: error kind {case.err!r} is not known (expected one of {', '.join(ERROR_KINDS)})"
        )
    a, e = np.asarray(actual), np.asarray(expected)
    base: dict[str, Any] = {**fields, "op": case.op, "case": case.name, "max_err": case.max_err}
    if not same_ne(a.shape, e.shape):
        return Result(**base, status="FAIL", detail=f"shape {a.shape} vs {against} {e.shape}")
    if case.err == "nmse":
        verdict = compare(a, e, case.max_err)
        ok, err, why = verdict.ok, verdict.err, verdict.reason
    else:
        err = index_set_err(a, e)
        ok = err <= case.max_err
        why = "" if ok else f"ERR = {err:.9f} > {case.max_err:.9f}"
    return Result(**base, status="OK" if ok else "FAIL", detail=why, err=err)
