"""``python -m ovkit.upstream drift``: a backend source against ovkit's tables."""

from __future__ import annotations

import hashlib
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from ovkit.config import ENV_VARS
from ovkit.native import INSTALL_SCRIPT
from ovkit.upstream.__main__ import main
from ovkit.upstream.build import llama_openvino_build, llama_openvino_dir
from ovkit.upstream.drift import (
    BACKEND_DIR,
    ORIGIN_FILE,
    DriftReport,
    SourceError,
    drift,
    keep_sources,
    kept_sources,
    ovkit_gated_ops,
    ovkit_ops,
)


# The differences between each kept backend revision and ovkit's tables that were looked at and
# kept, each with its reason: the installed revision must drift by exactly these.
@dataclass(frozen=True, slots=True)
class KnownDelta:
    """A difference between one backend revision and ovkit's tables, looked at and kept."""

    table: str  #: the compared table: ``variables``, ``registered ops`` or ``ops with per-op gates``
    name: str  #: as the report names it (``GGML_OPENVINO_MOE_OP``, ``GGML_OP_ROLL``, ``SCALE``)
    in_source: bool  #: True: only the source has it; False: only ovkit's tables have it
    reason: str


_FORK_VARIABLE = (
    "read by Intel's fork (ravi9/llama.cpp ggml-openvino-extra.cpp env_var_names[]); ovkit's "
    "variable table follows the newest list, a superset of this revision's"
)
_NEWER_OP = (
    "registered after revision N (aee56b3ab), the upstream state ovkit's policy follows; ovkit "
    "refuses it as not registered"
)
#: Per kept revision (``<package>-<version>``, as ``kept_sources`` names it): its differences
#: from ovkit's tables (the policy revision ``compare`` picks, N), each with its reason.
KNOWN_DELTAS: dict[str, tuple[KnownDelta, ...]] = {
    "llama-cpp-python-0.3.36": (
        KnownDelta("variables", "GGML_OPENVINO_COMPILED_MODEL_CACHE_ONLY", False, _FORK_VARIABLE),
        KnownDelta("variables", "GGML_OPENVINO_FULL_GRAPH_KEY", False, _FORK_VARIABLE),
        KnownDelta("variables", "GGML_OPENVINO_MOE_OP", False, _FORK_VARIABLE),
        KnownDelta(
            "variables",
            "GGML_OPENVINO_NPU_PROPERTIES",
            False,
            "modelled by ovkit (appended last to the NPU class's compile properties); this revision "
            "does not read it",
        ),
        KnownDelta(
            "registered ops", "GGML_GLU_OP_GEGLU_QUICK", True, f"{_NEWER_OP} (its own translation runs it)"
        ),
        KnownDelta(
            "registered ops",
            "GGML_GLU_OP_SWIGLU_CLAMP",
            True,
            f"{_NEWER_OP}; ovkit's IR has no SWIGLU_CLAMP (ggml-python 0.0.45's ggml, the oracle, predates it)",
        ),
        KnownDelta("registered ops", "GGML_OP_POOL_2D", True, f"{_NEWER_OP} (its own translation runs it)"),
        KnownDelta("registered ops", "GGML_OP_ROLL", True, f"{_NEWER_OP} (its own translation runs it)"),
        KnownDelta(
            "registered ops", "GGML_UNARY_OP_RELU", True, f"{_NEWER_OP} (its own translation runs it)"
        ),
        KnownDelta(
            "ops with per-op gates",
            "POOL_2D",
            True,
            "the gate of an op registered after N (GPU: padding with a kernel under 3 is refused)",
        ),
        KnownDelta(
            "ops with per-op gates",
            "SCALE",
            True,
            "a bf16 SCALE result is refused after N; N's SCALE has no per-op gate",
        ),
    )
}


def unexplained(report: DriftReport, known: Sequence[KnownDelta]) -> list[str]:
    """What ``report`` shows beyond ``known`` and what ``known`` lists that the report no longer
    shows (a delta that went away must leave the table too); empty when the two match."""
    seen = {
        (d.what.split(" (")[0], name, side)
        for d in report.differences
        for side, names in ((True, d.only_source), (False, d.only_ovkit))
        for name in names
    }
    listed = {(k.table, k.name, k.in_source) for k in known}
    where = {True: "in the source, not in ovkit", False: "in ovkit, not in the source"}
    new = [f"{t}: {n} ({where[s]}) is not in the known deltas" for t, n, s in sorted(seen - listed)]
    gone = [
        f"{t}: {n} ({where[s]}) is a known delta the source no longer shows"
        for t, n, s in sorted(listed - seen)
    ]
    return new + gone


