"""What a backend source tree (checkout or sdist) has that ovkit's tables do not, and the other way
round: its variables against ``ovkit.config.ENV_VARS``, its op table and per-op gates against the
policy's closest revision (``python -m ovkit.upstream drift SOURCE``)."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import sys
import tarfile
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ovkit.errors import OvkitError

BACKEND_DIR = "ggml/src/ggml-openvino/"
FILES = {
    "extra": "ggml-openvino-extra.cpp",
    "op_table": "openvino/op_table.cpp",
    "backend": "ggml-openvino.cpp",
    "op_support": "ggml-openvino-op-support.cpp",  # newer forks keep supports_op here
}
_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_ENV_ARRAY = re.compile(r"env_var_names\[\]\s*=\s*\{(.*?)\};", re.S)
_ENV_NAME = re.compile(r'"(GGML_OPENVINO_[A-Z0-9_]+)"')
_TABLE_KEY = re.compile(r'\{\s*"(GGML_(?:OP|UNARY_OP|GLU_OP)_[A-Z0-9_]+)"')
_CASE_FN = re.compile(r"^[^\n;]*\bis_op_(?:un)?supported_case\s*\([^)]*\)\s*\{", re.M)
_CASE = re.compile(r"case\s+GGML_OP_([A-Z0-9_]+)\s*:")


class SourceError(OvkitError, ValueError):
    """The path holds no readable ggml-openvino backend (the message says what was looked for)."""


@dataclass(frozen=True, slots=True)
class BackendSource:
    """What one backend source tree declares."""

    where: str
    variables: tuple[str, ...]
    ops: frozenset[str]  #: op_table keys: GGML_OP_ADD, GGML_UNARY_OP_GELU, GGML_GLU_OP_SWIGLU
    gated_ops: frozenset[str]  #: ggml op names with an active per-op case


def _read_tree(root: Path) -> dict[str, str]:
    found = sorted(root.rglob(FILES["extra"]), key=lambda p: (len(p.parts), str(p)))
    if not found:
        raise SourceError(f"{root}: no {BACKEND_DIR}{FILES['extra']} below it")
    base = found[0].parent
    return {
        k: (base / name).read_text(encoding="utf-8") for k, name in FILES.items() if (base / name).is_file()
    }


def _case_blocks(text: str) -> frozenset[str]:
    """Ops whose case in ``is_op_(un)supported_case`` has a ``return`` left after comments go."""
    gated: set[str] = set()
    for head in _CASE_FN.finditer(text):
        end = text.find("\n}\n", head.end())
        body = text[head.end() : end if end >= 0 else len(text)]
        pending: list[str] = []
        pieces = _CASE.split(body)  # [before, op, block, op, block, ...]
        for op, block in zip(pieces[1::2], pieces[2::2], strict=True):
            pending.append(op)
            if not block.strip():  # fall-through label: shares the next block
                continue
            if "return" in block.split("default:")[0]:
                gated.update(pending)
            pending = []
    return frozenset(gated)


def read_source(path: str | Path) -> BackendSource:
    """The variables, registered ops and gated ops of the backend in ``path`` (dir or sdist)."""
    p = Path(path)
    if p.is_dir():
        texts = _read_tree(p)
    elif p.is_file() and tarfile.is_tarfile(p):
        with tempfile.TemporaryDirectory() as tmp:
            texts = _read_tree(keep_sources(p, Path(tmp, "src")))
    else:
        raise SourceError(f"{path}: not a directory or a source archive")
    texts = {k: _COMMENTS.sub("", v) for k, v in texts.items()}
    array = _ENV_ARRAY.search(texts["extra"])
    if array is None:
        raise SourceError(f"{path}: {FILES['extra']} has no env_var_names[] list")
    variables = tuple(dict.fromkeys(_ENV_NAME.findall(array.group(1))))
    if "op_table" not in texts:
        raise SourceError(f"{path}: no {BACKEND_DIR}{FILES['op_table']}")
    ops = frozenset(_TABLE_KEY.findall(texts["op_table"]))
    gated = _case_blocks(texts.get("backend", "")) | _case_blocks(texts.get("op_support", ""))
    return BackendSource(str(path), variables, ops, gated)


# -- ovkit's side -------------------------------------------------------------------------------
def ovkit_ops(revision: str) -> frozenset[str]:
    """The op_table keys ovkit's policy registers in ``revision`` (NONE has no table entry)."""
    from ovkit.ir import Op
    from ovkit.ops.policy import REGISTERED, Revision

    return frozenset(op.ggml_name for op in REGISTERED[Revision(revision)] if op != Op.NONE)


def ovkit_gated_ops(revision: str) -> frozenset[str]:
    """The ggml ops with at least one per-op gate in ``revision`` (UNARY/GLU sub-ops excluded)."""
    from ovkit.ops.policy import GATES, Revision

    rev = Revision(revision)
    return frozenset(
        k for k, gates in GATES.items() if "." not in k and any(rev in g.revisions for g in gates)
    )


