"""What command handlers share below the command line: the usage error and the Core a
``--simulate`` flag names (the handlers of ``ovkit test-ops`` and ``ovkit gguf`` live with their
modules, which sit below ``ovkit.cli``)."""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["SIMULATED_NOTICE", "UsageError", "make_core"]

SIMULATED_NOTICE = (
    "ovkit: SIMULATED device set {!r} (ovkit.simulate): not this machine's devices; "
    "everything runs on this host's CPU"
)


class UsageError(Exception):
    """A bad argument or simulation profile: printed as one line, exit code 2."""


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