BACKEND = Path("vendor/llama.cpp/ggml/src/ggml-openvino")


def write_backend(root: Path, *, variables: list[str], ops: list[str], gated: list[str]) -> Path:
    """A miniature backend tree shaped like upstream's, with comments where upstream has them."""
    d = root / BACKEND
    (d / "openvino").mkdir(parents=True)
    names = "\n".join(f'        "{v}",' for v in variables)
    (d / "ggml-openvino-extra.cpp").write_text(
        "void init() {\n    static constexpr const char * env_var_names[] = {\n"
        f'        // String values\n{names}\n        // "GGML_OPENVINO_COMMENTED_OUT",\n    }};\n}}\n'
    )
    entries = "\n".join(f'        {{"{o}", op::translate_x}},' for o in ops)
    (d / "openvino" / "op_table.cpp").write_text(
        f'static table = {{\n{entries}\n        // {{"GGML_OP_SOLVE_TRI", op::translate_solve_tri}},\n}};\n'
    )
    cases = "".join(
        f"    case GGML_OP_{g}: {{\n        if (x) {{\n            return true;\n        }}\n        break;\n    }}\n"
        for g in gated
    )
    (d / "ggml-openvino.cpp").write_text(
        "static bool is_op_unsupported_case(const ggml_tensor * op) {\n    switch (op->op) {\n"
        f"{cases}"
        "    case GGML_OP_SSM_CONV: {\n        // return true;\n        break;\n    }\n"
        "    default:\n        break;\n    }\n    return false;\n}\n"
    )
    return root


def ovkit_backend(root: Path) -> Path:
    return write_backend(
        root,
        variables=[v.env_name for v in ENV_VARS],
        ops=sorted(ovkit_ops("N")),
        gated=sorted(ovkit_gated_ops("N")),
    )


def test_a_source_with_ovkits_tables_shows_no_drift(tmp_path: Path) -> None:
    report = drift(ovkit_backend(tmp_path))
    assert report.revision == "N" and not report.drifted
    assert "GGML_OPENVINO_COMMENTED_OUT" not in report.source.variables
    assert "GGML_OP_SOLVE_TRI" not in report.source.ops and "SSM_CONV" not in report.source.gated_ops


def test_each_table_reports_both_directions(tmp_path: Path) -> None:
    variables = [v.env_name for v in ENV_VARS if v.name != "MOE_OP"] + ["GGML_OPENVINO_NEW_KNOB"]
    ops = sorted(ovkit_ops("N") - {"GGML_OP_TRI"} | {"GGML_OP_ROLL", "GGML_UNARY_OP_RELU"})
    gated = sorted(ovkit_gated_ops("N") - {"REPEAT"} | {"POOL_2D"})
    report = drift(write_backend(tmp_path, variables=variables, ops=ops, gated=gated), "N")
    by_what = {d.what.split(" (")[0]: d for d in report.differences}
    assert by_what["variables"].only_source == ("GGML_OPENVINO_NEW_KNOB",)
    assert by_what["variables"].only_ovkit == ("GGML_OPENVINO_MOE_OP",)
    assert by_what["registered ops"].only_source == ("GGML_OP_ROLL", "GGML_UNARY_OP_RELU")
    assert by_what["registered ops"].only_ovkit == ("GGML_OP_TRI",)
    assert (by_what["ops with per-op gates"].only_source, by_what["ops with per-op gates"].only_ovkit) == (
        ("POOL_2D",),
        ("REPEAT",),
    )


