"""What command handlers share below ``ovkit.cli``: the usage error, count checks and the Core a
``--simulate`` flag names."""

from __future__ import annotations

import math
import sys
from typing import Any

from ovkit.errors import OvkitError

__all__ = ["SIMULATED_NOTICE", "UsageError", "check_count", "check_positive", "make_core"]

SIMULATED_NOTICE = (
    "ovkit: SIMULATED device set {!r} (ovkit.simulate): not this machine's devices; "
    "everything runs on this host's CPU"
)


class UsageError(OvkitError):
    """A bad argument or simulation profile: printed as one line, exit code 2."""


def check_count(flag: str, value: int, *, low: int = 0, high: int | None = None, bound: str = "") -> int:
    """``value`` of ``flag`` when ``low <= value <= high``, else a :class:`UsageError` naming the
    value and the bound (``bound`` says what ``high`` is), before any work is done."""
    if value < low:
        raise UsageError(f"{flag} {value}: expected {low} or more")
    if high is not None and value > high:
        raise UsageError(f"{flag} {value} is more than {high:,}" + (f", {bound}" if bound else ""))
    return value


def check_positive(flag: str, value: float) -> float:
    """``value`` of ``flag`` when it is a finite number > 0 (a threshold, a bound), else a
    :class:`UsageError` (``nan`` compares false with everything: it would pass every test)."""
    if not (math.isfinite(value) and value > 0):
        raise UsageError(f"{flag} {value}: expected a finite number > 0")
    return value


def make_core(simulate: str | None) -> Any:
    """The real Core, or the named simulated device set (``UsageError`` if unknown)."""
    if simulate is None:
        from ovkit.runtime import default_core

        return default_core()
    from ovkit.simulate import SimulatedCore, UnknownProfileError

    try:
        core = SimulatedCore(simulate)
    except UnknownProfileError as exc:
        raise UsageError(str(exc)) from None
    # stdout keeps the backend's exact format; the simulation is named once, on stderr
    print(SIMULATED_NOTICE.format(simulate), file=sys.stderr)
    return core
