"""compare-model's records: what a node-by-node comparison finds, and the constants its sides share."""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ovkit.errors import OvkitError
from ovkit.report import Report, Reported

#: Sides a comparison can run against llama.cpp's CPU build (the CLI's ``--against``).
AGAINST: dict[str, tuple[str, ...]] = {
    "llama.cpp": ("ovkit",),
    "upstream": ("upstream",),
    "both": ("ovkit", "upstream"),
}

#: ggml ops that only re-describe memory: never asked for (nothing is computed; a piece of graph
#: starting at one trips the real backend).
VIEW_OPS = frozenset({"RESHAPE", "VIEW", "PERMUTE", "TRANSPOSE", "NONE"})

#: A node llama.cpp's graph callback named (``attn_norm-0``, ``result_norm``); names with a suffix
#: ggml added (``Kcur-0 (view)``, ``node_12``) are not the graph's own.
NAMED = re.compile(r"[A-Za-z_]+(-\d+)?")

#: The first node "diverges" when its NMSE against llama.cpp CPU passes this bound: above the
#: noise of llama.cpp CPU's own roundings (8-bit activations per block of 32 before every
#: quantized matmul, f16 Q for attention; ovkit's exact-f32 nodes sit at 1e-5..6e-3 on SmolLM2),
#: below the subtlest graph error tried (a norm epsilon of 1 instead of 1e-6: 5.2e-2; a swapped
#: operand or a wrong mask: 1e-1 and more).  docs/model.md has the derivation.
DEFAULT_THRESHOLD = 1e-2


#: The side name of the real backend rerun with its OpenVINO CPU precision set to f32.
F32_RERUN = "upstream@f32"


class CompareError(OvkitError, RuntimeError):
    """A side of the comparison could not run at all (the message says which and why)."""


@dataclass(frozen=True, slots=True)
class NodeDiff:
    """One node present on llama.cpp's side and on every compared side, in llama.cpp's graph order."""

    name: str
    op: str  #: ggml's op (sub-op for UNARY/GLU: ``SWIGLU``)
    ne: tuple[int, ...]  #: ggml's ne (innermost first)
    nmse: tuple[tuple[str, float], ...]  #: (side, NMSE of that side against llama.cpp CPU)

    def of(self, side: str) -> float:
        return dict(self.nmse)[side]


@dataclass(frozen=True, slots=True)
class BackendFailure:
    """Where a side failed: ``llama_decode``'s code, the node its log names, the node that threw
    (the consumer the named node feeds) and that node as a single-op case."""

    side: str
    code: int  #: llama_decode's return value
    node: str  #: the node the log names (``Vcur-0 (reshaped) (reshaped)``)
    node_op: str
    failing_node: str  #: the node whose translation threw (``cache_v_l0 (view)``)
    failing_op: str  #: its ggml op (``SET_ROWS``)
    ov_node: str  #: the OpenVINO node named in the exception (``ScatterUpdate_2357 (ScatterUpdate)``)
    case_op: str  #: the single-op case, test-backend-ops notation: op name ...
    case_params: str  #: ... and parameters ("" when the op has no case builder here)
    log: tuple[str, ...] = field(default=(), repr=False)  #: the log lines that name the failure
    #: how the node was found: ``log`` (the backend's log names it) or ``exception`` (the OpenVINO
    #: op that threw, traced back to the ggml op the backend translates to it)
    found_by: str = "log"

    @property
    def case_line(self) -> str:
        """The case as one CSV row (``op_name,op_params``)."""
        return f'{self.case_op},"{self.case_params}"'

    def write_case(self, path: str | os.PathLike[str]) -> Path:
        """Write the case as a test-backend-ops case list (``ovkit test-ops --cases``)."""
        p = Path(path)
        p.write_text(f"op_name,op_params\n{self.case_line}\n")
        return p

    def command(self, path: str | os.PathLike[str]) -> str:
        """The CLI line that runs the written case three ways."""
        return f"ovkit test-ops --upstream --catalogue test-backend-ops --cases {path}"


