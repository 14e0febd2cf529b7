"""A background refresher calling a function every ``interval`` seconds on a daemon thread (errors
to ``on_error``, never into the kernel; a bound method held weakly), and ``claim``: one live view
per (kind, notebook cell)."""

from __future__ import annotations

import contextlib
import inspect
import math
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any, Protocol

DEFAULT_INTERVAL_S = 1.0
_LIVE: weakref.WeakSet[Refresher] = weakref.WeakSet()  # started and not yet stopped
MIN_INTERVAL_S = 0.02


def check_interval(interval: float) -> float:
    """``interval`` as a float, or a ValueError naming the bad value and the accepted range."""
    try:
        value = float(interval)
    except (TypeError, ValueError):
        raise ValueError(f"refresh interval {interval!r} is not a number of seconds") from None
    if not math.isfinite(value) or value < MIN_INTERVAL_S:
        raise ValueError(f"refresh interval {interval!r} s: expected a finite number >= {MIN_INTERVAL_S} s")
    return value


def _weak(fn: Callable[..., None] | None) -> Callable[[], Callable[..., None] | None]:
    """A getter for ``fn``: a bound method is held weakly (None once its object is gone)."""
    if inspect.ismethod(fn):
        return weakref.WeakMethod(fn)
    return lambda: fn


class Refresher:
    """Runs ``fn`` every ``interval`` seconds on a daemon thread, with pause/resume and stop."""

    def __init__(
        self,
        fn: Callable[[], None],
        interval: float = DEFAULT_INTERVAL_S,
        *,
        on_error: Callable[[BaseException], None] | None = None,
        on_state: Callable[[str], None] | None = None,
        name: str = "ovkit-refresh",
    ) -> None:
        self._interval = check_interval(interval)
        self._on_error = _weak(on_error)
        self._on_state = _weak(on_state)
        self._name = name
        self._stop = threading.Event()
        self._wake = threading.Event()
        # A method is held weakly: the thread must not keep its widget alive (and stops with it).
        self._fn = _weak(fn)
        if inspect.ismethod(fn):
            weakref.finalize(fn.__self__, self._halt)
        self.paused = False
        self._kick = False
        self.thread: threading.Thread | None = None  #: the refresh thread, once started
        self.ticks = 0
        self.last_duration_s = 0.0

    # -- state ----------------------------------------------------------------------------
    @property
    def interval(self) -> float:
        return self._interval

    @interval.setter
    def interval(self, value: float) -> None:
        self._interval = check_interval(value)
        self._wake.set()  # the new interval applies to the current wait

    @property
    def state(self) -> str:
        """``stopped`` once stop() was asked, ``not started``, ``paused`` or ``live``."""
        if self._stop.is_set():
            return "stopped"
        if self.thread is None:
            return "not started"
        return "paused" if self.paused else "live"

    def _tell(self) -> None:
        on_state = self._on_state()
        if on_state is not None:
            with contextlib.suppress(Exception):  # a view failing to redraw must not stop stop()
                on_state(self.state)

    @property
    def alive(self) -> bool:
        """True while the background thread runs."""
        return self.thread is not None and self.thread.is_alive()

    # -- control --------------------------------------------------------------------------
    def start(self) -> Refresher:
        """Start the thread (no-op when it already runs); returns self."""
        if self.alive:
            return self
        if self._stop.is_set():
            raise RuntimeError(f"{self._name}: a stopped refresher cannot be restarted")
        watch_cells()
        self.thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self.thread.start()
        _LIVE.add(self)
        self._tell()
        return self

    def pause(self) -> None:
        self.paused = True
        self._tell()

    def resume(self) -> None:
        self.paused = False
        self._kick = True
        self._wake.set()
        self._tell()

    def _halt(self) -> None:
        """Stop without waiting (from a finalizer, which may run on the refresh thread itself)."""
        self._stop.set()
        self._wake.set()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the thread and wait for it (at most ``timeout`` seconds); ``on_state`` hears
        ``stopped`` once, after the last tick."""
        was_stopped = self._stop.is_set()
        self._stop.set()
        self._wake.set()
        _LIVE.discard(self)
        thread = self.thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        if not was_stopped:
            self._tell()

    def tick(self) -> bool:
        """Run ``fn`` once now (any thread); False when it raised (the error went to ``on_error``)."""
        start = time.perf_counter()
        fn = self._fn()
        if fn is None:  # the owner is gone: so is the refresh
            self._halt()
            return False
        try:
            fn()
        except Exception as exc:  # a refresh must never raise into the kernel
            on_error = self._on_error()
            if on_error is not None:
                # the error display itself may fail: keep the loop alive anyway
                with contextlib.suppress(Exception):
                    on_error(exc)
            return False
        finally:
            self.ticks += 1
            self.last_duration_s = time.perf_counter() - start
        return True

    def _run(self) -> None:
        # Fixed rate: a tick is due one interval after the previous one started, so a slow tick
        # shortens the wait (ticks never pile up).  An interval change re-times the current wait;
        # resume() ticks at once.
        last = time.monotonic()
        while not self._stop.is_set():
            self._wake.wait(max(0.0, last + self._interval - time.monotonic()))
            self._wake.clear()
            if self._stop.is_set():
                break
            if self.paused:
                last = time.monotonic()
                continue
            if not self._kick and time.monotonic() < last + self._interval:
                continue  # woken early by a new interval: wait out the rest of it
            self._kick = False
            # A short cell runs without a tick beside it (its latency stays the idle one); a
            # long-running cell still sees the view refresh once it has run for CELL_GRACE_S.
            self._stop.wait(cell_grace_left())
            last = time.monotonic()
            self.tick()


CELL_GRACE_S = 0.05
_cell_started: list[float] = []  # monotonic start of the running cell (empty: none runs)


def _on_pre_run_cell(*_: Any) -> None:
    _cell_started[:] = [time.monotonic()]


def _on_post_run_cell(*_: Any) -> None:
    _cell_started.clear()


def watch_cells() -> None:
    """Follow IPython's cell executions (once per process), for ``cell_grace_left``."""
    from IPython import get_ipython  # ipywidgets' own dependency

    ip = get_ipython()
    if ip is None or _on_pre_run_cell in ip.events.callbacks.get("pre_run_cell", []):
        return
    ip.events.register("pre_run_cell", _on_pre_run_cell)
    ip.events.register("post_run_cell", _on_post_run_cell)


