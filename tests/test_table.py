"""The op catalogue: one entry per registered op/sub-op, complete, and docs/ops.md in step with it."""

from __future__ import annotations

from pathlib import Path

from ovkit.graph import Graph
from ovkit.ir import Op
from ovkit.ops import policy
from ovkit.ops.coverage import entry_gates, op_coverage_table, referenced, render_markdown, translated
from ovkit.ops.table import DEFAULT_MAX_NMSE, ENTRIES, TABLE, max_nmse

DOCS = Path(__file__).resolve().parents[1] / "docs" / "ops.md"

UPSTREAM_OPS = {
    "ADD", "ADD1", "ADD_ID", "CONCAT", "CONT", "DIV", "FILL", "GET_ROWS", "IM2COL", "MUL", "MUL_MAT",
    "MUL_MAT_ID", "PERMUTE", "RESHAPE", "RMS_NORM", "NORM", "L2_NORM", "SUM_ROWS", "ROPE", "SCALE", "SQR",
    "SQRT", "SOFT_MAX", "ARGSORT", "SUB", "TRANSPOSE", "VIEW", "SET_ROWS", "CPY", "FLASH_ATTN_EXT", "CLAMP",
    "PAD", "SSM_CONV", "GATED_DELTA_NET", "REPEAT", "CUMSUM", "DIAG", "TRI", "SET",
}  # fmt: skip
UPSTREAM_UNARY = {"GELU", "SIGMOID", "SILU", "SOFTPLUS", "TANH", "EXP", "NEG"}
UPSTREAM_GLU = {"SWIGLU", "SWIGLU_OAI", "GEGLU"}


def test_catalogue_lists_exactly_what_upstream_registers() -> None:
    keys = {e.key for e in ENTRIES if e.registered}
    assert len(UPSTREAM_OPS) == 39
    assert keys == UPSTREAM_OPS | {f"UNARY.{u}" for u in UPSTREAM_UNARY} | {f"GLU.{g}" for g in UPSTREAM_GLU}
    assert ENTRIES[-1].key == "SOLVE_TRI" and not ENTRIES[-1].registered


def test_ops_upstream_lacks_are_translated_but_refused_by_the_upstream_policy() -> None:
    own = [e for e in ENTRIES if not e.registered and e.key != "SOLVE_TRI"]
    assert {"SIN", "COS", "LOG", "MEAN", "SUM", "UNARY.GELU_ERF", "GLU.GEGLU_QUICK"} <= {e.key for e in own}
    g = Graph()
    x = g.input("x", (2, 8))
    for e in own:
        for b in e.builders:
            assert callable(getattr(Graph, b, None)), f"{e.key}: Graph.{b} is missing"
        assert translated(e.key) and referenced(e.key), e.key
        assert e.upstream == "none" and "op_table.cpp" in e.reason
    for node in (g.sin(x), g.gelu_erf(x), g.reglu(x), g.mean(x)):
        decision = policy.check_op(node, "CPU")
        assert not decision.supported and "not registered" in decision.reason


def test_solve_tri_is_listed_as_not_registered_with_the_reason() -> None:
    entry = TABLE[Op.SOLVE_TRI]
    assert not entry.registered
    assert "accuracy issues on GPU" in entry.reason
    assert not translated(entry.key) and referenced(entry.key)


def test_every_registered_entry_has_builders_translation_reference_and_policy_membership() -> None:
    for e in filter(lambda e: e.registered, ENTRIES):
        for b in e.builders:
            assert callable(getattr(Graph, b, None)), f"{e.key}: Graph.{b} is missing"
        assert translated(e.key), f"{e.key}: no OpenVINO translation"
        assert referenced(e.key), f"{e.key}: no numpy reference"
        assert e.key in policy.REGISTERED_N, f"{e.key}: the policy does not register it"
        assert e.openvino and e.upstream and e.params
    assert {e.key for e in ENTRIES if not e.registered}.isdisjoint(policy.REGISTERED_N)


