"""Calls into the real backend, each in a child process: a crash there never takes the caller down.

The backend dereferences null pointers and aborts on asserts, which would kill a Jupyter kernel.
:class:`Isolated` keeps one child (``python -m ovkit.upstream.worker``) and sends it one request
at a time as a JSON line; the child answers on a private pipe (the backend's own prints go to
stderr).  When the child dies, the request in flight becomes an :class:`Outcome` with status
``CRASH`` and the signal's name (``SIGSEGV``); a request that runs past its timeout is killed and
becomes ``TIMEOUT``.  The next request starts a fresh child, so later requests still run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from typing import Any, Literal

from ovkit.upstream.build import require

Status = Literal["ok", "CRASH", "TIMEOUT", "ERROR"]

#: Seconds one request may take before the child is killed (first requests also start OpenVINO).
DEFAULT_TIMEOUT_S = 120.0


@dataclass(frozen=True, slots=True)
class Outcome:
    """The answer to one request: ``ok`` with the child's reply, or what went wrong."""

    status: Status
    reply: dict[str, Any] = field(default_factory=dict)
    detail: str = ""  #: ``SIGSEGV``, the error message, or the last line the child wrote

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def signal_name(returncode: int) -> str:
    """``SIGSEGV`` for a child killed by signal 11 (return code -11), else ``exit code N``."""
    if returncode < 0:
        try:
            return signal.Signals(-returncode).name
        except ValueError:
            return f"signal {-returncode}"
    return f"exit code {returncode}"


class Isolated:
    """One worker child at a time; :meth:`call` sends a request and waits for its answer.

    Use it as a context manager (or call :meth:`close`): the child is stopped and its pipes
    closed.  ``env`` adds variables to the child's environment (``GGML_OPENVINO_DEVICE`` ...).
    """

    def __init__(self, env: dict[str, str] | None = None, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        require()
        self.env = {**os.environ, **(env or {})}
        self.timeout_s = timeout_s
        self._proc: subprocess.Popen[bytes] | None = None
        self._reply: Any = None
        self._stderr: Any = None
        self.crashes = 0  #: children that died so far

    def __enter__(self) -> Isolated:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start(self) -> subprocess.Popen[bytes]:
        read_fd, write_fd = os.pipe()
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the child
        env = {**self.env, "OVKIT_WORKER_FD": str(write_fd)}
        proc = subprocess.Popen(
            [sys.executable, "-m", "ovkit.upstream.worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=self._stderr,
            env=env,
            pass_fds=(write_fd,),
        )
        os.close(write_fd)
        self._reply = os.fdopen(read_fd, "rb")
        self._proc = proc
        return proc

    def stderr_tail(self) -> str:
        """The last non-empty line the child wrote to stderr (the backend's logs go there)."""
        if self._stderr is None:
            return ""
        self._stderr.seek(0)
        lines = [ln for ln in self._stderr.read().decode(errors="replace").splitlines() if ln.strip()]
        return lines[-1].strip() if lines else ""

    def call(self, request: dict[str, Any], timeout_s: float | None = None) -> Outcome:
        """Run one request in the child; never raises for what happens inside it."""
        proc = self._proc if self._proc is not None and self._proc.poll() is None else self._start()
        assert proc.stdin is not None
        line: list[bytes] = []
        reader = threading.Thread(target=lambda: line.append(self._reply.readline()), daemon=True)
        try:
            proc.stdin.write((json.dumps(request) + "\n").encode())
            proc.stdin.flush()
        except BrokenPipeError:
            pass
        limit = self.timeout_s if timeout_s is None else timeout_s
        reader.start()
        reader.join(limit)
        if reader.is_alive():  # hung: kill it; the reader then sees EOF
            proc.kill()
            proc.wait()
            reader.join()
            self._drop()
            return Outcome("TIMEOUT", detail=f"no answer within {limit:g} s")
        if line and line[0]:
            reply = json.loads(line[0])
            if "error" in reply:
                return Outcome("ERROR", reply, reply["error"])
            return Outcome("ok", reply)
        code = proc.wait()
        tail = self.stderr_tail()
        self._drop()
        self.crashes += 1
        return Outcome("CRASH", detail=signal_name(code) + (f" ({tail})" if tail else ""))

    def _drop(self) -> None:
        if self._reply is not None:
            self._reply.close()
            self._reply = None
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
        if self._proc is not None and self._proc.stdin is not None:
            self._proc.stdin.close()
        self._proc = None

    def close(self) -> None:
        """Stop the child (it exits when its stdin closes) and release the pipes."""
        proc = self._proc
        if proc is not None:
            if proc.stdin is not None:
                proc.stdin.close()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._drop()


def call_once(request: dict[str, Any], env: dict[str, str] | None = None) -> Outcome:
    """One request in a fresh child, which is stopped afterwards."""
    with Isolated(env) as worker:
        return worker.call(request)