@dataclass(frozen=True, slots=True, repr=False)
class ModelComparison(Reported):
    """The per-node NMSE table of each side against llama.cpp CPU, the first node past the
    threshold per side, and each side's failure (shown as a table in graph order)."""

    path: str
    tokens: tuple[int, ...]
    flash_attn: bool
    sides: tuple[str, ...]
    nodes: tuple[NodeDiff, ...]
    threshold: float
    failures: tuple[BackendFailure, ...] = ()
    precision: tuple[tuple[str, str], ...] = ()  #: (side, inference precision it ran)
    logits_nmse: tuple[tuple[str, float], ...] = ()  #: (side, NMSE of all logits of the batch)

    def first_divergent(self, side: str) -> NodeDiff | None:
        """The first node in graph order whose NMSE passes the threshold (or is not finite)."""
        for n in self.nodes:
            v = n.of(side)
            if not (math.isfinite(v) and v <= self.threshold):
                return n
        return None

    def failure(self, side: str) -> BackendFailure | None:
        return next((f for f in self.failures if f.side == side), None)

    def as_dict(self) -> dict[str, Any]:
        """Plain data (``--json``)."""

        def first(side: str) -> str | None:
            n = self.first_divergent(side)
            return None if n is None else n.name

        return {
            "path": self.path,
            "tokens": list(self.tokens),
            "flash_attn": self.flash_attn,
            "threshold": self.threshold,
            "sides": list(self.sides),
            "precision": dict(self.precision),
            "logits_nmse": dict(self.logits_nmse),
            "first_divergent": {s: first(s) for s in self.sides},
            "nodes": [
                {"name": n.name, "op": n.op, "ne": list(n.ne), "nmse": dict(n.nmse)} for n in self.nodes
            ],
            "failures": [
                {k: getattr(f, k) for k in f.__slots__ if k != "log"} | {"log": list(f.log)}
                for f in self.failures
            ],
        }

    def report(self) -> Report:
        firsts = {s: self.first_divergent(s) for s in self.sides}
        rows = []
        for i, n in enumerate(self.nodes):
            marks = [f"<- first past {self.threshold:.0e} ({s})" for s, f in firsts.items() if f is n]
            rows.append(
                (
                    str(i),
                    n.op,
                    n.name,
                    "×".join(map(str, n.ne)),
                    *(f"{n.of(s):.2e}" for s in self.sides),
                    " ".join(marks),
                )  # fmt: skip
            )
        notes = [
            f"{len(self.tokens)} fed tokens, flash attention {'on' if self.flash_attn else 'off'}; "
            f"NMSE of each side against llama.cpp's CPU build, in its graph order (ggml ne)"
        ]
        ran, logits = dict(self.precision), dict(self.logits_nmse)
        for s in self.sides:
            f = firsts[s]
            found = (
                f"first divergent node {f.name} ({f.op}, NMSE {f.of(s):.2e})"
                if f
                else "no node past the threshold"
            )
            on_logits = f"; logits NMSE {logits[s]:.2e}" if s in logits else ""
            notes.append(f"{s}{f' ({ran[s]})' if ran.get(s) else ''}: {found}{on_logits}")
        if firsts.get("upstream") is not None:
            if F32_RERUN in firsts:
                verdict = "removes it" if firsts[F32_RERUN] is None else "does not remove it"
                notes.append(f"the f32 rerun of the real backend {verdict}")
            elif ran.get("upstream", "").endswith("f32"):
                notes.append("upstream ran in f32 already: its precision does not explain the divergence")
        for fl in self.failures:
            how = (
                f"its log names {fl.node_op} {fl.node!r}; {fl.failing_op} {fl.failing_node!r}, which "
                f"consumes it, threw ({fl.ov_node})"
                if fl.found_by == "log"
                else f"OpenVINO's {fl.ov_node} threw, the backend's translation of {fl.failing_op}: "
                f"most likely {fl.failing_op} {fl.failing_node!r} (the store with the most indices), "
                f"fed by {fl.node_op} {fl.node!r}"
            )
            notes.append(
                f"{fl.side} FAILED (llama_decode {fl.code}): {how}. Single-op case: {fl.case_line} "
                "(the op at the node's shapes and types; what the backend does around it in a whole "
                "model, such as slicing the KV cache, is not in it)"
            )
        return Report(
            f"compare-model {Path(self.path).name}",
            ("#", "op", "name", "ne", *self.sides, ""),
            tuple(rows),
            tuple(notes),
        )
