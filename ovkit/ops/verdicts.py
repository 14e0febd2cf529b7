"""Upstream ``supports_op`` verdicts (test-backend-ops ``support`` mode) replayed against the policy.

``shared/data/upstream-support-verdicts.csv`` holds, per test-backend-ops case, the op name, the
case's parameters in test-backend-ops notation (``type=f32,ne_a=[5,7,11,13],v=0``) and the real
backend's verdict.  In ``support`` mode test-backend-ops asks ``supports_op`` about the case's
*output* node only, so each case is rebuilt here as the :class:`~ovkit.ops.policy.OpInfo` of its
output node, the way the test-case constructor in ``tests/test-backend-ops.cpp`` builds it
(tensor names, views, permutes, in-place views included).

Cases whose graph is not known (test cases that are not in the reference test-backend-ops source)
are *unexpressible*: they are counted with a reason, never dropped silently.
"""

from __future__ import annotations

import csv
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ovkit.dtypes import contiguous_nb, layout
from ovkit.ir import GLU_OPS as _GLU
from ovkit.ir import UNARY_OPS as _UNARY
from ovkit.ir import Op, OpInfo, RopeType, pad_ne
from ovkit.ops.policy import Revision, SupportDecision, check_op

#: The revision that produced the shipped CSV (see :class:`ovkit.ops.policy.Revision`).
CSV_REVISION = Revision.V

# ----------------------------------------------------------------------------------------------
# Parsing test-backend-ops notation


def parse_params(text: str) -> dict[str, Any]:
    """``type=f32,ne=[1,2,3,4],split`` -> ``{"type": "f32", "ne": [1, 2, 3, 4], "split": True}``."""
    out: dict[str, Any] = {}
    for item in re.findall(r"[^,\[]+(?:\[[^\]]*\])?", text):
        item = item.strip()
        if not item:
            continue
        if "=" not in item:
            out[item] = True
            continue
        key, raw = item.split("=", 1)
        out[key] = _value(raw)
    return out


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


# ----------------------------------------------------------------------------------------------
# Building nodes the way ggml does


def leaf(dtype: str, ne: Sequence[int], name: str = "") -> OpInfo:
    """ggml_new_tensor."""
    return OpInfo(Op.NONE, dtype, pad_ne(ne), name=name)


def _base(t: OpInfo) -> OpInfo:
    return t.view_src if t.view_src is not None else t


def view(
    t: OpInfo, ne: Sequence[int], nb: Sequence[int] | None = None, name: str = "", offset: int = 0
) -> OpInfo:
    """ggml_view_4d(t, ne, nb1..nb3, offset) (nb[0] stays the element size)."""
    s = t.strides
    nb4 = (s[0], *nb) if nb is not None else s
    offs = offset + (t.view_offs if t.view_src is not None else 0)
    return OpInfo(
        Op.VIEW, t.dtype, pad_ne(ne), (t,), nb=pad_ne(nb4), name=name, view_src=_base(t), view_offs=offs
    )


def permute(t: OpInfo, axes: Sequence[int], op: str = Op.PERMUTE, name: str = "") -> OpInfo:
    """ggml_permute(t, a0, a1, a2, a3): dim i of t becomes dim axes[i]."""
    ne, nb = [0] * 4, [0] * 4
    for i, ax in enumerate(axes):
        ne[ax], nb[ax] = t.ne[i], t.strides[i]
    return OpInfo(op, t.dtype, pad_ne(ne), (t,), nb=pad_ne(nb), name=name, view_src=_base(t))


def transpose(t: OpInfo, name: str = "") -> OpInfo:
    return permute(t, (1, 0, 2, 3), op=Op.TRANSPOSE, name=name)


def node(
    op: str,
    dtype: str,
    ne: Sequence[int],
    srcs: Iterable[OpInfo | None],
    *,
    sub_op: str | None = None,
    name: str = "out",
    inplace_of: OpInfo | None = None,
    **params: Any,
) -> OpInfo:
    """An op node; ``inplace_of`` makes it a view of that tensor (ggml ``*_inplace``)."""
    ne4 = pad_ne(ne)
    if inplace_of is not None:
        return OpInfo(op, dtype, ne4, tuple(srcs), sub_op=sub_op, params=params, name=name,
                      nb=inplace_of.strides, view_src=_base(inplace_of),
                      view_offs=inplace_of.view_offs if inplace_of.view_src is not None else 0)  # fmt: skip
    return OpInfo(op, dtype, ne4, tuple(srcs), sub_op=sub_op, params=params, name=name)


