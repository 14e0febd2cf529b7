"""The verdict of one op case, whichever harness ran it: ``ovkit test-ops`` (mode test or perf)
or the test-backend-ops catalogue runner, and the line test-backend-ops prints for it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Status = Literal["OK", "FAIL", "known limit", "not supported", "not translatable", "no case"]
STATUSES: tuple[Status, ...] = ("OK", "FAIL", "known limit", "not supported", "not translatable", "no case")


def first_line(exc: BaseException) -> str:
    """The first line of an error's message (OpenVINO's often span many lines)."""
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else ""


def error_line(exc: BaseException) -> str:
    """``Type: first line``: an error as one result line shows it."""
    return f"{type(exc).__name__}: {first_line(exc)}"


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
            vs = (
                f"   ggml CPU {self.ggml_us_per_run:10.2f} us/run ({self.us_per_run / self.ggml_us_per_run:5.2f}x)"
                if self.ggml_us_per_run
                else ""
            )
            return f"  {self.case:70s} {self.us_per_run:12.2f} us/run {rate}{vs}"
        if self.err is None or not self.reference:
            return f"  {self.case}: OK"
        prec = f", {self.precision}" if self.precision not in ("", "f32", "model") else ""
        return f"  {self.case}: OK (NMSE {self.err:.2e} <= {self.max_err:.0e}, ref {self.reference}{prec})"
