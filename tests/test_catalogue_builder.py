"""The case builder against test-backend-ops' own graphs.

For a sample of rows per op, the ggml graph the builder makes (ggml's own builder functions, not
run) must have the output ``ne``, type and node list that the ``build_graph`` of the matching
``test_*`` struct in llama.cpp's tests/test-backend-ops.cpp makes.  The expectations below are
that source's formulas written out independently of the builder (ggml_conv_2d_direct's output
size, flash attention's [hsv, heads, batch, nr3], ...).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from ovkit import oracle
from ovkit.catalogue import backend_ops, run
from ovkit.catalogue.case import Case, draw, index_set_err
from ovkit.ops.verdict_csv import parse_params


@dataclass(frozen=True, slots=True)
class Structure:
    """A built ggml graph as test-backend-ops would see it: output ne and type, op of every node."""

    ne: tuple[int, int, int, int]
    dtype: str
    nodes: tuple[str, ...]


def ggml_structure(case: Case) -> Structure:
    """Build (not run) the case's graph with ggml itself and describe it."""
    import ctypes

    g = oracle.ggml_module()
    params = g.ggml_init_params(mem_size=g.ggml_tensor_overhead() * 256 + g.ggml_graph_overhead(),
                                mem_buffer=None, no_alloc=True)  # fmt: skip
    ctx = g.ggml_init(params)
    try:
        leaves = {}
        for leaf in case.leaves:
            ne = (ctypes.c_int64 * 4)(*leaf.ne)
            # ggml_f32 leaves as the oracle gets them (its ggml_set_rows asserts an f32 src at build)
            dtype = "f32" if leaf.name in case.ggml_f32 else leaf.dtype
            t = g.ggml_new_tensor(ctx, oracle.type_id(dtype), 4, ne)
            g.ggml_set_name(t, leaf.name.encode())
            leaves[leaf.name] = oracle.GgmlTensor(t)
        out = case.program(oracle.GgmlBuilder(ctx), leaves)
        gf = g.ggml_new_graph(ctx)
        g.ggml_build_forward_expand(gf, out.ptr)
        nodes = tuple(oracle.GgmlTensor(g.ggml_graph_node(gf, i)).op for i in range(g.ggml_graph_n_nodes(gf)))
        return Structure(out.ne, out.dtype, nodes)
    finally:
        g.ggml_free(ctx)


Expected = tuple[tuple[int, ...], str, tuple[str, ...]]


def _ne(x: Any) -> tuple[int, int, int, int]:
    v = [int(i) for i in x] + [1] * (4 - len(x))
    return (v[0], v[1], v[2], v[3])