def test_each_op_carries_its_nmse_threshold_with_the_reason() -> None:
    """test-backend-ops' thresholds live on the entries: the default unless the entry says why."""
    for e in ENTRIES:
        assert (e.max_nmse == DEFAULT_MAX_NMSE) != bool(e.nmse_reason), e.key
    assert max_nmse(Op.ADD) == DEFAULT_MAX_NMSE == 1e-7
    assert max_nmse(Op.MUL_MAT) == max_nmse("mul_mat") == max_nmse("mul_mat_id") == 5e-4
    assert max_nmse("flash_attn_ext") == 5e-4 and max_nmse("soft_max_ext") == max_nmse(Op.SOFT_MAX) == 1e-6
    assert max_nmse("llama_block") == DEFAULT_MAX_NMSE  # no entry: the default
    row = op_coverage_table().set_index("op").loc[Op.CPY]
    assert row["max_nmse"] == 1e-6


def test_gates_come_from_the_policy_module() -> None:
    rope = entry_gates(TABLE[Op.ROPE])
    assert rope and all(g in policy.GATES[Op.ROPE] for g in rope)
    assert any(
        "EXP with an f32 output" in g.description for g in entry_gates(TABLE[Op.EXP])
    )  # op-specific global gate
    df = op_coverage_table()
    row = df.set_index("op").loc["FLASH_ATTN_EXT"]
    assert "sinks" in row["gates"]
    assert "f16" in row["upstream notes"]


def test_coverage_table_has_one_row_per_entry_and_flags_translations() -> None:
    df = op_coverage_table()
    assert list(df["op"]) == [e.key for e in ENTRIES]
    assert {
        "ggml",
        "builders",
        "params",
        "openvino (ovkit)",
        "upstream translation",
        "gates",
        "upstream notes",
    } <= set(df.columns)
    registered = df[df["registered"]]
    assert registered["translated"].all() and registered["reference"].all()
    assert df.set_index("op").loc["UNARY.GELU", "ggml"] == "GGML_UNARY_OP_GELU"


def test_docs_page_is_generated_from_the_table() -> None:
    expected = render_markdown()
    actual = DOCS.read_text(encoding="utf-8") if DOCS.exists() else ""
    assert actual == expected, (
        "docs/ops.md is stale: regenerate with `python -m ovkit.ops.coverage > docs/ops.md`"
    )


def _test_op_entries():
    """The table plus one op registered the way the checklist says: a unary sub-op ``Graph.unary``
    builds (a stand-in key: the Op enum is closed) with its own named builder."""
    import enum
    from dataclasses import dataclass

    class TestOp(enum.StrEnum):
        TEST_ACT = "UNARY.TEST_ACT"

        @property
        def kind(self) -> str:
            return "unary"

        @property
        def sub_op(self) -> str:
            return "TEST_ACT"

    @dataclass(frozen=True)
    class Entry:
        key: TestOp
        builders: tuple[str, ...]

        @property
        def kind(self) -> str:
            return self.key.kind

    return TestOp.TEST_ACT, (*ENTRIES, Entry(TestOp.TEST_ACT, ("test_act", "unary")))


def test_an_op_registered_in_the_table_flows_into_every_derived_list() -> None:
    from ovkit.catalogue import backend_ops, curated
    from ovkit.ops import table

    op, entries = _test_op_entries()
    before, after = table.op_lists(ENTRIES), table.op_lists(entries)
    assert op not in before.unary_built and "TEST_ACT" not in before.unary_cases
    assert after.builder_op["test_act"] is op
    assert after.unary_built == (*before.unary_built, op)
    assert after.unary_cases == (*before.unary_cases, "TEST_ACT")
    assert after.glu_built == before.glu_built and after.glu_cases == before.glu_cases
    # ... and the modules that need a list take the table's, so they gain the op too
    assert backend_ops.UNARY is table.LISTS.unary_cases and backend_ops.GLU is table.LISTS.glu_cases
    assert all(backend_ops.BUILDERS[name] is backend_ops.BUILDERS["GELU"] for name in backend_ops.UNARY)
    assert {
        **{b: str(o) for b, o in table.BUILDER_OP.items()},
        "llama_block": "LLAMA_BLOCK",
    } == curated.BUILDER_OP


