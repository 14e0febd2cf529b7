"""Every catalogue op: ovkit's Graph on the real OpenVINO CPU device against ggml's own CPU backend.

Each case is ONE program written against the builder API. It runs twice:
``program(Graph(), leaves)`` → ``Graph.compute`` on OpenVINO's CPU device, and
``program(GgmlBuilder, leaves)`` → real ggml (ggml-python) on ggml's CPU backend. The results are
compared with test-backend-ops' check (NaN/inf rules, then NMSE ≤ the op's threshold, 1e-7 unless
:attr:`ovkit.ops.table.OpEntry.max_nmse` or the case documents otherwise).

The cases are the curated catalogue's ``ggml`` set (:mod:`ovkit.catalogue.curated`, also run by
``ovkit test-ops --set ggml``): shapes in ggml's ``ne`` order (innermost first), as in
test-backend-ops, and input value ranges as test-backend-ops draws them (e.g. [-150, 150] for
unary/GLU, [0.9, 1.1] for MUL/DIV), from a seed of the case's name.

Cases the upstream support policy rejects on CPU declare it (``rejected=`` with a reason
fragment, ``Case.rejected``): the test checks that ``compute`` raises ``UnsupportedOpError`` with that reason, then
still runs the OpenVINO translation on the CPU device (bypassing the policy) and compares the
numbers, so semantics are verified for every op. A second test runs the same cases through the
catalogue's numpy reference (``compute(mode="reference")``) against ggml.
"""

from __future__ import annotations

import numpy as np
import pytest

from ovkit import oracle
from ovkit.catalogue import curated
from ovkit.catalogue.case import Case, build_ovkit, draw_all, ggml_inputs
from ovkit.graph import UnsupportedOpError
from ovkit.ops.table import max_nmse

DEVICE = "CPU"
CASES = curated.cases(curated.GGML)


def _assert_matches(case: Case, got: np.ndarray, want: np.ndarray) -> None:
    assert oracle.same_ne(got.shape, want.shape), f"{case.name}: ovkit shape {got.shape} vs ggml {want.shape}"
    assert got.dtype == want.dtype, f"{case.name}: ovkit dtype {got.dtype} vs ggml {want.dtype}"
    verdict = oracle.compare(got, want, case.max_err)
    assert verdict.ok, f"{case.name}: {verdict}"


@pytest.mark.parametrize("case", [pytest.param(c, id=c.name) for c in CASES])
def test_op_matches_ggml(case: Case) -> None:
    leaves = ggml_inputs(case, draw_all(case))
    g, out, feed = build_ovkit(case, leaves)  # first: ovkit validates shapes before ggml can assert
    rejection = None
    try:
        got = np.asarray(g.compute(out, feed, device=DEVICE))
    except UnsupportedOpError as exc:
        got, rejection = g.compute(out, feed, device=DEVICE, policy=False), exc.reason
    if not case.rejected:
        assert rejection is None, f"{case.name}: the CPU policy rejected this case: {rejection}"
    else:
        assert rejection is not None, f"{case.name}: expected the CPU policy to reject ({case.rejected!r})"
        assert case.rejected.lower() in rejection.lower(), f"{case.name}: rejection reason {rejection!r}"
    want = oracle.ggml_program(case.program, leaves)
    assert isinstance(want, np.ndarray)
    _assert_matches(case, got, want)


@pytest.mark.parametrize("case", [pytest.param(c, id=c.name) for c in CASES])
def test_numpy_reference_matches_ggml(case: Case) -> None:
    """The catalogue's numpy reference (``compute(mode="reference")``) also reproduces ggml."""
    leaves = ggml_inputs(case, draw_all(case))
    g, out, feed = build_ovkit(case, leaves)
    got = np.asarray(g.compute(out, feed, mode="reference"))
    want = oracle.ggml_program(case.program, leaves)
    assert isinstance(want, np.ndarray)
    _assert_matches(case, got, want)


#: the catalogue: ggml ops (39) and the sub-ops of UNARY (7) and GLU (3) registered upstream.
CATALOGUE_OPS: tuple[str, ...] = (
    "ADD",
    "ADD1",
    "ADD_ID",
    "CONCAT",
    "CONT",
    "DIV",
    "FILL",
    "GET_ROWS",
    "IM2COL",
    "MUL",
    "MUL_MAT",
    "MUL_MAT_ID",
    "PERMUTE",
    "RESHAPE",
    "RMS_NORM",
    "NORM",
    "L2_NORM",
    "SUM_ROWS",
    "ROPE",
    "SCALE",
    "SQR",
    "SQRT",
    "SOFT_MAX",
    "ARGSORT",
    "SUB",
    "TRANSPOSE",
    "VIEW",
    "SET_ROWS",
    "CPY",
    "FLASH_ATTN_EXT",
    "CLAMP",
    "PAD",
    "SSM_CONV",
    "GATED_DELTA_NET",
    "REPEAT",
    "CUMSUM",
    "DIAG",
    "TRI",
    "SET",
    "UNARY.GELU",
    "UNARY.SIGMOID",
    "UNARY.SILU",
    "UNARY.SOFTPLUS",
    "UNARY.TANH",
    "UNARY.EXP",
    "UNARY.NEG",
    "GLU.SWIGLU",
    "GLU.SWIGLU_OAI",
    "GLU.GEGLU",
)


def test_every_catalogue_op_has_cases() -> None:
    assert len(CATALOGUE_OPS) == 39 + 7 + 3
    missing = sorted(set(CATALOGUE_OPS) - {c.op for c in CASES})
    assert not missing, f"catalogue entries without a ggml comparison: {missing}"


def test_case_names_are_unique() -> None:
    names = [c.name for c in CASES]
    assert len(names) == len(set(names)), [n for n in names if names.count(n) > 1]


def test_overrides_are_documented() -> None:
    for c in CASES:
        if c.max_err != max_nmse(c.op):
            assert c.why, f"{c.name}: a threshold override needs its reason"