def _maybe_view(t: OpInfo, v: Any, big: Sequence[int], name: str) -> OpInfo:
    """test-backend-ops' ``v`` pattern: a view of ``ne`` into a larger tensor of shape ``big``."""
    if not v:
        return t
    b = leaf(t.dtype, big, t.name)
    nb = b.strides
    return view(b, t.ne, nb[1:], name=name)


# ----------------------------------------------------------------------------------------------
# Per-test-case builders (tests/test-backend-ops.cpp constructors)

#: ggml unary and GLU sub-op names (the ggml.h enums).
UNARY_OPS = frozenset(str(o.sub_op) for o in _UNARY)
GLU_OPS = frozenset(str(o.sub_op) for o in _GLU)
#: ggml ops (GGML_OP_*) whose test case's output node is that op (used for ops not registered
#: upstream: the op-membership gate decides them whatever the graph).
GGML_OPS = frozenset(
    [
        Op.DUP,
        Op.ADD,
        Op.ADD_ID,
        Op.ADD1,
        Op.ACC,
        Op.SUB,
        Op.MUL,
        Op.DIV,
        Op.SQR,
        Op.SQRT,
        Op.LOG,
        Op.SIN,
        Op.COS,
        Op.SUM,
        Op.SUM_ROWS,
        Op.CUMSUM,
        Op.MEAN,
        Op.ARGMAX,
        Op.COUNT_EQUAL,
        Op.REPEAT,
        Op.REPEAT_BACK,
        Op.CONCAT,
        Op.SILU_BACK,
        Op.NORM,
        Op.RMS_NORM,
        Op.RMS_NORM_BACK,
        Op.GROUP_NORM,
        Op.L2_NORM,
        Op.MUL_MAT,
        Op.MUL_MAT_ID,
        Op.OUT_PROD,
        Op.SCALE,
        Op.SET,
        Op.CPY,
        Op.CONT,
        Op.RESHAPE,
        Op.VIEW,
        Op.PERMUTE,
        Op.TRANSPOSE,
        Op.GET_ROWS,
        Op.GET_ROWS_BACK,
        Op.SET_ROWS,
        Op.DIAG,
        Op.DIAG_MASK_INF,
        Op.DIAG_MASK_ZERO,
        Op.SOFT_MAX,
        Op.SOFT_MAX_BACK,
        Op.ROPE,
        Op.ROPE_BACK,
        Op.CLAMP,
        Op.CONV_TRANSPOSE_1D,
        Op.IM2COL,
        Op.IM2COL_BACK,
        Op.IM2COL_3D,
        Op.CONV_2D,
        Op.CONV_3D,
        Op.CONV_2D_DW,
        Op.CONV_TRANSPOSE_2D,
        Op.POOL_1D,
        Op.POOL_2D,
        Op.POOL_2D_BACK,
        Op.UPSCALE,
        Op.PAD,
        Op.PAD_REFLECT_1D,
        Op.ROLL,
        Op.ARANGE,
        Op.TIMESTEP_EMBEDDING,
        Op.ARGSORT,
        Op.TOP_K,
        Op.LEAKY_RELU,
        Op.TRI,
        Op.FILL,
        Op.FLASH_ATTN_EXT,
        Op.FLASH_ATTN_BACK,
        Op.SSM_CONV,
        Op.SSM_SCAN,
        Op.WIN_PART,
        Op.WIN_UNPART,
        Op.GET_REL_POS,
        Op.ADD_REL_POS,
        Op.RWKV_WKV6,
        Op.GATED_LINEAR_ATTN,
        Op.RWKV_WKV7,
        Op.SOLVE_TRI,
        Op.GATED_DELTA_NET,
        Op.CROSS_ENTROPY_LOSS,
        Op.CROSS_ENTROPY_LOSS_BACK,
        Op.OPT_STEP_ADAMW,
        Op.OPT_STEP_SGD,
        Op.COL2IM_1D,
        # newer ggml ops (after the reference test-backend-ops source)
        "DSV4_HC_PRE",
        "DSV4_HC_POST",
        "DSV4_HC_COMB",
        "LIGHTNING_INDEXER",
    ]
)


class Unexpressible(Exception):
    """The case's graph cannot be rebuilt; the message is the reason."""


Builder = Callable[[dict[str, Any]], OpInfo]