def test_derived_lists_are_what_the_lists_used_to_say() -> None:
    """The derivation reproduces the lists once typed out (ggml names, XIELU built only by xielu)."""
    from ovkit.ir import UNARY_OPS
    from ovkit.ops import table

    assert set(table.UNARY_BUILT) == set(UNARY_OPS) - {Op.XIELU}
    assert table.GLU_BUILT == (Op.SWIGLU, Op.SWIGLU_OAI, Op.GEGLU, Op.REGLU, Op.GEGLU_ERF, Op.GEGLU_QUICK)
    assert set(table.LISTS.glu_cases) == {"REGLU", "GEGLU", "SWIGLU", "GEGLU_ERF", "GEGLU_QUICK"}
    assert table.BUILDER_OP["rope_multi"] is Op.ROPE and table.BUILDER_OP["gelu"] is Op.GELU
    assert "unary" not in table.BUILDER_OP and "glu_split" not in table.BUILDER_OP


def test_every_op_is_in_every_place_the_add_an_op_checklist_names() -> None:
    """docs/ops.md's checklist, checked: builders, reference, translation, a runnable
    test-backend-ops case and a curated case, for every entry the place applies to."""
    from ovkit.catalogue import backend_ops, curated
    from ovkit.ir import VIEW_OPS
    from ovkit.ops import table

    assert [place for place, _ in table.TESTED_BY][:2] == [
        "`ovkit/catalogue/curated/testops.py`",
        "`ovkit/catalogue/backend_ops.py`",
    ]
    test_ops = {c.op for c in curated.cases(curated.TEST_OPS)}
    any_set = {c.op for c in curated.cases()}
    for e in ENTRIES:
        for b in e.builders:
            assert callable(getattr(Graph, b, None)), f"{e.key}: Graph.{b} is missing"
        assert referenced(e.key), f"{e.key}: no numpy reference"
        assert translated(e.key) or e.key is Op.SOLVE_TRI, f"{e.key}: no OpenVINO translation"
        if e.registered:
            assert str(e.key) in test_ops, f"{e.key}: no case in the test-ops set"
        case_name = e.key.sub_op or e.key.value
        if e.key in VIEW_OPS or e.key is Op.ADD1:  # test-backend-ops has no test of its own
            assert str(e.key) in any_set, f"{e.key}: no curated case"
        else:
            assert case_name in backend_ops.BUILDERS, f"{e.key}: no test-backend-ops case builder"


#: An op added in the places ``ADD_AN_OP`` names and nowhere else: (file, anchor, text, before?).
#: DIAG_MASK_ZERO is an ``Op`` member no entry has (a general op: entry, builder, reference,
#: translation); SOFTSIGN a unary sub-op ggml.h does not have yet (enum member, entry, formula,
#: the builder's typed line).
NEW_OPS: tuple[tuple[str, str, str, bool], ...] = (
    (
        "ops/table.py",
        "    OpEntry(Op.SOLVE_TRI,",
        '    OpEntry(Op.DIAG_MASK_ZERO, ("diag_mask_zero",), "a, n_past", "Select(mask, 0, a)", "none"),\n'
        '    OpEntry(Op.SOFTSIGN, ("softsign", "unary"), "a", "x / (1 + |x|)", "none"),\n',
        True,
    ),
    (
        "graph.py",
        "    def __repr__(self) -> str:",
        "    def diag_mask_zero(self, a: Tensor, n_past: int) -> Tensor:\n"
        "        self._check_tensor(Op.DIAG_MASK_ZERO, 'a', a)\n"
        "        return self._new(Op.DIAG_MASK_ZERO, a.ne, a.dtype, (a,), {'n_past': int(n_past)})\n\n",
        True,
    ),
    (
        "ops/reference.py",
        "@reference(Op.GET_ROWS_BACK)",
        "@reference(Op.DIAG_MASK_ZERO)\n"
        "def diag_mask_zero(t: Tensor, xs: list[Arr]) -> Arr:\n"
        "    return np.where(geometry.diag_mask(t), np.float32(0.0), f32(xs[0]))\n\n\n",
        True,
    ),
    (
        "ops/translate.py",
        "@translator(Op.GET_ROWS_BACK)",
        "@translator(Op.DIAG_MASK_ZERO)\n"
        "def _diag_mask_zero(t: Tensor, xs: list[Out]) -> Out:\n"
        "    return ops.select(const(geometry.diag_mask(t), np.bool_), const(0.0), f32(xs[0]))\n\n\n",
        True,
    ),
    ("ir.py", '    TRUNC = "UNARY.TRUNC"\n', '    SOFTSIGN = "UNARY.SOFTSIGN"\n', False),
    (
        "ops/formulas.py",
        '    Op.FLOOR: _prim("floor"),',
        '    Op.SOFTSIGN: lambda n, x: n.div(x, n.add(1.0, n.unary("abs", x))),\n',
        True,
    ),
    (
        "graph.py",
        "        def trunc(self, a: Tensor) -> Tensor: ...\n",
        "        def softsign(self, a: Tensor) -> Tensor: ...\n",
        False,
    ),
)

