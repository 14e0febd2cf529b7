"""The op-support policy of the upstream backend (global gates and per-op gates).

Placeholder seam from the foundation issue: the op catalogue issue fills in ``check_op``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class SupportDecision:
    """Whether an op is supported, and the human-readable reason when it is not."""

    supported: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.supported


def check_op(op: Any, device_class: str, *, upstream_exact: bool = False) -> SupportDecision:
    """The policy's decision for ``op`` on a device of ``device_class``."""
    raise NotImplementedError("the op catalogue arrives with the op-catalogue issue")