def _cdiv(a: int, b: int) -> int:
    """C's integer division (truncates toward zero, unlike Python's //)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def _conv(ins: int, ks: int, s: int, p: int, d: int) -> int:
    return _cdiv(ins + 2 * p - d * (ks - 1) - 1, s) + 1


def _unary(p: dict[str, Any]) -> Expected:
    if "ne_a" not in p:
        return _ne(p["ne"]), p["type"], ("UNARY",)
    return _ne(p["ne_a"]), p["type"], (("VIEW",) if p["v"] & 1 else ()) + ("UNARY",)


def _glu(p: dict[str, Any]) -> Expected:
    ne = _ne(p["ne_a"])
    views = ("VIEW", "VIEW") if p.get("split") and p["v"] & 1 else ("VIEW",) if p["v"] & 1 else ()
    out = ne if p.get("split") else (ne[0] // 2, *ne[1:])
    return out, p["type"], (*views, "GLU")


def _bin(op: str) -> Callable[[dict[str, Any]], Expected]:
    def f(p: dict[str, Any]) -> Expected:
        ne, nr, nf = _ne(p["ne"]), _ne(p["nr"]), p["nf"]
        pre = ("PERMUTE",) * nf if p["perm1"] else ()
        out = tuple(ne[i] * nr[i] for i in range(4))
        if p["src_overlap"]:
            out = (ne[0], ne[1], ne[2], 2 * (ne[3] // 3))
            pre = ("VIEW",) * (nf + 1)
        return out, p["type"], (*pre, *(op,) * nf)

    return f


def _mul_mat(p: dict[str, Any]) -> Expected:
    bs, nr = p["bs"], p["nr"]
    out = (p["m"], p["n"], bs[0] * nr[0], bs[1] * nr[1])
    permuted = list(p["per"]) != [0, 1, 2, 3]
    pre = ("PERMUTE", "PERMUTE") if permuted else ("VIEW", "VIEW") if p["k_v"] else ()
    return out, "f32", (*pre, "MUL_MAT")


def _mul_mat_id(p: dict[str, Any]) -> Expected:
    pre = ("VIEW",) if p["n_used"] != p["n_mats"] else ()
    return (p["m"], p["n_used"], p["n"], 1), "f32", (*pre, "MUL_MAT_ID")


def _flash(p: dict[str, Any]) -> Expected:
    blck = oracle.block_size(p["type_V"])  # GGML_PAD(hsv, ggml_blck_size(type_V))
    hsv = (p["hsv"] + blck - 1) // blck * blck
    permuted = list(p["permute"]) != [0, 1, 2, 3]
    v_of_k = p["type_K"] == p["type_V"] and p["hsk"] == 576 and p["hsv"] == 512
    k = ("VIEW", "PERMUTE") if permuted else ("VIEW",)
    q = ("PERMUTE",) if permuted else ()
    v = ("VIEW",) if v_of_k else k
    return (hsv, p["nh"] * p["nr23"][0], p["nb"], p["nr23"][1]), "f32", (*q, *k, *v, "FLASH_ATTN_EXT")


def _soft_max(p: dict[str, Any]) -> Expected:
    ne, (n2, n3) = _ne(p["ne"]), p["nr23"]
    return (ne[0], ne[1], ne[2] * n2, ne[3] * n3), p["type"], ("SOFT_MAX",)


def _rope(op: str) -> Callable[[dict[str, Any]], Expected]:
    def f(p: dict[str, Any]) -> Expected:
        return _ne(p["ne_a"]), p["type"], (("VIEW",) if p["v"] else ()) + (op,)

    return f


def _get_rows(p: dict[str, Any]) -> Expected:
    r = p["r"] // 2 if p["v"] else p["r"]
    return (p["n"], r, p["be1"], p["be2"]), "i32" if p["type"] == "i32" else "f32", (
        ("VIEW",) if p["v"] else ()) + ("GET_ROWS",)  # fmt: skip


def _set_rows(p: dict[str, Any]) -> Expected:
    ne, (n2, n3) = _ne(p["ne"]), p["nr23"]
    return (ne[0], ne[1], ne[2] * n2, ne[3] * n3), p["type_dst"], (("VIEW", "VIEW") if p["v"] else ()) + (
        "SET_ROWS",)  # fmt: skip


def _cpy(p: dict[str, Any]) -> Expected:
    ne = list(_ne(p["ne_src"]))
    pre: tuple[str, ...] = ()
    if sum(p["permute_src"]):
        q = [0] * 4
        for i, ax in enumerate(p["permute_src"]):
            q[ax] = ne[i]
        ne, pre = q, ("PERMUTE",)
    if p["_src_transpose"]:
        ne[0], ne[1] = ne[1], ne[0]
        pre += ("TRANSPOSE",)
    out = list(_ne(p["ne_dst"]) if "ne_dst" in p else ne)
    if sum(p["permute_dst"]):  # the dst leaf is made with dst_ne, then permuted
        q = [0] * 4
        for i, ax in enumerate(p["permute_dst"]):
            q[ax] = out[i]
        out, pre = q, (*pre, "PERMUTE")
    return tuple(out), p["type_dst"], (*pre, "CPY")


def _concat(p: dict[str, Any]) -> Expected:
    ne = list(_ne(p["ne_a"]))
    ne[p["dim"]] += p["ne_b_d"]
    pre = ("VIEW",) * (int(bool(p["v"] & 1)) + int(bool(p["v"] & 2)))
    return tuple(ne), p["type"], (*pre, "CONCAT")


def _im2col(p: dict[str, Any]) -> Expected:
    i, k = _ne(p["ne_input"]), _ne(p["ne_kernel"])
    ow = _conv(i[0], k[0], p["s0"], p["p0"], p["d0"])
    if p["is_2D"]:
        oh = _conv(i[1], k[1], p["s1"], p["p1"], p["d1"])
        return (k[2] * k[1] * k[0], ow, oh, i[3]), p["dst_type"], ("IM2COL",)
    return (k[1] * k[0], ow, i[2], 1), p["dst_type"], ("IM2COL",)


def _im2col_3d(p: dict[str, Any]) -> Expected:
    i, k, ic = _ne(p["ne_input"]), _ne(p["ne_kernel"]), p["IC"]
    if p["v"]:  # test_im2col_3d's view: every dim 2 smaller
        i = (i[0] - 2, i[1] - 2, i[2] - 2, i[3] - 2)
    o = [_conv(i[d], k[d], p[f"s{d}"], p[f"p{d}"], p[f"d{d}"]) for d in range(3)]
    n = i[3] // ic  # ggml_im2col_3d: N = b->ne[3] / IC (0 batches: an empty result)
    return (k[0] * k[1] * k[2] * ic, o[0], o[1], o[2] * n), p["dst_type"], (("VIEW",) if p["v"] else ()) + (
        "IM2COL_3D",)  # fmt: skip


def _conv_2d(p: dict[str, Any]) -> Expected:
    i, k = _ne(p["ne_input"]), _ne(p["ne_kernel"])
    ow = _conv(i[0], k[0], p["stride0"], p["padding0"], p["dilation0"])
    oh = _conv(i[1], k[1], p["stride1"], p["padding1"], p["dilation1"])
    pre = ("PERMUTE", "CONT", "PERMUTE", "PERMUTE", "CONT", "PERMUTE") if p["cwhn"] else ()
    return (ow, oh, k[3], i[3]), "f32", (*pre, "CONV_2D")


def _argsort(p: dict[str, Any]) -> Expected:
    return _ne(p["ne"]), "i32", ("ARGSORT",)


def _norm(op: str) -> Callable[[dict[str, Any]], Expected]:
    def f(p: dict[str, Any]) -> Expected:
        ne = _ne(p["ne"])
        pre: tuple[str, ...] = ("PERMUTE",) if p.get("noncontig_rows") else ()
        if p.get("v"):
            ne = tuple(n // 2 for n in ne)  # type: ignore[assignment]
            pre += ("VIEW",)
        return ne, p["type"], (*pre, op)

    return f


def _pool_1d(p: dict[str, Any]) -> Expected:
    i = _ne(p["ne_input"])
    ow = _cdiv(i[0] + 2 * p["p0"] - p["k0"], p["s0"]) + 1
    return (ow, i[1], i[2], i[3]), "f32", ("POOL_1D",)


def _out_prod(p: dict[str, Any]) -> Expected:
    bs, nr = p["bs"], p["nr"]
    return (p["m"], p["n"], bs[0] * nr[0], bs[1] * nr[1]), "f32", (("TRANSPOSE",) if p["trans_b"] else ()) + (
        "OUT_PROD",)  # fmt: skip


def _set(p: dict[str, Any]) -> Expected:
    ne = _ne(p["ne"])
    return tuple(n * 2 if i < p["dim"] else n for i, n in enumerate(ne)), p["type_dst"], ("SET",)


def _acc(p: dict[str, Any]) -> Expected:
    return _ne(p["ne_a"]), p["type"], (("VIEW",) if p["stride_dim"] in (1, 2, 3) else ()) + ("ACC",)


def _repeat_back(p: dict[str, Any]) -> Expected:
    return _ne(p["ne"]), p["type"], (("VIEW",) if p["v"] else ()) + ("REPEAT_BACK",)


def _get_rows_back(p: dict[str, Any]) -> Expected:
    return (p["n"], p["m"], 1, 1), "f32", (("VIEW",) if p["v"] else ()) + ("GET_ROWS_BACK",)


def _back(op: str) -> Callable[[dict[str, Any]], Expected]:
    return lambda p: (_ne(p["ne"]), p["type"], (op,))


def _upscale(p: dict[str, Any]) -> Expected:
    if "ne_tgt" in p:
        return _ne(p["ne_tgt"]), p["type"], ("UPSCALE",)
    ne, sf = _ne(p["ne"]), p["scale_factor"]
    if p["transpose"]:
        ne = (ne[1], ne[0], ne[2], ne[3])
    return (ne[0] * sf, ne[1] * sf, ne[2], ne[3]), p["type"], (("TRANSPOSE",) if p["transpose"] else ()) + (
        "UPSCALE",)  # fmt: skip


def _col2im_1d(p: dict[str, Any]) -> Expected:
    return ((p["T_in"] - 1) * p["s0"] + p["K"] - 2 * p["p0"], p["OC"], 1, 1), p["type"], ("COL2IM_1D",)


def _dup(p: dict[str, Any]) -> Expected:
    ne, perm = _ne(p["ne"]), p.get("permute", [0, 0, 0, 0])
    if not sum(perm):
        return ne, p["type"], ("DUP",)
    q = [0] * 4
    for i, ax in enumerate(perm):
        q[ax] = ne[i]
    return tuple(q), p["type"], ("PERMUTE", "DUP")


EXPECTED: dict[str, Callable[[dict[str, Any]], Expected]] = {
    **{u: _unary for u in backend_ops.UNARY},
    **{g: _glu for g in backend_ops.GLU},
    **{op: _bin(op) for op in ("ADD", "SUB", "MUL", "DIV")},
    "MUL_MAT": _mul_mat,
    "MUL_MAT_ID": _mul_mat_id,
    "FLASH_ATTN_EXT": _flash,
    "SOFT_MAX": _soft_max,
    "ROPE": _rope("ROPE"),
    "ROPE_BACK": _rope("ROPE_BACK"),
    "GET_ROWS": _get_rows,
    "SET_ROWS": _set_rows,
    "CPY": _cpy,
    "CONCAT": _concat,
    "IM2COL": _im2col,
    "IM2COL_3D": _im2col_3d,
    "CONV_2D": _conv_2d,
    "ARGSORT": _argsort,
    "NORM": _norm("NORM"),
    "RMS_NORM": _norm("RMS_NORM"),
    "L2_NORM": _norm("L2_NORM"),
    "POOL_1D": _pool_1d,
    "OUT_PROD": _out_prod,
    "SET": _set,
    "ACC": _acc,
    "REPEAT_BACK": _repeat_back,
    "GET_ROWS_BACK": _get_rows_back,
    "SOFT_MAX_BACK": _back("SOFT_MAX_BACK"),
    "RMS_NORM_BACK": _back("RMS_NORM_BACK"),
    "UPSCALE": _upscale,
    "DUP": _dup,
    "COL2IM_1D": _col2im_1d,
    "DIAG_MASK_INF": _back("DIAG_MASK_INF"),
    "SILU_BACK": _back("SILU_BACK"),
    "MUL_MAT_HADAMARD": _mul_mat,
    "ROLL": lambda p: ((10, 5, 4, 3), "f32", ("ROLL",)),
    "PAD_REFLECT_1D": lambda p: (
        (p["ne_a"][0] + p["pad_0"] + p["pad_1"], p["ne_a"][1], 1, 1),
        "f32",
        ("PAD_REFLECT_1D",),
    ),
    "XIELU": lambda p: (_ne(p["ne"]), p["type"], ("UNARY",)),
    "ARANGE": lambda p: ((10, 1, 1, 1), "f32", ("ARANGE",)),
    "TIMESTEP_EMBEDDING": lambda p: ((p["dim"], p["ne_a"][0], 1, 1), "f32", ("TIMESTEP_EMBEDDING",)),
    "COUNT_EQUAL": lambda p: ((1, 1, 1, 1), "i64", ("ARGMAX", "ARGMAX", "COUNT_EQUAL")),
    # ggml_set_param(a) makes the leaf a graph node of its own (op NONE), as in test_opt_step_sgd
    "OPT_STEP_SGD": lambda p: (_ne(p["ne"]), "f32", ("NONE", "OPT_STEP_SGD")),
    "CROSS_ENTROPY_LOSS_BACK": lambda p: (_ne(p["ne"]), "f32", ("SOFT_MAX", "CROSS_ENTROPY_LOSS_BACK")),
}


def _buildable(r: run.Row) -> bool:
    try:
        backend_ops.build(r.op, r.params)
    except backend_ops.NoCase:
        return False
    return True


def _sample() -> list[run.Row]:
    rows = [r for r in run.read_rows() if r.op in EXPECTED and _buildable(r)]
    return run.stratified(rows, 600, seed=1)


@pytest.mark.parametrize("row", _sample(), ids=lambda r: r.name[:120])
def test_built_graph_matches_test_backend_ops(row: run.Row) -> None:
    want_ne, want_type, want_nodes = EXPECTED[row.op](parse_params(row.params))
    got = ggml_structure(backend_ops.build(row.op, row.params))
    assert got.ne == _ne(want_ne), f"output ne {got.ne} vs test-backend-ops {want_ne}"
    assert got.dtype == want_type.lower() or got.dtype == want_type, f"type {got.dtype} vs {want_type}"
    assert got.nodes == want_nodes, f"nodes {got.nodes} vs test-backend-ops {want_nodes}"


def test_every_shipped_row_is_a_case_or_named() -> None:
    rows = run.read_rows()
    missing: dict[str, int] = {}
    for r in rows:
        try:
            backend_ops.build(r.op, r.params)
        except backend_ops.NoCase:
            missing[r.op] = missing.get(r.op, 0) + 1
    built = len(rows) - sum(missing.values())
    assert len(rows) == 9747
    assert built / len(rows) > 0.93, f"only {built} of {len(rows)} rows build; missing {missing}"


def test_inputs_follow_test_backend_ops_initialisation() -> None:
    rng = np.random.default_rng(0)
    sqrt = backend_ops.build("SQRT", "type=f32,ne=[10,3,3,2]")
    assert draw(sqrt.leaves[0], rng).min() >= 50.0  # test_sqrt: uniform [50, 100]
    argsort = backend_ops.build("ARGSORT", "type=f32,ne=[16,10,1,1],order=0")
    a = draw(argsort.leaves[0], rng)
    assert all(sorted(row) == list(range(16)) for row in a.reshape(-1, 16))  # distinct per row
    sr = backend_ops.build(
        "SET_ROWS", "type_src=f32,type_dst=f16,type_idx=i64,ne=[7,16,2,3],nr23=[1,1],r=5,v=0"
    )
    idx = draw(sr.leaves[2], rng).reshape(-1, 5)
    assert all(len(set(r)) == 5 and max(r) < 16 for r in idx)  # no duplicate targets, valid rows
    gr = backend_ops.build("GET_ROWS", "type=f32,n=256,m=5,r=4,be1=7,be2=1,v=0")
    assert draw(gr.leaves[1], rng).max() < 5  # row ids within m
    fa = backend_ops.build(
        "FLASH_ATTN_EXT",
        "hsk=64,hsv=64,nh=8,nr23=[1,1],kv=512,nb=128,mask=1,sinks=0,max_bias=0.000000,"
        "logit_softcap=0.000000,prec=f32,type_K=f16,type_V=f16,permute=[0,1,2,3]",
    )
    mask = draw(next(leaf for leaf in fa.leaves if leaf.name == "m"), rng)
    assert np.isinf(mask).any() and mask.dtype == np.float16  # masked blocks of -inf
    hm = backend_ops.build(
        "MUL_MAT_HADAMARD", "type_a=f32,type_b=f32,m=64,n=8,k=64,bs=[1,1],nr=[1,1],per=[0,1,2,3],k_v=0,o=1"
    )
    h = draw(hm.leaves[0], rng).reshape(64, 64).astype(np.float64)
    np.testing.assert_allclose(h @ h.T, np.eye(64), atol=1e-6)  # an orthonormal Hadamard matrix


def test_top_k_error_ignores_order_but_not_membership() -> None:
    a = np.array([[3, 1, 2], [0, 5, 4]], np.float32)
    assert index_set_err(a, a[:, ::-1]) == 0.0
    worse = a.copy()
    worse[0, 0] = 7
    assert index_set_err(worse, a) == pytest.approx(2 / (2 * a.size))
    assert index_set_err(a + 0.5, a) == pytest.approx(6 * 0.5)  # non-integer indices are penalised
