"""Calls into the real backend in a child process (``python -m ovkit.upstream.worker``), one JSON
request at a time: a crash or timeout becomes an :class:`Outcome`, the next request a fresh child."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal

from ovkit.child import Child, ChildCrashed, ChildTimedOut
from ovkit.native import sigill_hint_for
from ovkit.upstream.build import require

Status = Literal["ok", "CRASH", "TIMEOUT", "ERROR"]

#: Seconds one request may take before the child is killed (first requests also start OpenVINO).
DEFAULT_TIMEOUT_S = 120.0

#: How the worker child starts.
WORKER_COMMAND: tuple[str, ...] = (sys.executable, "-m", "ovkit.upstream.worker")


@dataclass(frozen=True, slots=True)
class Outcome:
    """The answer to one request: ``ok`` with the child's reply, or what went wrong."""

    status: Status
    reply: dict[str, Any] = field(default_factory=dict)
    detail: str = ""  #: ``SIGSEGV``, the error message, or the last line the child wrote

    @property
    def ok(self) -> bool:
        return self.status == "ok"


class Isolated:
    """One worker child at a time (a context manager); ``env`` adds to the child's environment."""

    def __init__(self, env: dict[str, str] | None = None, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        require()
        self.env = {**os.environ, **(env or {})}
        self.timeout_s = timeout_s
        self._child: Child | None = None
        self.crashes = 0  #: children that died so far

    def __enter__(self) -> Isolated:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def stderr_tail(self) -> str:
        """The last non-empty line the child wrote to stderr (the backend's logs go there)."""
        if self._child is None:
            return ""
        lines = [ln for ln in self._child.stderr_tail().splitlines() if ln.strip()]
        return lines[-1].strip() if lines else ""

    def call(self, request: dict[str, Any], timeout_s: float | None = None) -> Outcome:
        """Run one request in the child; never raises for what happens inside it."""
        if self._child is None or not self._child.alive:
            self.close()
            self._child = Child(
                WORKER_COMMAND, env=self.env, sigill_hint=partial(sigill_hint_for, "ggml-python-openvino")
            )
        limit = self.timeout_s if timeout_s is None else timeout_s
        try:
            reply = json.loads(self._child.ask(json.dumps(request), limit))
        except ChildTimedOut as exc:
            self.close()
            return Outcome("TIMEOUT", detail=str(exc))
        except ChildCrashed as exc:
            tail = exc.death.last_line
            self.close()
            self.crashes += 1
            return Outcome("CRASH", detail=exc.death.describe() + (f" ({tail})" if tail else ""))
        if "error" in reply:
            return Outcome("ERROR", reply, reply["error"])
        return Outcome("ok", reply)

    def close(self) -> None:
        """Stop the child (it exits when its stdin closes) and release the pipes."""
        if self._child is not None:
            self._child.close(timeout=10)
            self._child = None


def call_once(request: dict[str, Any], env: dict[str, str] | None = None) -> Outcome:
    """One request in a fresh child, which is stopped afterwards."""
    with Isolated(env) as worker:
        return worker.call(request)