def test_an_sdist_reads_like_its_tree_and_the_command_exits_by_drift(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tree = ovkit_backend(tmp_path / "llama_cpp_python-9.9.9")
    sdist = tmp_path / "llama_cpp_python-9.9.9.tar.gz"
    with tarfile.open(sdist, "w:gz") as tar:
        tar.add(tree, arcname="llama_cpp_python-9.9.9")
    assert drift(sdist).source.ops == drift(tree).source.ops
    assert main(["drift", str(sdist)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1:4] == [
        "ovkit policy revision compared: N",
        "variables (env_var_names[]): no drift",
        "  in the source, not in ovkit: (none)",
    ]
    (tree / BACKEND / "openvino" / "op_table.cpp").write_text('{"GGML_OP_ADD", op::translate_add},\n')
    assert main(["drift", str(tree), "--revision", "P"]) == 1
    assert "  in ovkit, not in the source: GGML_GLU_OP_GEGLU," in capsys.readouterr().out


def test_unreadable_sources_are_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SourceError, match="no ggml/src/ggml-openvino/ggml-openvino-extra.cpp below it"):
        drift(tmp_path)
    assert main(["drift", str(tmp_path / "missing")]) == 2
    assert "not a directory or a source archive" in capsys.readouterr().err
    assert main(["drift", str(ovkit_backend(tmp_path)), "--revision", "X"]) == 2
    assert "unknown policy revision 'X'; expected one of N, V, P" in capsys.readouterr().err


def _sdist(tmp_path: Path) -> tuple[Path, Path]:
    """A miniature sdist (ovkit's own tables) with a file outside the backend, and its tree."""
    tree = ovkit_backend(tmp_path / "llama_cpp_python-9.9.9")
    (tree / "vendor" / "llama.cpp" / "README.md").write_text("not the backend\n")
    sdist = tmp_path / "llama_cpp_python-9.9.9.tar.gz"
    with tarfile.open(sdist, "w:gz") as tar:
        tar.add(tree, arcname="llama_cpp_python-9.9.9")
    return sdist, tree


def test_keep_sources_keeps_the_backend_tree_only_and_reads_like_the_sdist(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sdist, _ = _sdist(tmp_path)
    monkeypatch.setenv("OVKIT_UPSTREAM_SOURCES", str(tmp_path / "kept"))
    dest = kept_sources("llama-cpp-python", "9.9.9")
    assert dest == tmp_path / "kept" / "llama-cpp-python-9.9.9"
    (dest / "stale").mkdir(parents=True)  # an older copy is replaced whole
    assert keep_sources(sdist, dest) == dest
    files = sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file())
    assert files == [
        ORIGIN_FILE,
        BACKEND_DIR + "ggml-openvino-extra.cpp",
        BACKEND_DIR + "ggml-openvino.cpp",
        BACKEND_DIR + "openvino/op_table.cpp",
    ]
    digest = hashlib.sha256(sdist.read_bytes()).hexdigest()
    assert (dest / ORIGIN_FILE).read_text() == f"llama_cpp_python-9.9.9.tar.gz\nsha256 {digest}\n"
    kept, packed = drift(dest), drift(sdist)
    assert (kept.source.variables, kept.source.ops, kept.source.gated_ops) == (
        packed.source.variables,
        packed.source.ops,
        packed.source.gated_ops,
    )
    with pytest.raises(SourceError, match="the archive holds no ggml/src/ggml-openvino/"):
        empty = tmp_path / "empty.tar.gz"
        with tarfile.open(empty, "w:gz") as tar:
            tar.add(tmp_path / "llama_cpp_python-9.9.9" / "vendor" / "llama.cpp" / "README.md", "x/README.md")
        keep_sources(empty, tmp_path / "nothing")


def test_unexplained_names_new_differences_and_stale_known_deltas(tmp_path: Path) -> None:
    variables = [v.env_name for v in ENV_VARS if v.name != "MOE_OP"]
    ops = sorted(ovkit_ops("N") | {"GGML_OP_ROLL"})
    report = drift(write_backend(tmp_path, variables=variables, ops=ops, gated=sorted(ovkit_gated_ops("N"))))
    roll = KnownDelta("registered ops", "GGML_OP_ROLL", True, "newer")
    moe = KnownDelta("variables", "GGML_OPENVINO_MOE_OP", False, "the fork's")
    scale = KnownDelta("ops with per-op gates", "SCALE", True, "newer")
    assert unexplained(report, [roll, moe]) == []
    assert unexplained(report, [roll, scale]) == [
        "variables: GGML_OPENVINO_MOE_OP (in ovkit, not in the source) is not in the known deltas",
        "ops with per-op gates: SCALE (in the source, not in ovkit) is a known delta the source no longer shows",
    ]


def test_the_installed_sdist_drifts_by_exactly_its_known_deltas() -> None:
    """The backend sources of the llama-cpp-python sdist scripts/install-upstream built (it keeps
    them) against ovkit's tables: every difference is a decided one (docs/upstream.md)."""
    build = llama_openvino_build()
    assert build is not None and build.has_openvino, (
        f"the OpenVINO build of llama-cpp-python is not installed at {llama_openvino_dir()}; "
        f"run bash {INSTALL_SCRIPT}"
    )
    where = kept_sources("llama-cpp-python", build.version)
    assert (where / BACKEND_DIR).is_dir(), (
        f"the backend sources of llama-cpp-python {build.version} are not kept at {where}; run "
        f"bash {INSTALL_SCRIPT} (with its builds current it only fetches the sdist and keeps them)"
    )
    known = KNOWN_DELTAS.get(where.name)
    assert known is not None, (
        f"no known deltas recorded for {where.name}: run drift on {where} and decide each"
    )
    report = drift(where)
    assert report.revision == "N"
    assert unexplained(report, known) == [], "\n".join(report.lines())