def _unary(name: str) -> Builder:
    def build(p: dict[str, Any]) -> OpInfo:
        ne = p["ne_a"] if "ne_a" in p else p["ne"]
        t = p["type"]
        a = leaf(t, ne, "a")
        if p.get("v", 0) & 1:
            a = _maybe_view(a, 1, (ne[0] * 3, ne[1] * 2, ne[2] * 5, ne[3] * 4), "view_of_a")
        return node(Op.UNARY, t, ne, (a,), sub_op=name)

    return build


def _glu(name: str) -> Builder:
    def build(p: dict[str, Any]) -> OpInfo:
        t, ne = p["type"], p["ne_a"]
        big = (ne[0] * 3, ne[1], ne[2], ne[3])
        a = _maybe_view(leaf(t, ne, "a"), p.get("v", 0) & 1, big, "view_of_a")
        if p.get("split") or name == "SWIGLU_OAI":
            b = _maybe_view(leaf(t, ne, "b"), p.get("v", 0) & 1, big, "view_of_b")
            extra = {"alpha": p["alpha"], "limit": p["limit"]} if name == "SWIGLU_OAI" else {}
            return node(Op.GLU, t, ne, (a, b), sub_op=name, swapped=False, **extra)
        out_ne = (ne[0] // 2, ne[1], ne[2], ne[3])
        return node(Op.GLU, t, out_ne, (a, None), sub_op=name, swapped=bool(p.get("swapped", 0)))

    return build


def _bin(op: str) -> Builder:
    def build(p: dict[str, Any]) -> OpInfo:
        t, ne, nr, nf = p["type"], p["ne"], p["nr"], p["nf"]
        a = leaf(t, [ne[i] * nr[i] for i in range(4)], "a")
        bs = []
        for i in range(nf):
            if p["perm1"]:
                perm = (1, 2, 0, 3)
                b = permute(leaf(t, [ne[perm[0]], ne[perm[1]], ne[perm[2]], ne[perm[3]]]), perm)
            elif p["src_overlap"]:
                nb = a.strides
                b = view(a, (ne[0], ne[1], ne[2], 2 * (ne[3] // 3)), nb[1:], offset=(ne[3] // 3) * nb[3])
            else:
                b = leaf(t, ne)
            bs.append(OpInfo(b.op, b.dtype, b.ne, b.srcs, nb=b.nb, view_src=b.view_src, name=f"b{i}"))
        out = a
        if p["src_overlap"]:
            out = view(a, (ne[0], ne[1], ne[2], 2 * (ne[3] // 3)), a.strides[1:])
        for b in bs:
            out = node(op, t, out.ne, (out, b), name="")
        return OpInfo(out.op, out.dtype, out.ne, out.srcs, name="out")

    return build


def _add_id(p: dict[str, Any]) -> OpInfo:
    a = leaf(p["type_a"], (p["n_embd"], p["n_experts_used"], p["n_token"]))
    b = leaf(p["type_b"], (p["n_embd"], p["n_experts"]))
    ids = leaf("i32", (p["n_experts"], p["n_token"]))
    if p["n_experts_used"] != p["n_experts"]:
        ids = view(ids, (p["n_experts_used"], p["n_token"]), ids.strides[1:], "view_of_ids")
    return node(Op.ADD_ID, p["type_a"], a.ne, (a, b, ids))


def _same(op: str, **fixed: Any) -> Builder:
    """Ops whose output has the input's type and shape (``type``/``ne``)."""

    def build(p: dict[str, Any]) -> OpInfo:
        t, ne = p["type"], (p["ne"] if "ne" in p else p["ne_a"])
        a = leaf(t, ne, "a")
        extra = {k: p[k] for k in fixed if k in p}
        return node(op, t, ne, (a,), inplace_of=a if p.get("inplace") else None, **extra)

    return build


def _argsort(p: dict[str, Any]) -> OpInfo:
    a = leaf(p["type"], p["ne"], "a")
    return node(Op.ARGSORT, "i32", p["ne"], (a,), order=p["order"])


def _concat(p: dict[str, Any]) -> OpInfo:
    t, ne_a, dim, v = p["type"], p["ne_a"], p["dim"], p["v"]
    ne_b = list(ne_a)
    ne_b[dim] = p["ne_b_d"]
    a = _maybe_view(leaf(t, ne_a, "a"), v & 1, (ne_a[0] * 2, ne_a[1] * 4, ne_a[2] * 3, ne_a[3]), "view_of_a")
    b = _maybe_view(leaf(t, ne_b, "b"), v & 2, (ne_b[0] * 3, ne_b[1] * 2, ne_b[2] * 4, ne_b[3]), "view_of_b")
    out = list(ne_a)
    out[dim] += p["ne_b_d"]
    return node(Op.CONCAT, t, out, (a, b), dim=dim)


def _cont(p: dict[str, Any]) -> OpInfo:
    src = leaf(p["type"], p["ne"], "src")
    if p["use_view_slice"]:
        ne = src.ne
        s = view(
            src, (ne[0], 1, ne[2], ne[3]), src.strides[1:], "src_view_slice", src.strides[0] * (ne[1] - 1)
        )
    else:
        s = transpose(src, "src_transposed")
    return node(Op.CONT, p["type"], s.ne, (s,))


def _cpy(p: dict[str, Any]) -> OpInfo:
    src = leaf(p["type_src"], p["ne_src"], "src")
    if sum(p["permute_src"]) > 0:
        src = permute(src, p["permute_src"], name="src_permuted")
    if p["_src_transpose"]:
        src = transpose(src, "src_transposed")
    dst_ne = p.get("ne_dst", src.ne)
    if "dst_alloc" in p:
        buf = leaf(p["type_dst"], p["dst_alloc"], "dst_buf")
        dst = view(buf, dst_ne, buf.strides[1:], "dst_view")
    else:
        dst = leaf(p["type_dst"], dst_ne, "dst")
        if sum(p["permute_dst"]) > 0:
            dst = permute(dst, p["permute_dst"], name="dst_permuted")
    return node(Op.CPY, p["type_dst"], dst.ne, (src, dst), inplace_of=dst)


def _diag(p: dict[str, Any]) -> OpInfo:
    ne = p["ne"]
    return node(Op.DIAG, p["type"], (ne[0], ne[0], ne[2], ne[3]), (leaf(p["type"], ne, "a"),))


def _pad_blck(n: int, dtype: str) -> int:
    blck = layout(dtype)[0]
    return (n + blck - 1) // blck * blck


def _flash_attn(p: dict[str, Any]) -> OpInfo:
    perm = p["permute"]
    tk, tv = p["type_K"], p["type_V"]
    hsk, hsv = _pad_blck(p["hsk"], tk), _pad_blck(p["hsv"], tv)
    nh, (nr2, nr3), kv, nb = p["nh"], p["nr23"], p["kv"], p["nb"]

    def create(dtype: str, ne: Sequence[int], is_view: bool) -> OpInfo:
        ne_perm = [0] * 4
        for i in range(4):
            ne_perm[perm[i]] = ne[i]
        if is_view:
            t0 = leaf(dtype, (ne_perm[0], 2 * ne_perm[1], ne_perm[2], ne_perm[3]))
            t = view(t0, ne_perm, t0.strides[1:])
        else:
            t = leaf(dtype, ne_perm)
        if list(perm) != [0, 1, 2, 3]:
            t = permute(t, perm)
        return t

    q = create("f32", (hsk, nb, nh * nr2, nr3), False)
    k = create(tk, (hsk, kv, nh, nr3), True)
    if tk == tv and hsk == 576 and hsv == 512:
        v = view(k, (hsv, kv, nh, nr3), k.strides[1:])
    else:
        v = create(tv, (hsv, kv, nh, nr3), True)
    m = leaf("f16", (kv, nb, 1, nr3), "m") if p["mask"] else None
    s = leaf("f32", (q.ne[2],), "s") if p["sinks"] else None
    srcs: list[OpInfo | None] = [q, k, v, m]
    if s is not None:
        srcs.append(s)
    scale = 1.0 / (p["hsk"] ** 0.5)
    out_ne = (v.ne[0], q.ne[2], q.ne[1], q.ne[3])
    return node(Op.FLASH_ATTN_EXT, "f32", out_ne, srcs, scale=scale, max_bias=p["max_bias"],
                logit_softcap=p["logit_softcap"])  # fmt: skip


def _gdn(p: dict[str, Any]) -> OpInfo:
    t, H, S, T, N, vr = (
        p[k] for k in ("type", "head_count", "head_size", "n_seq_tokens", "n_seqs", "v_repeat")
    )
    if p["permuted"]:
        q = permute(leaf(t, (S, T, H, N)), (0, 2, 1, 3))
        k = permute(leaf(t, (S, T, H, N)), (0, 2, 1, 3))
        v = permute(leaf(t, (S, T, H * vr, N)), (0, 2, 1, 3))
    else:
        q, k, v = leaf(t, (S, H, T, N)), leaf(t, (S, H, T, N)), leaf(t, (S, H * vr, T, N))
    g = leaf(t, (S if p["kda"] else 1, H * vr, T, N), "g")
    beta = leaf(t, (1, H * vr, T, N), "beta")
    state = leaf(t, (S, S, H * vr, N), "state")
    q = node(Op.L2_NORM, t, q.ne, (q,), name="")
    k = node(Op.L2_NORM, t, k.ne, (k,), name="")
    # output: attention scores then K state snapshots, packed in one tensor (shape not gated)
    out_ne = (S * H * vr, T * N + S * p["K"], 1, 1)
    return node(Op.GATED_DELTA_NET, "f32", out_ne, (q, k, v, g, beta, state), K=p["K"])


def _get_rows(p: dict[str, Any]) -> OpInfo:
    t, n, m, r, be1, be2 = (p[k] for k in ("type", "n", "m", "r", "be1", "be2"))
    a = leaf(t, (n, m, be1, be2), "in")
    rows = leaf("i32", (r, be1, be2), "rows")
    if p["v"]:
        rows = view(rows, (r // 2, be1, be2), rows.strides[1:], "view_of_rows")
    out_t = "i32" if t == "i32" else "f32"
    return node(Op.GET_ROWS, out_t, (n, rows.ne[0], rows.ne[1], rows.ne[2]), (a, rows))


def _conv_out(ins: int, ks: int, s: int, p: int, d: int) -> int:
    return (ins + 2 * p - d * (ks - 1) - 1) // s + 1


def _im2col(p: dict[str, Any]) -> OpInfo:
    inp = leaf(p["type_input"], p["ne_input"], "input")
    ker = leaf(p["type_kernel"], p["ne_kernel"], "kernel")
    if p["is_2D"]:
        oh = _conv_out(inp.ne[1], ker.ne[1], p["s1"], p["p1"], p["d1"])
        ow = _conv_out(inp.ne[0], ker.ne[0], p["s0"], p["p0"], p["d0"])
        ne = (ker.ne[2] * ker.ne[1] * ker.ne[0], ow, oh, inp.ne[3])
    else:
        ow = _conv_out(inp.ne[0], ker.ne[0], p["s0"], p["p0"], p["d0"])
        ne = (ker.ne[1] * ker.ne[0], ow, inp.ne[2], 1)
    return node(Op.IM2COL, p["dst_type"], ne, (ker, inp))


def _norm_like(op: str) -> Builder:
    def build(p: dict[str, Any]) -> OpInfo:
        t, ne = p["type"], p["ne"]
        nc = p.get("noncontig_rows", 0)
        a = leaf(t, (ne[1], ne[0], ne[2], ne[3]) if nc else ne, "a")
        if nc:
            a = permute(a, (1, 0, 2, 3), name="permuted a")
        if p.get("v"):
            a = view(a, [x // 2 for x in a.ne], a.strides[1:], "view of a")
        return node(op, t, a.ne, (a,), inplace_of=a if p.get("inplace") else None, eps=p["eps"])

    return build


def _mul_mat(p: dict[str, Any]) -> OpInfo:
    ta, tb, m, n, k, bs, nr, per = (p[x] for x in ("type_a", "type_b", "m", "n", "k", "bs", "nr", "per"))
    k_v = p.get("k_v", 0)
    if list(per) != [0, 1, 2, 3]:
        ne_a = (k, m, bs[0], bs[1])
        ne_b = (k, n, bs[0] * nr[0], bs[1] * nr[1])
        a = permute(leaf(ta, [ne_a[per[i]] for i in range(4)], "a"), per, name="a_permuted")
        b = permute(leaf(tb, [ne_b[per[i]] for i in range(4)], "b"), per, name="b_permuted")
    else:
        kp = k if k_v == 0 else k_v
        a = leaf(ta, (kp, m, bs[0], bs[1]), "a")
        b = leaf(tb, (kp, n, bs[0] * nr[0], bs[1] * nr[1]), "b")
        if k_v:
            a = view(a, (k, m, bs[0], bs[1]), a.strides[1:], "a")
            b = view(b, (k, n, bs[0] * nr[0], bs[1] * nr[1]), b.strides[1:], "b")
    out_ne = (a.ne[1], b.ne[1], b.ne[2], b.ne[3])
    out = node(Op.MUL_MAT, "f32", out_ne, (a, b))
    if p.get("o", 1) > 1:  # o outputs summed: the output node is an ADD of two MUL_MATs
        out2 = node(Op.MUL_MAT, "f32", out_ne, (a, b), name="out2")
        out = node(Op.ADD, "f32", out_ne, (node(Op.MUL_MAT, "f32", out_ne, (a, b)), out2))
    return out


def _mul_mat_id(p: dict[str, Any]) -> OpInfo:
    n_mats, n_used, m, n, k = (p[x] for x in ("n_mats", "n_used", "m", "n", "k"))
    as_ = leaf(p["type_a"], (k, m, n_mats), "as")
    ids = leaf("i32", (n_mats, n), "ids")
    if n_used != n_mats:
        ids = view(ids, (n_used, n), ids.strides[1:], "view_of_ids")
    b = leaf(p["type_b"], (k, 1 if p["b"] else n_used, n), "b")
    return node(Op.MUL_MAT_ID, "f32", (m, n_used, n, 1), (as_, b, ids))


def _pad(p: dict[str, Any]) -> OpInfo:
    t, ne = p["type"], p["ne_a"]
    a = leaf(t, ne, "a")
    if "lp0" in p:
        if p["tfrm"] == 1:
            a = view(a, [(x + 1) // 2 for x in ne], a.strides[1:], "view of a")
        elif p["tfrm"] == 2:
            a = permute(a, (2, 1, 0, 3), name="permuted a")
        pads = [(p[f"lp{i}"], p[f"rp{i}"]) for i in range(4)]
    else:
        pads = [(0, p["pad_0"]), (0, p["pad_1"]), (0, 0), (0, 0)]
    out = [a.ne[i] + pads[i][0] + pads[i][1] for i in range(4)]
    return node(Op.PAD, t, out, (a,), circular=bool(p.get("circular", 0)))


def _repeat(p: dict[str, Any]) -> OpInfo:
    t, ne, nr = p["type"], p["ne"], p["nr"]
    src = leaf(t, ne, "src")
    return node(Op.REPEAT, t, [ne[i] * nr[i] for i in range(4)], (src,))


def _rope(op: str) -> Builder:
    def build(p: dict[str, Any]) -> OpInfo:
        t, ne, n_dims, mode, v = p["type"], p["ne_a"], p["n_dims"], p["mode"], p["v"]
        a = leaf(t, ne, "a")
        if v & 1:
            big = leaf(t, (ne[0] * 2, ne[1] * 4, ne[2] * 3, ne[3]), "a")
            a = view(big, ne, big.strides[1:], "view_of_a")
        elif v == 2:
            big = leaf(t, (ne[0] * 2, ne[1], ne[2], ne[3]), "a")
            a = view(big, ne, big.strides[1:], "view_of_a", ne[0] * big.strides[0])
        is_mrope, is_vision = bool(mode & RopeType.MROPE), mode == RopeType.VISION
        pos = leaf("i32", (ne[2] * 4 if (is_mrope or is_vision) else ne[2],), "pos")
        freq = leaf("f32", (n_dims // 2,), "freq") if p["ff"] else None
        nd = n_dims // 2 if (is_mrope and is_vision) else n_dims
        return node(op, t, ne, (a, pos, freq), inplace_of=a if p.get("inplace") else None,
                    n_dims=nd, mode=mode, freq_scale=p["fs"], ext_factor=p["ef"], attn_factor=p["af"])  # fmt: skip

    return build


def _set(p: dict[str, Any]) -> OpInfo:
    src = leaf(p["type_src"], p["ne"], "src")
    ne_dst = [x * 2 if i < p["dim"] else x for i, x in enumerate(p["ne"])]
    dst = leaf(p["type_dst"], ne_dst, "dst")
    offset = sum(((ne_dst[i] - p["ne"][i]) // 2) * dst.strides[i] for i in range(p["dim"]))
    nb = src.strides
    return node(Op.SET, p["type_dst"], dst.ne, (dst, src), inplace_of=dst if p["inplace"] else None,
                nb1=nb[1], nb2=nb[2], nb3=nb[3], offset=offset)  # fmt: skip


def _set_rows(p: dict[str, Any]) -> OpInfo:
    ne, (n2, n3), r = p["ne"], p["nr23"], p["r"]
    t_src = p.get("type_src", "f32")
    t_dst = str(p["type_dst"] if "type_dst" in p else p["type"])
    dst = leaf(t_dst, (ne[0], ne[1], ne[2] * n2, ne[3] * n3), "dst")
    src = leaf(t_src, (ne[0], r, ne[2] * n2, ne[3] * n3), "src")
    idx = leaf(p["type_idx"], (r, ne[2], ne[3]), "row_idxs")
    if p["v"]:
        src = view(src, (ne[0], r // 2, ne[2] * n2, ne[3] * n3), src.strides[1:])
        idx = view(idx, (r // 2, ne[2], ne[3]), idx.strides[1:], "view_of_rows")
    return node(Op.SET_ROWS, t_dst, dst.ne, (src, idx), inplace_of=dst)


def _soft_max(p: dict[str, Any]) -> OpInfo:
    t, ne, (n2, n3) = p["type"], p["ne"], p["nr23"]
    a = leaf(t, (ne[0], ne[1], ne[2] * n2, ne[3] * n3), "a")
    mask = leaf(p["m_prec"], ne, "mask") if p["mask"] else None
    sinks = leaf("f32", (ne[2] * n2,), "sinks") if p["sinks"] else None
    srcs = (a, mask, sinks) if sinks is not None else (a, mask)
    return node(Op.SOFT_MAX, t, a.ne, srcs, inplace_of=a if p["inplace"] else None,
                scale=p["scale"], max_bias=p["max_bias"])  # fmt: skip


def _ssm_conv(p: dict[str, Any]) -> OpInfo:
    sx, c = leaf(p["type"], p["ne_a"], "a"), leaf(p["type"], p["ne_b"], "b")
    return node(Op.SSM_CONV, "f32", (c.ne[1], sx.ne[0] - c.ne[0] + 1, sx.ne[2], 1), (sx, c))


def _sum_rows(p: dict[str, Any]) -> OpInfo:
    t, ne = p["type"], p["ne"]
    a = leaf(t, ne, "a")
    if p["slice"]:
        nb = a.strides
        a = view(a, (ne[0], ne[1], ne[2] // 2, ne[3] - 1), (nb[1], nb[2] * 2, nb[3]), offset=nb[3])
    if p["permute"]:
        a = permute(a, (0, 2, 3, 1))
    return node(Op.SUM_ROWS, t, (1, a.ne[1], a.ne[2], a.ne[3]), (a,))


def _mul_mat_hadamard(p: dict[str, Any]) -> OpInfo:
    return _mul_mat(p)


BUILDERS: dict[str, Builder] = {
    **{u: _unary(u) for u in UNARY_OPS},
    **{g: _glu(g) for g in GLU_OPS},
    Op.ADD: _bin(Op.ADD),
    Op.SUB: _bin(Op.SUB),
    Op.MUL: _bin(Op.MUL),
    Op.DIV: _bin(Op.DIV),
    Op.ADD_ID: _add_id,
    Op.ARGSORT: _argsort,
    Op.CLAMP: _same(Op.CLAMP, min=0, max=0),
    Op.CONCAT: _concat,
    Op.CONT: _cont,
    Op.CPY: _cpy,
    Op.CUMSUM: _same(Op.CUMSUM),
    Op.DIAG: _diag,
    Op.FILL: _same(Op.FILL, c=0),
    Op.FLASH_ATTN_EXT: _flash_attn,
    Op.GATED_DELTA_NET: _gdn,
    Op.GET_ROWS: _get_rows,
    Op.IM2COL: _im2col,
    Op.L2_NORM: _norm_like(Op.L2_NORM),
    Op.NORM: _norm_like(Op.NORM),
    Op.RMS_NORM: _norm_like(Op.RMS_NORM),
    Op.MUL_MAT: _mul_mat,
    "MUL_MAT_HADAMARD": _mul_mat_hadamard,
    Op.MUL_MAT_ID: _mul_mat_id,
    Op.PAD: _pad,
    Op.REPEAT: _repeat,
    Op.ROPE: _rope(Op.ROPE),
    Op.ROPE_BACK: _rope(Op.ROPE_BACK),
    Op.SCALE: _same(Op.SCALE, scale=0, bias=0),
    Op.SET: _set,
    Op.SET_ROWS: _set_rows,
    Op.SOFT_MAX: _soft_max,
    Op.SQR: _same(Op.SQR),
    Op.SQRT: _same(Op.SQRT),
    Op.SSM_CONV: _ssm_conv,
    Op.SUM_ROWS: _sum_rows,
    Op.TRI: _same(Op.TRI, tri_type=0),
}


def build_case(op_name: str, params: dict[str, Any]) -> OpInfo:
    """The output node test-backend-ops builds for ``op_name(params)``; raises Unexpressible.

    A case without a builder whose name is a ggml op (DSV4_HC_PRE, DSV4_HC_POST and
    LIGHTNING_INDEXER are newer than the reference test-backend-ops source) is decided by op
    membership: test-backend-ops names a case after its output node's op."""
    builder = BUILDERS.get(op_name)
    if builder is not None:
        try:
            return builder(params)
        except KeyError as e:
            raise Unexpressible(f"parameter {e.args[0]!r} missing for {op_name}") from e
    if op_name in GGML_OPS:
        # An op the backend does not register: membership decides, whatever the graph.
        t = str(params.get("type", params.get("type_input", params.get("type_a", "f32"))))
        return OpInfo(op_name, t, (1, 1, 1, 1), name="out")
    raise Unexpressible(f"unknown test case {op_name}")


# ----------------------------------------------------------------------------------------------
# Agreement


@dataclass(frozen=True, slots=True)
class CaseResult:
    verdict: Verdict
    decision: SupportDecision | None  #: None when unexpressible
    unexpressible: str = ""

    @property
    def agrees(self) -> bool:
        return self.decision is not None and self.decision.supported == self.verdict.supported


@dataclass(slots=True)
class Agreement:
    """Outcome of replaying every verdict."""

    results: list[CaseResult] = field(default_factory=list)

    @property
    def total(self) -> int:
        return len(self.results)

    @property
    def expressible(self) -> int:
        return sum(r.decision is not None for r in self.results)

    @property
    def agreeing(self) -> int:
        return sum(r.agrees for r in self.results)

    @property
    def disagreements(self) -> list[CaseResult]:
        return [r for r in self.results if r.decision is not None and not r.agrees]

    def unexpressible_by_reason(self) -> Counter[str]:
        return Counter(r.unexpressible for r in self.results if r.decision is None)

    def summary(self) -> str:
        lines = [
            f"agreement: {self.agreeing}/{self.expressible} expressible rows agree ({self.total} rows in total)"
        ]
        for reason, n in self.unexpressible_by_reason().most_common():
            lines.append(f"  unexpressible ({n}): {reason}")
        return "\n".join(lines)

    def to_frame(self) -> Any:
        """One row per case: op, params, upstream verdict, ovkit decision, reason."""
        import pandas as pd

        return pd.DataFrame(
            [
                {
                    "op_name": r.verdict.op_name,
                    "op_params": r.verdict.op_params,
                    "upstream": r.verdict.supported,
                    "ovkit": None if r.decision is None else r.decision.supported,
                    "gate": "" if r.decision is None else r.decision.gate,
                    "reason": r.unexpressible if r.decision is None else r.decision.reason,
                    "agrees": r.agrees,
                }
                for r in self.results
            ]
        )


def by_op(agreement: Agreement) -> Any:
    """Per test-case op: rows, rows upstream supports, rows ovkit supports, rows agreeing, and the
    gate that rejects most often (a DataFrame sorted by row count)."""
    df = agreement.to_frame()
    rejected = df[(df["gate"] != "") & df["ovkit"].notna()]
    top_gate = rejected.groupby("op_name")["gate"].agg(lambda g: g.value_counts().index[0])
    out = df.groupby("op_name").agg(
        rows=("agrees", "size"),
        upstream_supported=("upstream", "sum"),
        ovkit_supported=("ovkit", lambda x: int(sum(bool(v) for v in x if v is not None))),
        agreeing=("agrees", "sum"),
    )
    out["main_rejecting_gate"] = top_gate.reindex(out.index).fillna("")
    return out.sort_values("rows", ascending=False)


def replay(
    verdicts: Iterable[Verdict],
    device_class: str = "CPU",
    *,
    upstream_exact: bool = True,
    revision: Revision | str = CSV_REVISION,
) -> Agreement:
    """Ask the policy about every verdict's case and compare."""
    out = Agreement()
    for v in verdicts:
        try:
            info = build_case(v.op_name, v.params)
        except Unexpressible as e:
            out.results.append(CaseResult(v, None, str(e)))
            continue
        d = check_op(info, device_class, upstream_exact=upstream_exact, revision=revision)
        out.results.append(CaseResult(v, d))
    return out


__all__ = [
    "Agreement",
    "BUILDERS",
    "CSV_REVISION",
    "CaseResult",
    "Unexpressible",
    "Verdict",
    "build_case",
    "by_op",
    "contiguous_nb",
    "parse_params",
    "read_verdicts",
    "replay",
]