@dataclass(frozen=True, slots=True)
class Difference:
    """One compared table: what only the source has, and what only ovkit has."""

    what: str
    only_source: tuple[str, ...]
    only_ovkit: tuple[str, ...]

    @property
    def drifted(self) -> bool:
        return bool(self.only_source or self.only_ovkit)


@dataclass(frozen=True, slots=True)
class DriftReport:
    """The source against ovkit's tables, with the ovkit policy revision it was compared to."""

    source: BackendSource
    revision: str
    differences: tuple[Difference, ...]

    @property
    def drifted(self) -> bool:
        return any(d.drifted for d in self.differences)

    def lines(self) -> list[str]:
        out = [f"source: {self.source.where}", f"ovkit policy revision compared: {self.revision}"]
        for d in self.differences:
            out.append(f"{d.what}: {'drift' if d.drifted else 'no drift'}")
            out.append(f"  in the source, not in ovkit: {', '.join(d.only_source) or '(none)'}")
            out.append(f"  in ovkit, not in the source: {', '.join(d.only_ovkit) or '(none)'}")
        return out


def _diff(what: str, source: Iterable[str], ovkit: Iterable[str]) -> Difference:
    s, o = set(source), set(ovkit)
    return Difference(what, tuple(sorted(s - o)), tuple(sorted(o - s)))


def compare(source: BackendSource, revision: str | None = None) -> DriftReport:
    """Compare ``source`` with ovkit's tables; ``revision`` None picks the closest policy revision."""
    from ovkit.config import ENV_VARS
    from ovkit.ops.policy import Revision

    known = [r.value for r in Revision]
    if revision is not None and revision not in known:
        raise ValueError(f"unknown policy revision {revision!r}; expected one of {', '.join(known)}")

    def op_diffs(rev: str) -> tuple[Difference, Difference]:
        return (
            _diff("registered ops (op_table.cpp)", source.ops, ovkit_ops(rev)),
            _diff("ops with per-op gates (supports_op)", source.gated_ops, ovkit_gated_ops(rev)),
        )

    def size(diffs: Iterable[Difference]) -> int:
        return sum(len(d.only_source) + len(d.only_ovkit) for d in diffs)

    candidates: Mapping[str, tuple[Difference, Difference]] = {
        r.value: op_diffs(r.value) for r in ([Revision(revision)] if revision else list(Revision))
    }
    best = min(candidates, key=lambda r: size(candidates[r]))
    variables = _diff("variables (env_var_names[])", source.variables, (v.env_name for v in ENV_VARS))
    return DriftReport(source, best, (variables, *candidates[best]))


def drift(path: str | Path, revision: str | None = None) -> DriftReport:
    """:func:`compare` of the backend in ``path``."""
    return compare(read_source(path), revision)


# -- the sources scripts/install-upstream keeps -------------------------------------------------
#: Where the install script keeps the backend sources of each sdist it builds (one directory per
#: ``<package>-<version>``); ``$OVKIT_UPSTREAM_SOURCES`` overrides.
SOURCES_ENV = "OVKIT_UPSTREAM_SOURCES"
SOURCES_SUBDIR = Path("share", "ovkit", "sources")
#: The file naming the sdist the kept sources came from and its sha256.
ORIGIN_FILE = "ORIGIN"


def kept_sources(package: str, version: str) -> Path:
    """The directory the install script keeps ``package`` ``version``'s backend sources in."""
    override = os.environ.get(SOURCES_ENV)
    root = Path(override) if override else Path(sys.prefix) / SOURCES_SUBDIR
    return root / f"{package}-{version}"


def keep_sources(sdist: str | Path, dest: str | Path) -> Path:
    """Copy ``sdist``'s ``ggml/src/ggml-openvino/`` tree to ``dest`` (replaced whole), with
    :data:`ORIGIN_FILE` naming the archive and its sha256."""
    src, out = Path(sdist), Path(dest)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    with tarfile.open(src) as tar:
        members = [m for m in tar.getmembers() if m.isfile()]
        extra = sorted((m.name for m in members if m.name.endswith(BACKEND_DIR + FILES["extra"])), key=len)
        if not extra:
            raise SourceError(f"{src}: the archive holds no {BACKEND_DIR}{FILES['extra']}")
        base = extra[0][: -len(FILES["extra"])]  # the shallowest backend directory
        kept = [m.replace(name=m.name[len(base) :]) for m in members if m.name.startswith(base)]
        try:  # the data filter refuses a member that would land outside the directory
            tar.extractall(tmp / BACKEND_DIR, kept, filter="data")
        except tarfile.FilterError as exc:
            raise SourceError(f"{src}: member {exc.tarinfo.name!r} points outside {BACKEND_DIR}") from None
    digest = hashlib.sha256(src.read_bytes()).hexdigest()
    (tmp / ORIGIN_FILE).write_text(f"{src.name}\nsha256 {digest}\n", encoding="utf-8")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out
