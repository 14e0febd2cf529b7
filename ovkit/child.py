"""Code that may kill its process runs in a child process: one way to start, ask and bury one.

ggml aborts on its asserts, OpenVINO and the real backend can segfault, a native library built for
another CPU dies of an illegal instruction: any of them would take a Jupyter kernel or a whole
test run down.  Every isolating caller of ovkit (``test-ops --isolate``, the catalogue's workers,
the real backend's worker, llama.cpp's reference) runs such code through this module, so a death
is reported the same way everywhere: :class:`ChildCrashed` carrying a :class:`Death` (the signal's
name, the child's last words on stderr and, for SIGILL, the caller's hint about the native library
and how to rebuild it), and :class:`ChildTimedOut` for a child killed after its time ran out.

This module imports nothing of ovkit but the error base: a caller that knows which native library
its child runs passes a ``sigill_hint`` callable rather than this module looking the build up.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import IO

from ovkit.errors import OvkitError

#: The environment variable naming the file descriptor a :class:`Child` reads replies from.
REPLY_FD_ENV = "OVKIT_CHILD_FD"

#: Set to 1 in every child's environment unless the caller's has it: a failed GGML_ASSERT makes
#: ggml fork a child that prints a backtrace (gdb, else backtrace_symbols) and wait for it; when
#: two of ggml's threads assert at once, that child can deadlock on a lock held at fork time and
#: the asserting process hangs instead of dying, while a child is started precisely to die.
NO_BACKTRACE_ENV = "GGML_NO_BACKTRACE"

#: How much of the end of a child's stderr a :class:`Death` keeps.
STDERR_TAIL_BYTES = 8192

#: Called only when a child died of SIGILL: which instruction set it most likely was and how to
#: rebuild the native library the child ran.
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
    """How a child ended without answering: its return code, the end of its stderr and, for
    SIGILL, the hint about the native library it ran."""

    returncode: int  #: negative: killed by that signal
    stderr: str = ""  #: the last :data:`STDERR_TAIL_BYTES` of what the child wrote on stderr
    hint: str = ""  #: for SIGILL: the instruction set it most likely was, how to rebuild

    @property
    def signal(self) -> str | None:
        """The signal's name (``SIGILL``), or None when the child exited by itself."""
        return signal_name(self.returncode) if self.returncode < 0 else None

    @property
    def cause(self) -> str:
        """``SIGSEGV``, ``signal 77`` or ``exit code 3``."""
        return signal_name(self.returncode)

    def describe(self) -> str:
        """The cause with the hint, when there is one: ``SIGILL, illegal instruction: ...``."""
        return f"{self.cause}, {self.hint}" if self.hint else self.cause

    def lines(self) -> list[str]:
        """The non-empty lines of the child's stderr tail, stripped."""
        return [x.strip() for x in self.stderr.splitlines() if x.strip()]

    @property
    def last_line(self) -> str:
        """The last non-empty line the child wrote to stderr (``""`` when none)."""
        lines = self.lines()
        return lines[-1] if lines else ""


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
    """One child process answering requests, one line each way, until it dies or is closed.

    Requests go to the child's stdin; replies come back on a private pipe whose descriptor the
    child finds in ``$OVKIT_CHILD_FD`` (:func:`reply_channel`), so whatever native code prints to
    stdout never corrupts a reply.  stderr goes to a temporary file: the last words of a crash."""

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
        """Send one request line, return the reply line (without its newline).  Raises
        :class:`ChildCrashed` when the child dies first, :class:`ChildTimedOut` (the child killed)
        after ``timeout`` seconds."""
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
        """End the child (its stdin closed: end of requests; killed after ``timeout`` seconds)
        and release its pipes and log."""
        for f in (self.proc.stdin, self._replies):
            try:
                if f is not None:
                    f.close()
            except OSError:  # a dead child's pipe
                pass
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
    """Run a child to its end and return its stdout.  Raises :class:`ChildCrashed` when it ends
    with a return code not in ``ok`` (a signal, an error exit), :class:`ChildTimedOut` after
    ``timeout`` seconds."""
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


def reply_channel() -> IO[str]:
    """The child side of :class:`Child`: the stream replies are written to (one line each).
    stdout is pointed at stderr first, so native prints never land in a reply."""
    replies = os.fdopen(int(os.environ[REPLY_FD_ENV]), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return replies


def serve(answer: Callable[[str], str]) -> None:
    """The child's loop: each non-blank request line on stdin answered by ``answer``, one line on
    the reply channel (:func:`reply_channel`), until stdin ends."""
    out = reply_channel()
    for line in sys.stdin:
        if line.strip():
            out.write(answer(line) + "\n")
            out.flush()
