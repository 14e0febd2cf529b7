"""The policy against the real backend's supports_op verdicts (shared/data/upstream-support-verdicts.csv).

Every row is parsed and rebuilt as the output node test-backend-ops' ``support`` mode asks about;
the policy (upstream-exact mode, CPU, the revision that produced the CSV) must agree with every
row it can express.  Rows it cannot express are counted and listed by reason.  The agreement
figure is printed (``pytest -s``) and attached to the junit report (``record_property``).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from ovkit.catalogue.verdicts import build_case, replay
from ovkit.ops.policy import GATES, GLOBAL_GATES, Revision, check_op
from ovkit.ops.verdict_csv import CSV_REVISION, SHIPPED, parse_params, read_verdicts

# A gzip copy of shared/data/upstream-support-verdicts.csv ships with the package, so it is read where
# the shared tree is absent; test_the_shipped_copy_is_the_shared_file keeps the two identical.
CSV = SHIPPED
SHARED_CSV = Path(__file__).resolve().parents[2] / "shared" / "data" / "upstream-support-verdicts.csv"


@pytest.fixture(scope="module")
def verdicts():
    return read_verdicts(CSV)


@pytest.fixture(scope="module")
def agreement(verdicts):
    return replay(verdicts, "CPU", upstream_exact=True, revision=CSV_REVISION)


def test_the_shipped_copy_is_the_shared_file(verdicts):
    if SHARED_CSV.exists():
        assert read_verdicts(SHARED_CSV) == verdicts
    assert verdicts[0].op_name == "ABS" and verdicts[-1].op_name


def test_every_row_is_read(verdicts):
    assert len(verdicts) == 9747
    assert sum(v.supported for v in verdicts) == 892


def test_parser_reads_test_backend_ops_notation():
    p = parse_params("type=f32,ne_a=[5,7,11,13],v=0,split")
    assert p == {"type": "f32", "ne_a": [5, 7, 11, 13], "v": 0, "split": True}
    p = parse_params("hsk=64,nr23=[4,1],max_bias=0.000000,prec=f32,type_K=q4_0,permute=[0,2,1,3]")
    assert p["nr23"] == [4, 1] and p["max_bias"] == 0.0 and p["type_K"] == "q4_0"
    assert parse_params("pool_type=avg,k0=3")["pool_type"] == "avg"


def test_policy_agrees_with_every_expressible_row(agreement, record_property):
    summary = agreement.summary()
    print("\n" + summary)
    record_property("agreement", f"{agreement.agreeing}/{agreement.expressible}/{agreement.total}")
    bad = [
        f"{r.verdict.op_name}({r.verdict.op_params}): upstream={int(r.verdict.supported)} "
        f"ovkit={int(r.decision.supported)} {r.decision.reason}"
        for r in agreement.disagreements
        if r.decision is not None
    ]
    assert not bad, "disagreements:\n" + "\n".join(bad[:50])
    assert agreement.agreeing == agreement.expressible
    # every row is expressible: ops newer than the reference test source are decided by membership
    assert agreement.expressible == agreement.total == 9747
    assert not agreement.unexpressible_by_reason()


def test_unknown_cases_are_counted_with_a_reason_not_dropped():
    from ovkit.ops.verdict_csv import Verdict

    rows = [Verdict("FANCY_NEW_FUSION", "type=f32,ne=[4,4,1,1]", False), Verdict("ADD", "type=f32", True)]
    result = replay(rows)
    assert result.total == 2 and result.expressible == 0
    assert result.unexpressible_by_reason() == Counter(
        {"unknown test case FANCY_NEW_FUSION": 1, "parameter 'ne' missing for ADD": 1}
    )
    assert "unexpressible (1): unknown test case FANCY_NEW_FUSION" in result.summary()


def test_supported_rows_and_rejections_are_both_covered(agreement):
    """Agreement is not vacuous: supported rows pass every gate, and many distinct gates reject."""
    gates = Counter(r.decision.gate for r in agreement.results if r.decision is not None)
    assert gates[""] == 892
    rejecting = {g for g in gates if g}
    assert len(rejecting) >= 25
    assert {
        "global.membership",
        "global.types",
        "global.quant_3d",
        "flash_attn.pattern",
        "rope.view",
    } <= rejecting


def test_unregistered_ops_are_rejected_by_membership(verdicts):
    for v in verdicts:
        if v.op_name in ("ABS", "SGN", "RELU", "CONV_2D", "TOP_K", "SOLVE_TRI"):
            d = check_op(
                build_case(v.op_name, v.op_params), "CPU", upstream_exact=True, revision=CSV_REVISION
            )
            assert not d.supported and d.gate == "global.membership", v


def test_name_keyed_quirks_only_matter_in_upstream_exact_mode(verdicts):
    """Without upstream-exact mode only the CPY test-shape quirk changes verdicts on this CSV."""
    relaxed = replay(verdicts, "CPU", upstream_exact=False, revision=CSV_REVISION)
    changed = {(r.verdict.op_name, r.verdict.op_params) for r in relaxed.disagreements}
    assert changed and all(op == "CPY" for op, _ in changed)
    for op, params in changed:
        assert build_case(op, params).ne[1:] == (4, 3, 2)


def test_newer_revision_differs_only_where_its_gates_differ(verdicts):
    """Revision N is newer than the CSV: every difference comes from a revision-specific gate
    or from op membership / allowed types."""
    n = replay(verdicts, "CPU", upstream_exact=True, revision=Revision.N)
    assert n.disagreements  # N registers SQR, SIGMOID, CUMSUM ... that the CSV's backend rejects
    rev_specific = {g.key for g in GLOBAL_GATES if g.revisions != frozenset(Revision)}
    for gates in GATES.values():
        rev_specific |= {g.key for g in gates if g.revisions != frozenset(Revision)}
    for r in n.disagreements:
        assert r.decision is not None
        if r.decision.supported:  # N accepts what V rejected: V's rejecting gate is revision-specific
            v = check_op(
                build_case(r.verdict.op_name, r.verdict.op_params),
                "CPU",
                upstream_exact=True,
                revision=Revision.V,
            )
            assert v.gate in rev_specific, (r.verdict, v)
        else:
            assert r.decision.gate in rev_specific, (r.verdict, r.decision)


FA = (
    "hsk=64,hsv=64,nh=4,nr23=[1,1],kv=512,nb=1,mask=1,sinks=0,max_bias=0.000000,"
    "logit_softcap=0.000000,prec=f32,type_K=f16,type_V=f16,permute=[0,2,1,3]"
)


def test_a_verdict_asks_about_the_graph_the_runnable_case_builds():
    """One transcription: k and v are views only when the case's kv_view says so, and v is a view
    of k when v_is_view_of_k says so (the second copy knew neither)."""
    viewed = build_case("FLASH_ATTN_EXT", FA)
    assert [s.srcs[0].op for s in viewed.srcs[1:3]] == ["VIEW", "VIEW"]
    plain = build_case("FLASH_ATTN_EXT", FA + ",kv_view=0")
    assert [s.srcs[0].op for s in plain.srcs[1:3]] == ["NONE", "NONE"]
    shared = build_case("FLASH_ATTN_EXT", FA + ",kv_view=0,v_is_view_of_k=1")
    v = shared.srcs[2]
    assert v.op == "VIEW" and v.view_src is not None and v.view_src.name == "k"


def test_a_verdict_sizes_a_convolution_as_ggml_does():
    """ggml_calc_conv_output_size divides as C does (toward zero): a 2x2 input, 3x3 kernel and
    stride 2 give one output column and row (flooring gave none)."""
    params = (
        "type_input=f32,type_kernel=f32,dst_type=f32,ne_input=[2,2,1,1],ne_kernel=[3,3,1,1],"
        "s0=2,s1=2,p0=0,p1=0,d0=1,d1=1,is_2D=1"
    )
    assert build_case("IM2COL", params).ne == (9, 1, 1, 1)


def test_a_case_ovkit_cannot_build_is_asked_about_with_its_types():
    """ovkit has no q1_0: the row is still asked about, as its output op over the case's leaves,
    and the type gate rejects it as upstream did."""
    params = "type_src=f16,type_dst=q1_0,type_idx=i64,ne=[256,11,1,1],nr23=[2,3],r=7,v=0"
    info = build_case("SET_ROWS", params)
    assert info.op == "SET_ROWS" and info.dtype == "q1_0"
    assert {s.name: s.dtype for s in info.srcs} == {"dst": "q1_0", "src": "f16", "row_idxs": "i64"}
    d = check_op(info, "CPU", upstream_exact=True, revision=CSV_REVISION)
    assert not d.supported and d.gate == "global.types"


def test_ops_without_a_case_builder_are_the_ggml_ops_the_enum_lists():
    from ovkit.catalogue.verdicts import GGML_OPS
    from ovkit.ir import Op

    assert "DSV4_HC_PRE" in GGML_OPS and Op.SSM_SCAN in GGML_OPS and Op.GROUP_NORM in GGML_OPS
    assert not {Op.NONE, Op.UNARY, Op.GLU, Op.CUSTOM} & GGML_OPS
    assert not any(isinstance(o, Op) and o.sub_op for o in GGML_OPS)
    d = check_op(build_case("SSM_SCAN", "type=f32,d_state=16"), "CPU", revision=CSV_REVISION)
    assert not d.supported and d.gate == "global.membership"


def test_set_rows_is_asked_about_with_ggml_source_order():
    """ggml_set_rows(a, b, c) keeps src[0] = b (the rows), src[1] = c (the indices), src[2] = a
    (the destination), and the backend's GET_ROWS/SET_ROWS case reads src[0]'s type: a q4_1
    destination 256 wide is not the rows it refuses (the real backend supports it; see
    tests/test_upstream_set_rows.py), a 3-D quantized destination is refused as src[2]."""
    wide = build_case("SET_ROWS", "type_src=f32,type_dst=q4_1,type_idx=i64,ne=[256,5,1,1],nr23=[1,1],r=1,v=0")
    assert [(s.name, s.dtype) for s in wide.srcs] == [("src", "f32"), ("row_idxs", "i64"), ("dst", "q4_1")]
    assert check_op(wide, "CPU", upstream_exact=True, revision=Revision.N).supported
    deep = build_case("SET_ROWS", "type_src=f32,type_dst=q4_0,type_idx=i64,ne=[32,5,3,1],nr23=[1,1],r=1,v=0")
    d = check_op(deep, "CPU", upstream_exact=True, revision=Revision.N)
    assert not d.supported and d.gate == "global.quant_3d" and "src2 is q4_0" in d.reason
    stand_in = build_case(
        "SET_ROWS", "type_src=f16,type_dst=q1_0,type_idx=i64,ne=[256,11,1,1],nr23=[2,3],r=7,v=0"
    )
    assert [s.name for s in stand_in.srcs] == ["src", "row_idxs", "dst"] and stand_in.ne == (256, 11, 2, 3)
