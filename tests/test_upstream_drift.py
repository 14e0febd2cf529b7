"""``python -m ovkit.upstream drift``: a backend source against ovkit's tables."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from ovkit.config import ENV_VARS
from ovkit.upstream.__main__ import main
from ovkit.upstream.drift import SourceError, drift, ovkit_gated_ops, ovkit_ops

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