def cell_grace_left() -> float:
    """Seconds a tick waits so it does not run beside a cell that started less than
    ``CELL_GRACE_S`` ago (0 when no cell runs)."""
    started = list(_cell_started)
    return max(0.0, started[0] + CELL_GRACE_S - time.monotonic()) if started else 0.0


def live_refreshers() -> list[Refresher]:
    """Every refresher whose thread was started and not stopped (e.g. widgets never closed)."""
    return [r for r in list(_LIVE) if r.alive]


def stop_all(timeout: float = 5.0) -> int:
    """Stop every live refresh thread (a re-run cell leaves the old widget's thread running);
    returns how many were stopped."""
    live = live_refreshers()
    for r in live:
        r.stop(timeout)
    return len(live)


class Closable(Protocol):
    def close(self) -> None: ...


_CLAIMS: dict[tuple[str, str | None], weakref.ref[Any]] = {}
_CLAIMS_LOCK = threading.Lock()


def current_cell() -> str | None:
    """The id of the notebook cell being executed (JupyterLab sends it), or None outside one."""
    from IPython import get_ipython

    kernel = getattr(get_ipython(), "kernel", None)
    if kernel is None:
        return None
    try:
        parent = kernel.get_parent("shell")
    except Exception:
        return None
    cell = (parent or {}).get("metadata", {}).get("cellId")
    return str(cell) if cell else None


def claim(kind: str, owner: Closable) -> None:
    """Make ``owner`` the live view of ``kind`` for the current cell, closing the one before it
    (outside a notebook cell there is one live view per kind)."""
    key = (kind, current_cell())
    with _CLAIMS_LOCK:
        ref = _CLAIMS.get(key)
        _CLAIMS[key] = weakref.ref(owner)
    old = ref() if ref is not None else None
    if old is not None and old is not owner:
        old.close()
