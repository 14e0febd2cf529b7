"""Code that may kill its process (ggml's asserts, a segfault, an illegal instruction) runs in a
child process: one way to start, ask and bury one, so every death reads the same
(:class:`ChildCrashed` with a :class:`Death`, :class:`ChildTimedOut`).  Imports only the error base."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ovkit.errors import OvkitError

#: The environment variable naming the file descriptor a :class:`Child` reads replies from.
REPLY_FD_ENV = "OVKIT_CHILD_FD"

#: Set to 1 in every child unless the caller sets it: ggml's backtrace child of a failed assert can
#: deadlock on a lock held at fork time (two threads asserting), so the child would hang, not die.
NO_BACKTRACE_ENV = "GGML_NO_BACKTRACE"

#: How much of the end of a child's stderr a :class:`Death` keeps.
STDERR_TAIL_BYTES = 8192

#: Called only for a child dead of SIGILL: which instruction set it likely was, how to rebuild.
SigillHint = Callable[[], str]


def signal_name(returncode: int) -> str:
    """``SIGSEGV`` for a child killed by signal 11 (return code -11), else ``exit code N``."""
    if returncode < 0:
        try:
            return signal.Signals(-returncode).name
        except ValueError:
            return f"signal {-returncode}"
    return f"exit code {returncode}"


@dataclass(frozen=True, slots=True)
class Death:
    """How a child ended without answering."""

    returncode: int  #: negative: killed by that signal
    stderr: str = ""  #: the last :data:`STDERR_TAIL_BYTES` of what the child wrote on stderr
    hint: str = ""  #: for SIGILL: the instruction set it most likely was, how to rebuild

    def describe(self) -> str:
        """``SIGSEGV``, ``signal 77`` or ``exit code 3``, with the hint when there is one."""
        cause = signal_name(self.returncode)
        return f"{cause}, {self.hint}" if self.hint else cause

    def lines(self) -> list[str]:
        """The non-empty lines of the child's stderr tail, stripped."""
        return [x.strip() for x in self.stderr.splitlines() if x.strip()]

    @property
    def last_line(self) -> str:
        """The last non-empty line the child wrote to stderr (``""`` when none)."""
        return (self.lines() or [""])[-1]


def child_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment a child starts with: ``env`` (default: this process's) and ggml's
    backtrace off unless ``env`` sets :data:`NO_BACKTRACE_ENV` itself."""
    return {NO_BACKTRACE_ENV: "1", **(os.environ if env is None else env)}


def death(returncode: int, stderr: str = "", sigill_hint: SigillHint | None = None) -> Death:
    """The :class:`Death` of a child that ended with ``returncode`` (the hint asked only for SIGILL)."""
    hint = sigill_hint() if sigill_hint is not None and returncode == -signal.SIGILL else ""
    return Death(returncode, stderr[-STDERR_TAIL_BYTES:], hint)


class ChildError(OvkitError, RuntimeError):
    """A child process gave no answer: it died or ran out of time."""


class ChildCrashed(ChildError):
    """The child died (a signal or an exit) before answering; :attr:`death` says how."""

    def __init__(self, died: Death) -> None:
        super().__init__(died.describe() + (f": {died.last_line}" if died.last_line else ""))
        self.death = died


class ChildTimedOut(ChildError):
    """The child did not answer within :attr:`seconds` and was killed."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"no answer within {seconds:g} s")
        self.seconds = seconds


class Child:
    """One child process answering requests, one line each way: requests on its stdin, replies on a
    private pipe (:func:`serve`: native prints never corrupt one), stderr kept in a file."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        sigill_hint: SigillHint | None = None,
    ) -> None:
        self.sigill_hint = sigill_hint
        read_fd, write_fd = os.pipe()
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 (closed by close())
        try:
            self.proc = subprocess.Popen(
                list(argv),
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=self._log,
                env={**child_env(env), REPLY_FD_ENV: str(write_fd)},
                pass_fds=(write_fd,),
            )
        except BaseException:  # no child (a missing interpreter ...): nothing left open
            os.close(read_fd)
            self._log.close()
            raise
        finally:
            os.close(write_fd)
        self._replies = os.fdopen(read_fd, "rb")
        self._died: Death | None = None

    @property
    def alive(self) -> bool:
        """The child has not ended (nor been killed)."""
        return self._died is None and self.proc.poll() is None

    def ask(self, request: str, timeout: float) -> str:
        """The reply line to one request line; :class:`ChildCrashed` when the child dies first,
        :class:`ChildTimedOut` (the child killed) after ``timeout`` seconds."""
        if self._died is not None:
            raise ChildCrashed(self._died)
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(request.encode() + b"\n")
            self.proc.stdin.flush()
        except OSError:  # already dead: its stdin is a broken pipe
            raise ChildCrashed(self.death()) from None
        deadline = time.monotonic() + timeout
        # poll, never block: a dead child's pipe can stay open (inherited by a grandchild); never
        # past the deadline either (a reply that comes later is a timeout, however soon after)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.proc.kill()
                self.proc.wait()
                self._died = death(self.proc.returncode, self.stderr_tail())
                raise ChildTimedOut(timeout)
            if select.select([self._replies], [], [], min(0.5, remaining))[0]:
                break
            if self.proc.poll() is not None:
                raise ChildCrashed(self.death())
        line = self._replies.readline()
        if not line:
            raise ChildCrashed(self.death())
        return line.decode().rstrip("\n")

    def stderr_tail(self) -> str:
        """The end of what the child wrote to stderr so far (the last :data:`STDERR_TAIL_BYTES`)."""
        if self._log.closed:
            return ""
        size = os.fstat(self._log.fileno()).st_size
        start = max(0, size - STDERR_TAIL_BYTES)
        return os.pread(self._log.fileno(), size - start, start).decode(errors="replace")

    def death(self) -> Death:
        """How the child ended (waits for it): its return code, its stderr tail, the SIGILL hint."""
        if self._died is None:
            self._died = death(self.proc.wait(), self.stderr_tail(), self.sigill_hint)
        return self._died

    def close(self, timeout: float = 30.0) -> None:
        """End the child (stdin closed; killed after ``timeout`` seconds), release pipes and log."""
        for f in (self.proc.stdin, self._replies):
            with contextlib.suppress(OSError):  # a dead child's pipe
                if f is not None:
                    f.close()
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._log.close()

    def __enter__(self) -> Child:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def run(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
    ok: Sequence[int] = (0,),
    sigill_hint: SigillHint | None = None,
) -> str:
    """A child run to its end: its stdout; :class:`ChildCrashed` for a return code not in ``ok``,
    :class:`ChildTimedOut` after ``timeout`` seconds."""
    try:
        proc = subprocess.run(
            list(argv),
            capture_output=True,
            text=True,
            timeout=timeout,
            env=child_env(env),
        )
    except subprocess.TimeoutExpired:
        raise ChildTimedOut(timeout or 0.0) from None
    if proc.returncode not in ok:
        raise ChildCrashed(death(proc.returncode, proc.stderr, sigill_hint))
    return proc.stdout


def serve(answer: Callable[[str], str]) -> None:
    """The child's loop: each non-blank request line on stdin answered by ``answer``, one line, on
    the reply pipe (stdout is pointed at stderr first)."""
    out = os.fdopen(int(os.environ[REPLY_FD_ENV]), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    for line in sys.stdin:
        if line.strip():
            out.write(answer(line) + "\n")
            out.flush()
