"""The op catalogue: one entry per registered op/sub-op, complete, and docs/ops.md in step with it."""

from __future__ import annotations

from pathlib import Path

from ovkit.graph import Graph
from ovkit.ops import policy
from ovkit.ops.table import ENTRIES, TABLE, op_coverage_table, registered_entries, render_markdown

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
    keys = {e.key for e in registered_entries()}
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
        assert e.translate is not None and e.reference is not None, e.key
        assert e.upstream == "none" and "op_table.cpp" in e.reason
    for node in (g.sin(x), g.gelu_erf(x), g.reglu(x), g.mean(x)):
        decision = policy.check_op(node, "CPU")
        assert not decision.supported and "not registered" in decision.reason


def test_solve_tri_is_listed_as_not_registered_with_the_reason() -> None:
    entry = TABLE["SOLVE_TRI"]
    assert not entry.registered
    assert "accuracy issues on GPU" in entry.reason
    assert entry.translate is None and entry.reference is not None


def test_every_registered_entry_has_builders_translation_reference_and_policy_key() -> None:
    for e in registered_entries():
        for b in e.builders:
            assert callable(getattr(Graph, b, None)), f"{e.key}: Graph.{b} is missing"
        assert e.translate is not None, f"{e.key}: no OpenVINO translation"
        assert e.reference is not None, f"{e.key}: no numpy reference"
        assert e.key in policy.GATES, f"{e.key}: policy.GATES has no entry"
        assert e.openvino and e.upstream and e.params


def test_gates_come_from_the_policy_module() -> None:
    rope = TABLE["ROPE"].gates()
    assert rope and all(g in policy.GATES["ROPE"] for g in rope)
    assert any(
        "EXP with an f32 output" in g.description for g in TABLE["UNARY.EXP"].gates()
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
        "docs/ops.md is stale: regenerate with `python -m ovkit.ops.table > docs/ops.md`"
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
    from ovkit.ir import UNARY_OPS, Op
    from ovkit.ops import table

    assert set(table.UNARY_BUILT) == set(UNARY_OPS) - {Op.XIELU}
    assert table.GLU_BUILT == (Op.SWIGLU, Op.SWIGLU_OAI, Op.GEGLU, Op.REGLU, Op.GEGLU_ERF, Op.GEGLU_QUICK)
    assert set(table.LISTS.glu_cases) == {"REGLU", "GEGLU", "SWIGLU", "GEGLU_ERF", "GEGLU_QUICK"}
    assert table.BUILDER_OP["rope_multi"] is Op.ROPE and table.BUILDER_OP["gelu"] is Op.GELU
    assert "unary" not in table.BUILDER_OP and "glu_split" not in table.BUILDER_OP


def test_every_op_is_in_every_place_the_add_an_op_checklist_names() -> None:
    """docs/ops.md's checklist, checked: builders, reference, translation, gates, a runnable
    test-backend-ops case and a curated case, for every entry the place applies to."""
    from ovkit.catalogue import backend_ops, curated
    from ovkit.ir import VIEW_OPS, Op
    from ovkit.ops import table

    assert [place for place, _ in table.ADD_AN_OP][-2:] == [
        "`ovkit/catalogue/backend_ops.py`",
        "`ovkit/catalogue/curated/testops.py`",
    ]
    test_ops = {c.op for c in curated.cases(curated.TEST_OPS)}
    any_set = {c.op for c in curated.cases()}
    for e in ENTRIES:
        for b in e.builders:
            assert callable(getattr(Graph, b, None)), f"{e.key}: Graph.{b} is missing"
        assert e.reference is not None, f"{e.key}: no numpy reference"
        assert e.translate is not None or e.key is Op.SOLVE_TRI, f"{e.key}: no OpenVINO translation"
        if e.registered:
            assert e.key in policy.GATES, f"{e.key}: policy.GATES has no entry"
            assert str(e.key) in test_ops, f"{e.key}: no case in the test-ops set"
        case_name = e.key.sub_op or e.key.value
        if e.key in VIEW_OPS or e.key is Op.ADD1:  # test-backend-ops has no test of its own
            assert str(e.key) in any_set, f"{e.key}: no curated case"
        else:
            assert case_name in backend_ops.BUILDERS, f"{e.key}: no test-backend-ops case builder"