RUN_NEW_OPS = """
import json, numpy as np
from ovkit.catalogue import backend_ops, curated
from ovkit.graph import Graph
from ovkit.ir import Op
from ovkit.ops import policy
from ovkit.ops.coverage import op_coverage_table
x = np.random.default_rng(0).uniform(-3, 3, (2, 5, 8)).astype(np.float32)
out = {}
for name, build in (("DIAG_MASK_ZERO", lambda g, a: g.diag_mask_zero(a, 2)), ("UNARY.SOFTSIGN", Graph.softsign)):
    g = Graph()
    y = build(g, g.input("a", x.shape))
    ref, dev = g.compute(y, {"a": x}, mode="reference"), g.compute(y, {"a": x}, device="CPU")
    row = op_coverage_table().set_index("op").loc[name]
    out[name] = {"ref": ref.tolist(), "dev": dev.tolist(), "policy": policy.check_op(y, "GPU").supported,
                 "row": [bool(row[k]) for k in ("registered", "translated", "reference")]}
out["derived"] = ["SOFTSIGN" in backend_ops.BUILDERS, "UNARY.SOFTSIGN" in {c.op for c in curated.cases("test-ops")}]
print(json.dumps(out))
"""


def test_an_op_written_in_the_add_an_op_places_only_runs_everywhere(tmp_path: Path) -> None:
    """docs/ops.md's "Adding an op", by behaviour: a copy of the package with two ops written in the
    places ADD_AN_OP names (at most four each) builds them, runs them in the numpy reference and on
    the CPU through their translation and the policy, lists them in the coverage table, and derives
    the sub-op's test-backend-ops case builder and its test-ops case."""
    import json
    import os
    import shutil
    import subprocess
    import sys

    import numpy as np

    from ovkit.ops import table

    assert len(table.ADD_AN_OP) <= 4
    package = Path(__file__).resolve().parents[1] / "ovkit"
    copy = tmp_path / "ovkit"
    shutil.copytree(package, copy, ignore=shutil.ignore_patterns("__pycache__"))
    places: dict[str, set[str]] = {}
    for path, anchor, text, before in NEW_OPS:
        source = (copy / path).read_text()
        assert source.count(anchor) == 1, (path, anchor)
        (copy / path).write_text(source.replace(anchor, text + anchor if before else anchor + text))
        places.setdefault("SOFTSIGN" if "SOFTSIGN" in text or "softsign" in text else "DIAG", set()).add(path)
    listed = " ".join(place for place, _ in table.ADD_AN_OP)
    assert all(
        len(p) <= 4 and all(f"ovkit/{f}" in listed or f == "ir.py" for f in p) for p in places.values()
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    run = subprocess.run(
        [sys.executable, "-c", RUN_NEW_OPS],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    x = np.random.default_rng(0).uniform(-3, 3, (2, 5, 8)).astype(np.float32)
    mask = np.arange(8)[None, :] > 2 + np.arange(5)[:, None]
    for name, want in (("DIAG_MASK_ZERO", np.where(mask, 0.0, x)), ("UNARY.SOFTSIGN", x / (1 + np.abs(x)))):
        assert np.allclose(got[name]["ref"], want, atol=1e-6) and np.allclose(
            got[name]["dev"], want, atol=1e-6
        )
        assert got[name]["policy"] and got[name]["row"] == [True, True, True], name
    assert got["derived"] == [True, True]
