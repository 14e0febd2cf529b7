"""Upstream ``supports_op`` verdicts as data: per test-backend-ops case, the op name, its parameters
in test-backend-ops notation (``type=f32,ne_a=[5,7,11,13],v=0``) and the real backend's verdict;
:mod:`ovkit.catalogue.verdicts` replays them against the policy."""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ovkit.ops.policy import Revision

#: The revision that produced the shipped CSV (see :class:`ovkit.ops.policy.Revision`).
CSV_REVISION = Revision.V
#: The shipped test-backend-ops verdicts (op_name, op_params, supported), package data.
SHIPPED = Path(__file__).resolve().parents[1] / "data" / "upstream-support-verdicts.csv.gz"

# ----------------------------------------------------------------------------------------------
# Parsing test-backend-ops notation


def parse_params(text: str) -> dict[str, Any]:
    """``type=f32,ne=[1,2,3,4],split`` -> ``{"type": "f32", "ne": [1, 2, 3, 4], "split": True}``."""
    items = (item.strip().partition("=") for item in re.findall(r"[^,\[]+(?:\[[^\]]*\])?", text))
    return {key: _value(raw) if eq else True for key, eq, raw in items if key}


def _value(raw: str) -> Any:
    if raw.startswith("[") and raw.endswith("]"):
        inner = raw[1:-1]
        return [_value(x) for x in inner.split(",")] if inner else []
    for conv in (int, float):
        try:
            return conv(raw)
        except ValueError:
            pass
    return raw


@dataclass(frozen=True, slots=True)
class Verdict:
    """One CSV row."""

    op_name: str
    op_params: str
    supported: bool

    @property
    def params(self) -> dict[str, Any]:
        return parse_params(self.op_params)


def read_verdicts(path: str | Path) -> list[Verdict]:
    """All rows of a verdict CSV (columns op_name, op_params, supported); ``.gz`` is read too."""
    import gzip

    p = Path(path)
    with gzip.open(p, "rt", newline="") if p.suffix == ".gz" else open(p, newline="") as f:
        rows = list(csv.DictReader(f))
    return [Verdict(r["op_name"], r["op_params"], r["supported"].strip() == "1") for r in rows]
