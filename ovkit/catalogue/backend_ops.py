"""test-backend-ops' own cases, executable: ``(op_name, op_params)`` -> :class:`~ovkit.catalogue.case.Case`,
each builder mirroring the ``test_*`` struct of llama.cpp's ``tests/test-backend-ops.cpp`` (graph,
value ranges, error bound; missing parameters take its defaults), runnable on ovkit and ggml alike."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from functools import partial
from typing import Any

from ovkit.catalogue.case import UNIFORM, Case, Init, Leaf, Program
from ovkit.dtypes import layout
from ovkit.errors import OvkitError
from ovkit.ir import pad_ne
from ovkit.ops.table import LISTS, max_nmse
from ovkit.ops.verdict_csv import parse_params

CaseBuilder = Callable[[str, str, dict[str, Any]], Case]

U150 = Init("uniform", -150.0, 150.0)
AB = ("a", "b")  # the two leaves of the backward ops
IN_KER, KER_IN = ("input", "kernel"), ("kernel", "input")  # a convolution's leaves, its builders' order
POS_09 = Init("uniform", 0.9, 1.1)


class NoCase(OvkitError, LookupError):
    """No builder for this test case (the message names it)."""


class NoBuilder(NoCase):
    """No case builder knows this test case's name."""


def _named(t: Any, name: str) -> Any:
    t.set_name(name)
    return t


def _case(op: str, params: str, leaves: Sequence[Leaf], program: Program, **kw: Any) -> Case:
    """The case of ``program`` with its output named ``out``, as test-backend-ops names it."""
    return Case(op, params, tuple(leaves), partial(_named_out, program), **kw)


def _named_out(program: Program, b: Any, x: Mapping[str, Any]) -> Any:
    return _named(program(b, x), "out")


def _view_like(b: Any, t: Any, ne: Any, offset: int = 0) -> Any:
    """ggml_view_4d(t, ne, t->nb[1], t->nb[2], t->nb[3], offset)."""
    nb = t.nb
    return b.view_4d(t, ne[0], ne[1], ne[2], ne[3], nb[1], nb[2], nb[3], offset)


def _view(b: Any, t: Any, ne: Any, on: int, name: str = "") -> Any:
    """``t`` viewed as ``ne`` with its own strides (:func:`_view_like`, named ``name``) when ``on``."""
    if not on:
        return t
    return _named(_view_like(b, t, ne), name) if name else _view_like(b, t, ne)


def _widened_b(ta: str, tb: str) -> tuple[str, ...]:
    """The installed ggml's CPU matmul converts src1 to src0's vec_dot type only from f32 (f16 /
    bf16 a: also its own type); other b types reach its ggml as f32 of the same values."""
    return () if tb == "f32" or (tb == ta and tb in ("f16", "bf16")) else ("b",)


def _ne_of(p: dict[str, Any], *keys: str) -> tuple[int, int, int, int]:
    for k in keys:
        if k in p:
            return pad_ne(p[k])
    raise KeyError(keys[0])


# -- elementwise -----------------------------------------------------------------------------------


#: ggml unary ops built by test_unary (ne_a, v) and test_floor & co (ne), by ggml enum name: the
#: sub-ops ``Graph.unary`` builds (derived from the op table).
UNARY: tuple[str, ...] = LISTS.unary_cases


def _unary(op: str, params: str, p: dict[str, Any]) -> Case:
    t = p["type"]
    if "ne_a" not in p:  # test_floor & co: ggml_floor(a) on a plain tensor
        ne = _ne_of(p, "ne")
        init = Init("uniform", -10.0, 10.0)
        return _case(op, params, (Leaf("a", ne, t, init),), lambda b, x: b.unary(x["a"], op))
    ne, v = _ne_of(p, "ne_a"), int(p.get("v", 0))
    lo = -10.0 if t == "f16" and op in ("EXP", "EXPM1") else -150.0
    init = Init("uniform", lo, -lo)
    big = (ne[0] * 3, ne[1] * 2, ne[2] * 5, ne[3] * 4) if v & 1 else ne

    return _case(op, params, (Leaf("a", big, t, init),),
                 lambda b, x: b.unary(_view(b, x["a"], ne, v & 1, "view_of_a"), op))  # fmt: skip


#: GLU ops built by test_glu / test_glu_split: the GLU sub-ops whose catalogue entry lists ``glu``
#: (derived from the op table); SWIGLU_OAI (test_swiglu_oai) is built by the same builder.
GLU: tuple[str, ...] = LISTS.glu_cases


def _glu(op: str, params: str, p: dict[str, Any]) -> Case:
    t, ne, v = p["type"], _ne_of(p, "ne_a"), int(p.get("v", 0))
    big = (ne[0] * 3, ne[1], ne[2], ne[3]) if v & 1 else ne
    two = op == "SWIGLU_OAI" or bool(p.get("split"))

    def program(b: Any, x: Mapping[str, Any]) -> Any:
        a = _named(_view_like(b, x["a"], ne), "view_of_a") if v & 1 else x["a"]
        if not two:
            return b.glu(a, op, bool(p.get("swapped", 0)))
        bb = _view_like(b, x["b"], ne) if v & 1 else x["b"]
        if op == "SWIGLU_OAI":
            return b.swiglu_oai(a, bb, float(p["alpha"]), float(p["limit"]))
        return b.glu_split(a, bb, op)

    return _case(op, params, (Leaf("a", big, t, U150), Leaf("b", big, t, U150))[: 1 + two], program)


def _bin(op: str, params: str, p: dict[str, Any]) -> Case:
    t, ne, nr, nf = p["type"], pad_ne(p["ne"]), pad_ne(p["nr"]), int(p["nf"])
    perm1, overlap = int(p.get("perm1", 0)), int(p.get("src_overlap", 0))
    init = POS_09 if op in ("MUL", "DIV") else Init()
    leaves = [Leaf("a", tuple(ne[i] * nr[i] for i in range(4)), t, init)]  # type: ignore[arg-type]
    perm = (1, 2, 0, 3)
    if not overlap:
        b_ne = (ne[1], ne[2], ne[0], ne[3]) if perm1 else ne
        leaves += [Leaf(f"b{i}", b_ne, t, init) for i in range(nf)]
    fn = op.lower()

    def program(b: Any, x: Mapping[str, Any]) -> Any:
        a = x["a"]
        half = (ne[0], ne[1], ne[2], 2 * (ne[3] // 3))
        out = _view_like(b, a, half) if overlap else a
        for i in range(nf):
            if overlap:
                src = _view_like(b, a, half, (ne[3] // 3) * a.nb[3])
            elif perm1:
                src = b.permute(x[f"b{i}"], *perm)
            else:
                src = x[f"b{i}"]
            out = getattr(b, fn)(out, src)
        return out

    err = {"f16": 1e-6, "bf16": 1e-4}.get(t, 1e-7) if op == "ADD" and nf > 1 else 1e-7
    return _case(op, params, tuple(leaves), program, max_err=err)


def _add_id(op: str, params: str, p: dict[str, Any]) -> Case:
    ne_e, n_exp, n_used, n_tok = (int(p[k]) for k in ("n_embd", "n_experts", "n_experts_used", "n_token"))
    leaves = (
        Leaf("a", pad_ne((ne_e, n_used, n_tok)), p["type_a"]),
        Leaf("b", pad_ne((ne_e, n_exp)), p["type_b"]),
        Leaf("ids", pad_ne((n_exp, n_tok)), "i32", Init("experts", n=n_exp)),
    )

    def program(b: Any, x: Mapping[str, Any]) -> Any:
        ids = x["ids"]
        if n_used != n_exp:
            ids = _named(b.view_2d(ids, n_used, n_tok, ids.nb[1], 0), "view_of_ids")
        return b.add_id(x["a"], x["b"], ids)

    return _case(op, params, leaves, program)


def _call(
    fn: str,
    *args: Any,
    init: Init = UNIFORM,
    leaves: tuple[str, ...] = ("a",),
    order: Sequence[str] = (),
    **case: Any,
) -> CaseBuilder:
    """``out = ggml_<fn>(*leaves in order, *args)`` (``ggml_<fn>_inplace`` when ``inplace=1``),
    leaf ``n`` of ``type_n``/``ne_n`` (else ``type``/``ne``/``ne_a``) drawn as ``init``; a callable
    argument (:func:`_i`, :func:`_f`) reads the row's parameters."""

    def build(op: str, params: str, p: dict[str, Any]) -> Case:
        vals = [a(p) if callable(a) else a for a in args]
        name = fn + ("_inplace" if int(p.get("inplace", 0)) else "")

        def program(b: Any, x: Mapping[str, Any]) -> Any:
            return getattr(b, name)(*(x[n] for n in order or leaves), *vals)

        t = p.get("type", "f32")
        made = tuple(Leaf(n, _ne_of(p, f"ne_{n}", "ne", "ne_a"), p.get(f"type_{n}", t), init) for n in leaves)
        return _case(op, params, made, program, **case)

    return build


def _i(key: str) -> Callable[[dict[str, Any]], int]:
    return lambda p: int(p[key])


def _f(key: str, default: float | None = None) -> Callable[[dict[str, Any]], float]:
    return lambda p: float(p[key] if default is None else p.get(key, default))


# -- data movement ---------------------------------------------------------------------------------


def _get_rows(op: str, params: str, p: dict[str, Any]) -> Case:
    t, n, m, r, be1, be2, v = (p[k] for k in ("type", "n", "m", "r", "be1", "be2", "v"))
    leaves = (
        Leaf("in", pad_ne((n, m, be1, be2)), t),
        Leaf("rows", pad_ne((r + 1 if v else r, be1, be2)), "i32", Init("rows", n=m)),
    )

    def program(b: Any, x: Mapping[str, Any]) -> Any:
        rows = x["rows"]
        if v:
            rows = _named(
                b.view_3d(rows, r // 2, be1, be2, rows.nb[1], rows.nb[2], rows.nb[0]), "view_of_rows"
            )
        return b.get_rows(x["in"], rows)

    return _case(op, params, leaves, program)


def _set_rows(op: str, params: str, p: dict[str, Any]) -> Case:
    ne, (n2, n3), r, v = pad_ne(p["ne"]), p["nr23"], int(p["r"]), int(p["v"])
    t_src, t_dst, t_idx = p.get("type_src", "f32"), str(p.get("type_dst", p.get("type"))), p["type_idx"]
    leaves = (
        Leaf("dst", (ne[0], ne[1], ne[2] * n2, ne[3] * n3), t_dst),
        Leaf("src", (ne[0], r, ne[2] * n2, ne[3] * n3), t_src),
        Leaf("row_idxs", pad_ne((r, ne[2], ne[3])), t_idx, Init("set_rows", n=ne[1])),
    )

    def program(b: Any, x: Mapping[str, Any]) -> Any:
        src, idx = x["src"], x["row_idxs"]
        if v:
            src = _view_like(b, src, (ne[0], r // 2, ne[2] * n2, ne[3] * n3))
            idx = _named(b.view_3d(idx, r // 2, ne[2], ne[3], idx.nb[1], idx.nb[2], 0), "view_of_rows")
        return b.set_rows(x["dst"], src, idx)

    err = 1e-7
    if t_dst in ("q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "iq4_nl"):
        bits = {"q8_0": 8, "q5_0": 5, "q5_1": 5}.get(t_dst, 4)
        err = (2.0 / 2**bits) ** 2 / (0.25 * math.prod(ne))  # one quantum off, as the source estimates
    # the installed ggml asserts an f32 src (GGML_ASSERT(b->type == GGML_TYPE_F32))
    return _case(op, params, leaves, program, max_err=err, ggml_f32=("src",) if t_src != "f32" else ())


def _cpy(op: str, params: str, p: dict[str, Any]) -> Case:
    ts, td, ne = p["type_src"], p["type_dst"], pad_ne(p["ne_src"])
    ps, pd = pad_ne(p.get("permute_src", [0] * 4)), pad_ne(p.get("permute_dst", [0] * 4))
    tr, alloc = int(p.get("_src_transpose", 0)), p.get("dst_alloc")
    src_ne = [ne[0], ne[1], ne[2], ne[3]]
    if sum(ps):
        src_ne = [0] * 4
        for i, ax in enumerate(ps):
            src_ne[ax] = ne[i]
    if tr:
        src_ne[0], src_ne[1] = src_ne[1], src_ne[0]
    dst_ne = pad_ne(p["ne_dst"]) if "ne_dst" in p else pad_ne(src_ne)
    leaves = [Leaf("src", ne, ts, U150)]
    leaves.append(Leaf("dst_buf", pad_ne(alloc), td) if alloc else Leaf("dst", dst_ne, td))

    def program(b: Any, x: Mapping[str, Any]) -> Any:
        src = x["src"]
        if sum(ps):
            src = _named(b.permute(src, *ps), "src_permuted")
        if tr:
            src = _named(b.transpose(src), "src_transposed")
        if alloc:
            dst = _named(_view_like(b, x["dst_buf"], dst_ne), "dst_view")
        else:
            dst = x["dst"]
            if sum(pd):
                dst = _named(b.permute(dst, *pd), "dst_permuted")
        return b.cpy(src, dst)

    err = 0.0 if ts == td else 1e-6
    if td in ("q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1", "q8_0"):
        bits = {"q8_0": 8, "q5_0": 5, "q5_1": 5}.get(td, 4)
        err = (1.0 / 8.0 * 150.0 * 2.0**-bits * 16) ** 2 / (150.0 * 150.0 * 0.25 * math.prod(ne))
    return _case(op, params, tuple(leaves), program, max_err=err)


def _dup(op: str, params: str, p: dict[str, Any]) -> Case:
    perm = pad_ne(p.get("permute", [0] * 4))

    def program(b: Any, x: Mapping[str, Any]) -> Any:
        src = _named(b.permute(x["src"], *perm), "src_permuted") if any(perm) else x["src"]  # zeros: none
        return b.dup(src)

    return _case(op, params, (Leaf("src", pad_ne(p["ne"]), p["type"]),), program)


def _set(op: str, params: str, p: dict[str, Any]) -> Case:
    ne, dim = pad_ne(p["ne"]), int(p["dim"])
    ne_dst = tuple(n * 2 if i < dim else n for i, n in enumerate(ne))
    leaves = (Leaf("src", ne, p["type_src"]), Leaf("dst", pad_ne(ne_dst), p["type_dst"]))

    def program(b: Any, x: Mapping[str, Any]) -> Any:
        src, dst = x["src"], x["dst"]
        offset = sum((ne_dst[i] - ne[i]) // 2 * dst.nb[i] for i in range(dim))
        fn = b.set_inplace if int(p.get("inplace", 0)) else b.set
        return fn(dst, src, src.nb[1], src.nb[2], src.nb[3], offset)

    return _case(op, params, leaves, program)


def _acc(op: str, params: str, p: dict[str, Any]) -> Case:
    t, ne_a, ne_b, sd = p["type"], pad_ne(p["ne_a"]), pad_ne(p["ne_b"]), int(p.get("stride_dim", -1))
    padded = sd in (1, 2, 3)  # b a view at a non-zero offset of a one-larger tensor
    ne_b_pad = tuple(n + 1 if i == sd else n for i, n in enumerate(ne_b))
    leaves = (Leaf("a", ne_a, t), Leaf("b_pad", pad_ne(ne_b_pad), t) if padded else Leaf("b", ne_b, t))

    def program(b: Any, x: Mapping[str, Any]) -> Any:
        a = x["a"]
        bb = _named(_view_like(b, x["b_pad"], ne_b, x["b_pad"].nb[1]), "b") if padded else x["b"]
        return b.acc(a, bb, a.nb[1], a.nb[2], a.nb[3], 0)

    return _case(op, params, leaves, program)


def _repeat_back(op: str, params: str, p: dict[str, Any]) -> Case:
    t, ne, nr, v = p["type"], pad_ne(p["ne"]), pad_ne(p["nr"]), int(p.get("v", 0))
    big = tuple(ne[i] * nr[i] for i in range(4))
    half = [big[i] if nr[i] == 1 else big[i] // 2 for i in range(4)]  # v: every repeated dim halved
    return _case(op, params, (Leaf("src", pad_ne(big), t), Leaf("target", ne, t)),
                 lambda b, x: b.repeat_back(_view(b, x["src"], half, v), x["target"]))  # fmt: skip


def _roll(op: str, params: str, p: dict[str, Any]) -> Case:
    shifts = [int(p[k]) for k in ("shift0", "shift1", "shift3", "shift4")]  # test_roll's names
    return _case(op, params, (Leaf("a", (10, 5, 4, 3), "f32"),),
                lambda b, x: b.roll(x["a"], *shifts))  # fmt: skip


def _cont(op: str, params: str, p: dict[str, Any]) -> Case:
    ne, slice_, perm = pad_ne(p["ne"]), int(p.get("use_view_slice", 0)), pad_ne(p.get("permute", [0] * 4))

    def program(b: Any, x: Mapping[str, Any]) -> Any:
        s = x["src"]
        if sum(perm):
            d = _named(b.permute(s, *perm), "src_permuted")
        elif slice_:
            d = _named(_view_like(b, s, (ne[0], 1, ne[2], ne[3]), s.nb[0] * (ne[1] - 1)), "src_view_slice")
        else:
            d = _named(b.transpose(s), "src_transposed")
        return b.cont(d)

    return _case(op, params, (Leaf("src", ne, p["type"]),), program)


def _repeat(op: str, params: str, p: dict[str, Any]) -> Case:
    t, ne, nr = p["type"], pad_ne(p["ne"]), pad_ne(p["nr"])
    target = tuple(ne[i] * nr[i] for i in range(4))
    leaves = (Leaf("dst", target, t), Leaf("src", ne, t))  # type: ignore[arg-type]
    return _case(op, params, leaves, lambda b, x: b.repeat(x["src"], x["dst"]))


def _concat(op: str, params: str, p: dict[str, Any]) -> Case:
    t, ne_a, dim, v = p["type"], pad_ne(p["ne_a"]), int(p["dim"]), int(p.get("v", 0))
    ne_b = list(ne_a)
    ne_b[dim] = int(p["ne_b_d"])
    big_a = (ne_a[0] * 2, ne_a[1] * 4, ne_a[2] * 3, ne_a[3]) if v & 1 else ne_a
    big_b = (ne_b[0] * 3, ne_b[1] * 2, ne_b[2] * 4, ne_b[3]) if v & 2 else pad_ne(ne_b)

    return _case(op, params, (Leaf("a", big_a, t), Leaf("b", big_b, t)), lambda b, x: b.concat(
        _view(b, x["a"], ne_a, v & 1, "view_of_a"), _view(b, x["b"], ne_b, v & 2, "view_of_b"), dim))  # fmt: skip


def _pad(op: str, params: str, p: dict[str, Any]) -> Case:
    t, ne = p["type"], pad_ne(p["ne_a"])
    circ = int(p.get("circular", 0))

    def program(b: Any, x: Mapping[str, Any]) -> Any:
        a = x["a"]
        if "lp0" not in p:
            fn = b.pad_circular if circ else b.pad
            return fn(a, p["pad_0"], p["pad_1"], 0, 0)
        if p.get("tfrm") == 1:
            a = _named(_view_like(b, a, [(n + 1) // 2 for n in ne]), "view of a")
        elif p.get("tfrm") == 2:
            a = _named(b.permute(a, 2, 1, 0, 3), "permuted a")
        pads = [p[f"{s}{i}"] for i in range(4) for s in ("lp", "rp")]
        fn = b.pad_ext_circular if circ else b.pad_ext
        return fn(a, *pads)

    return _case(op, params, (Leaf("a", ne, t),), program)


# -- reductions, norms -----------------------------------------------------------------------------


def _norm(fn: str, init: Init = UNIFORM) -> CaseBuilder:
    def build(op: str, params: str, p: dict[str, Any]) -> Case:
        t, ne, eps = p["type"], pad_ne(p["ne"]), float(p["eps"])
        nc, v, inplace = int(p.get("noncontig_rows", 0)), int(p.get("v", 0)), int(p.get("inplace", 0))
        leaf_ne = (ne[1], ne[0], ne[2], ne[3]) if nc else ne

        def program(b: Any, x: Mapping[str, Any]) -> Any:
            a = x["a"]
            if nc:
                a = _named(b.permute(a, 1, 0, 2, 3), "permuted a")
            if v:
                a = _named(_view_like(b, a, [n // 2 for n in a.ne]), "view of a")
            f = getattr(b, fn + ("_inplace" if inplace else ""))
            return f(a, eps)

        return _case(op, params, (Leaf("a", leaf_ne, t, init),), program)

    return build


def _pad_reflect_1d(op: str, params: str, p: dict[str, Any]) -> Case:
    p0, p1 = int(p["pad_0"]), int(p["pad_1"])
    leaf = Leaf("a", pad_ne(p["ne_a"][:2]), p["type"])  # test_pad_reflect_1d: a 2-D tensor of ne_a[0:2]
    return _case(op, params, (leaf,), lambda b, x: b.pad_reflect_1d(x["a"], p0, p1))


def _opt_step_sgd(op: str, params: str, p: dict[str, Any]) -> Case:
    t, ne, pos = p["type"], pad_ne(p["ne"]), Init("uniform", 0.0, 1.0)  # non-negative sgd_params
    leaves = (Leaf("a", ne, t, pos), Leaf("grad", ne, t, pos), Leaf("sgd_params", (2, 1, 1, 1), "f32", pos))

    def program(b: Any, x: Mapping[str, Any]) -> Any:
        b.set_param(x["a"])  # ggml_opt_step_sgd asserts a trained tensor
        return b.opt_step_sgd(x["a"], x["grad"], x["sgd_params"])

    return _case(op, params, leaves, program)


def _count_equal(op: str, params: str, p: dict[str, Any]) -> Case:
    t, ne = p["type"], pad_ne(p["ne"])
    leaves = (Leaf("a", ne, t, Init("distinct")), Leaf("b", ne, t, Init("distinct")))
    return _case(op, params, leaves, lambda b, x: b.count_equal(
        _named(b.argmax(x["a"]), "a_argmax"), _named(b.argmax(x["b"]), "b_argmax")), max_err=0.0)  # fmt: skip


def _cross_entropy_loss_back(op: str, params: str, p: dict[str, Any]) -> Case:
    t, ne = p["type"], pad_ne(p["ne"])
    leaves = (Leaf("grad", (1, 1, 1, 1), "f32"), Leaf("logits", ne, t), Leaf("labels", ne, t))
    # labels adding up to 1
    return _case(op, params, leaves, lambda b, x: b.cross_entropy_loss_back(
        x["grad"], x["logits"], _named(b.soft_max(x["labels"]), "labels_normalized")))  # fmt: skip


def _get_rows_back(op: str, params: str, p: dict[str, Any]) -> Case:
    t, n, m, r, nb, v = p["type"], int(p["n"]), int(p["m"]), int(p["r"]), int(p["b"]), int(p.get("v", 0))
    leaves = (
        Leaf("in_forward", pad_ne((n, m, nb)), t),
        Leaf("rows", pad_ne((r, nb)), "i32", Init("rows", n=m)),
        Leaf("grad", pad_ne((n, r, nb)), t),
    )

    def program(b: Any, x: Mapping[str, Any]) -> Any:
        rows = x["rows"]
        if v:
            rows = _named(b.view_2d(rows, r // 2, nb, rows.nb[1], 0), "view_of_rows")
        return b.get_rows_back(x["grad"], rows, x["in_forward"])

    return _case(op, params, leaves, program)


def _sum_rows(op: str, params: str, p: dict[str, Any]) -> Case:
    ne, perm, sl = pad_ne(p["ne"]), int(p.get("permute", 0)), int(p.get("slice", 0))

    def program(b: Any, x: Mapping[str, Any]) -> Any:
        a = x["a"]
        if sl:
            nb = a.nb
            a = b.view_4d(a, ne[0], ne[1], ne[2] // 2, ne[3] - 1, nb[1], nb[2] * 2, nb[3], nb[3])
        if perm:
            a = b.permute(a, 0, 2, 3, 1)
        return b.sum_rows(a)

    return _case(op, params, (Leaf("a", ne, p["type"]),), program)


def _sum(op: str, params: str, p: dict[str, Any]) -> Case:
    perm = pad_ne(p.get("permute", [0, 1, 2, 3]))
    leaf = Leaf("a", pad_ne(p["ne"]), p["type"], Init("uniform", -0.9, 1.1))
    identity = list(perm) == [0, 1, 2, 3]
    return _case(op, params, (leaf,), lambda b, x: b.sum(x["a"] if identity else b.permute(x["a"], *perm)))


def _top_k(op: str, params: str, p: dict[str, Any]) -> Case:
    k = int(p["k"])
    if int(p.get("ties", 0)):
        raise NoCase("TOP_K with ties: its err() compares the source values of the picked indices")
    return _case(op, params, (Leaf("a", pad_ne(p["ne"]), p["type"], Init("distinct")),),
                lambda b, x: b.top_k(x["a"], k), max_err=0.0, err="index_set")  # fmt: skip


# -- matrices, attention, rope, softmax ------------------------------------------------------------


def _mul_mat(op: str, params: str, p: dict[str, Any]) -> Case:
    ta, tb, m, n, k = p["type_a"], p["type_b"], int(p["m"]), int(p["n"]), int(p["k"])
    bs, nr, per = pad_ne(p["bs"])[:2], pad_ne(p["nr"])[:2], pad_ne(p.get("per", [0, 1, 2, 3]))
    k_v, o = int(p.get("k_v", 0)), int(p.get("o", 1))
    ne_a = (k, m, bs[0], bs[1])
    ne_b = (k, n, bs[0] * nr[0], bs[1] * nr[1])
    permuted = list(per) != [0, 1, 2, 3]
    if permuted:
        leaves = (Leaf("a", pad_ne([ne_a[per[i]] for i in range(4)]), ta),
                  Leaf("b", pad_ne([ne_b[per[i]] for i in range(4)]), tb))  # fmt: skip
    else:
        kp = k_v or k
        leaves = (Leaf("a", (kp, m, bs[0], bs[1]), ta), Leaf("b", (kp, n, ne_b[2], ne_b[3]), tb))

    def program(b: Any, x: Mapping[str, Any]) -> Any:
        a, bb = x["a"], x["b"]
        if permuted:
            a = _named(b.permute(a, *per), "a_permuted")
            bb = _named(b.permute(bb, *per), "b_permuted")
        elif k_v:
            a, bb = _view_like(b, a, ne_a), _view_like(b, bb, ne_b)
        out = _named(b.mul_mat(a, bb), "out")
        for _ in range(1, o):
            out = b.add(out, _named(b.mul_mat(a, bb), "out2"))
        return out

    return Case(op, params, leaves, program, max_err=max_nmse("MUL_MAT"), flops=2 * m * n * k * ne_b[2] * ne_b[3],
                ggml_f32=_widened_b(ta, tb))  # fmt: skip


#: ggml.h's GGML_HINT_SRC0_IS_HADAMARD.
HINT_SRC0_IS_HADAMARD = 1


def _mul_mat_hadamard(op: str, params: str, p: dict[str, Any]) -> Case:
    """test_mul_mat_hadamard: test_mul_mat with a Hadamard a and the hint on its MUL_MAT."""
    base = _mul_mat(op, params, p)
    leaves = tuple(replace(leaf, init=Init("hadamard")) if leaf.name == "a" else leaf for leaf in base.leaves)

    def program(b: Any, x: Mapping[str, Any]) -> Any:
        out = base.program(b, x)
        b.mul_mat_set_hint(out, HINT_SRC0_IS_HADAMARD)
        return out

    return replace(base, leaves=leaves, program=program)


def _mul_mat_id(op: str, params: str, p: dict[str, Any]) -> Case:
    n_mats, n_used, m, n, k = (int(p[x]) for x in ("n_mats", "n_used", "m", "n", "k"))
    leaves = (
        Leaf("as", pad_ne((k, m, n_mats)), p["type_a"]),
        Leaf("ids", pad_ne((n_mats, n)), "i32", Init("experts", n=n_mats)),
        Leaf("b", pad_ne((k, 1 if p.get("b") else n_used, n)), p["type_b"]),
    )

    def program(b: Any, x: Mapping[str, Any]) -> Any:
        ids = x["ids"]
        if n_used != n_mats:
            ids = _named(b.view_2d(ids, n_used, n, ids.nb[1], 0), "view_of_ids")
        return b.mul_mat_id(x["as"], x["b"], ids)

    return _case(
        op, params, leaves, program, max_err=max_nmse(op), ggml_f32=_widened_b(p["type_a"], p["type_b"])
    )


def _out_prod(op: str, params: str, p: dict[str, Any]) -> Case:
    m, n, k, tr = (int(p[x]) for x in ("m", "n", "k", "trans_b"))
    bs, nr = pad_ne(p["bs"]), pad_ne(p["nr"])
    b_ne = (k, n, bs[0] * nr[0], bs[1] * nr[1]) if tr else (n, k, bs[0] * nr[0], bs[1] * nr[1])
    leaves = (Leaf("a", (m, k, bs[0], bs[1]), p["type_a"]), Leaf("b", b_ne, p["type_b"]))

    def program(b: Any, x: Mapping[str, Any]) -> Any:
        bb = b.transpose(x["b"]) if tr else x["b"]
        return b.out_prod(x["a"], bb)

    # the installed ggml's CPU out_prod asserts an f32 b, has no f16 a kernel and broadcasts only
    # an f32 a (a quantized a must match b's batch dims)
    ta = p["type_a"]
    wide_a = ta == "f16" or (ta not in ("f32", "bf16") and list(nr[:2]) != [1, 1])
    widened = (("a",) if wide_a else ()) + (("b",) if p["type_b"] != "f32" else ())
    return _case(op, params, leaves, program, max_err=max_nmse(op), ggml_f32=widened)


def _soft_max(op: str, params: str, p: dict[str, Any]) -> Case:
    t, ne, (n2, n3) = p["type"], pad_ne(p["ne"]), p["nr23"]
    mask, sinks, inplace = int(p["mask"]), int(p["sinks"]), int(p.get("inplace", 0))
    scale, max_bias = float(p["scale"]), float(p["max_bias"])
    leaves = [Leaf("a", (ne[0], ne[1], ne[2] * n2, ne[3] * n3), t)]
    if mask:
        leaves.append(Leaf("mask", ne, p["m_prec"]))
    if sinks:
        leaves.append(Leaf("sinks", pad_ne((ne[2] * n2,)), "f32"))

    def program(b: Any, x: Mapping[str, Any]) -> Any:
        fn = b.soft_max_ext_inplace if inplace else b.soft_max_ext
        out = fn(x["a"], x.get("mask"), scale, max_bias)
        b.soft_max_add_sinks(out, x.get("sinks"))
        return out

    return _case(op, params, tuple(leaves), program, max_err=max_nmse(op))


def _rope(op: str, params: str, p: dict[str, Any]) -> Case:
    t, ne, n_dims, mode = p["type"], pad_ne(p["ne_a"]), int(p["n_dims"]), int(p["mode"])
    n_ctx, fs, ef, af = int(p["n_ctx"]), float(p["fs"]), float(p["ef"]), float(p["af"])
    ff, v, inplace = int(p["ff"]), int(p["v"]), int(p.get("inplace", 0))
    is_mrope, is_vision = bool(mode & 8), mode == 24
    if v & 1:
        big = (ne[0] * 2, ne[1] * 4, ne[2] * 3, ne[3])
    elif v == 2:
        big = (ne[0] * 2, ne[1], ne[2], ne[3])
    else:
        big = ne
    leaves = [
        Leaf("a", big, t),
        Leaf("pos", pad_ne((ne[2] * 4 if is_mrope else ne[2],)), "i32", Init("rows", n=n_ctx)),
    ]
    if ff:
        leaves.append(Leaf("freq", pad_ne((n_dims // 2,)), "f32", POS_09))

    def program(b: Any, x: Mapping[str, Any]) -> Any:
        a = x["a"]
        if v & 1:
            a = _named(_view_like(b, a, ne), "view_of_a")
        elif v == 2:
            a = _named(_view_like(b, a, ne, ne[0] * a.nb[0]), "view_of_a")
        back = "_back" if op == "ROPE_BACK" else ""
        fn = f"rope_{'multi' if is_mrope else 'ext'}{back}{'_inplace' if inplace else ''}"
        sections = [n_dims // 4, n_dims // 4, 0, 0] if is_vision else [n_dims // 3] * 3 + [0]
        dims = (n_dims // 2 if is_vision else n_dims, *([sections] if is_mrope else []))
        out = getattr(b, fn)(a, x["pos"], x.get("freq"), *dims, mode, 0, 10000.0, fs, ef, af, 1.0, 1.0)
        return out

    return _case(op, params, tuple(leaves), program)


def _gated_delta_net(op: str, params: str, p: dict[str, Any]) -> Case:
    t, hc, hs = p["type"], int(p["head_count"]), int(p["head_size"])
    nt, ns, vr = int(p["n_seq_tokens"]), int(p["n_seqs"]), int(p["v_repeat"])
    perm, kda, k_snap = int(p["permuted"]), int(p["kda"]), int(p.get("K", 1))
    # permuted: made with dims 1 and 2 swapped, then permuted back (non-contiguous q, k, v)
    qk_ne = (hs, nt, hc, ns) if perm else (hs, hc, nt, ns)
    v_ne = (hs, nt, hc * vr, ns) if perm else (hs, hc * vr, nt, ns)
    leaves = (
        Leaf("q", qk_ne, t),
        Leaf("k", qk_ne, t),
        Leaf("v", v_ne, t, Init("uniform", -0.3, 5.0)),
        Leaf("g", (hs if kda else 1, hc * vr, nt, ns), t, Init("uniform", -20.0, -1e-4)),
        Leaf("beta", (1, hc * vr, nt, ns), t, Init("uniform", 0.0, 1.0)),
        Leaf("state", (hs, hs, hc * vr, ns), t),
    )

    def program(b: Any, x: Mapping[str, Any]) -> Any:
        q, k, v = (b.permute(x[n], 0, 2, 1, 3) if perm else x[n] for n in ("q", "k", "v"))
        q, k = b.l2_norm(q, 1e-6), b.l2_norm(k, 1e-6)  # as qwen35 / kimi-linear feed it
        return b.gated_delta_net(q, k, v, x["g"], x["beta"], x["state"], k_snap)

    return _case(op, params, leaves, program)


#: ggml_scale_mode names as test-backend-ops prints them.
_SCALE_MODES = {"nearest": 0, "bilinear": 1, "bicubic": 2, "align_corners": 256, "antialias": 512}


def _upscale(op: str, params: str, p: dict[str, Any]) -> Case:
    t, ne = p["type"], pad_ne(p["ne"])
    mode = sum(_SCALE_MODES[m] for m in str(p["mode"]).split("|"))

    def program(b: Any, x: Mapping[str, Any]) -> Any:
        a = x["a"]
        if "ne_tgt" in p:  # test_interpolate
            return b.interpolate(a, *pad_ne(p["ne_tgt"]), mode)
        if int(p.get("transpose", 0)):
            a = _named(b.transpose(a), "a_transposed")
        return b.upscale(a, int(p["scale_factor"]), mode)

    return _case(op, params, (Leaf("a", ne, t),), program)


def _pad_blck(n: int, dtype: str) -> int:
    """GGML_PAD(n, ggml_blck_size(dtype))."""
    blck = layout(dtype)[0]
    return (n + blck - 1) // blck * blck


def _flash_attn(op: str, params: str, p: dict[str, Any]) -> Case:
    perm = pad_ne(p["permute"]) if "permute" in p else (0, 1, 2, 3)
    tk, tv = p["type_K"], p["type_V"]
    hsk, hsv = _pad_blck(int(p["hsk"]), tk), _pad_blck(int(p["hsv"]), tv)
    nh, (nr2, nr3), kv, nb = int(p["nh"]), p["nr23"], int(p["kv"]), int(p["nb"])
    kv_view = bool(p.get("kv_view", 1))
    v_of_k = bool(p.get("v_is_view_of_k", tk == tv and hsk == 576 and hsv == 512))
    identity = list(perm) == [0, 1, 2, 3]

    def perm_ne(ne: tuple[int, ...], view: bool) -> tuple[int, int, int, int]:
        q = [0] * 4
        for i in range(4):
            q[perm[i]] = ne[i]
        return (q[0], 2 * q[1] if view else q[1], q[2], q[3])

    leaves = [Leaf("q", perm_ne((hsk, nb, nh * nr2, nr3), False), "f32"),
              Leaf("k", perm_ne((hsk, kv, nh, nr3), kv_view), tk)]  # fmt: skip
    if not v_of_k:
        leaves.append(Leaf("v", perm_ne((hsv, kv, nh, nr3), kv_view), tv))
    if p.get("mask"):
        leaves.append(Leaf("m", pad_ne((kv, nb, 1, nr3)), "f16", Init("kq_mask")))
    if p.get("sinks"):
        leaves.append(Leaf("s", pad_ne((nh * nr2,)), "f32", Init("uniform", -10.0, 10.0)))

    def create(b: Any, t: Any, ne: tuple[int, ...]) -> Any:
        if kv_view:
            q = [0] * 4
            for i in range(4):
                q[perm[i]] = ne[i]
            t = _view_like(b, t, q)
        return t if identity else b.permute(t, *perm)

    def program(b: Any, x: Mapping[str, Any]) -> Any:
        q = x["q"] if identity else b.permute(x["q"], *perm)
        k = create(b, x["k"], (hsk, kv, nh, nr3))
        v = _view_like(b, k, (hsv, kv, nh, nr3)) if v_of_k else create(b, x["v"], (hsv, kv, nh, nr3))
        out = b.flash_attn_ext(_named(q, "q"), _named(k, "k"), _named(v, "v"), x.get("m"),
                               1.0 / math.sqrt(int(p["hsk"])), float(p["max_bias"]), float(p["logit_softcap"]))  # fmt: skip
        b.flash_attn_ext_add_sinks(out, x.get("s"))
        return out

    flops = 2 * nh * nr2 * nb * (hsk + hsv) * kv * nr3
    return _case(op, params, tuple(leaves), program, max_err=max_nmse(op), flops=flops)


# -- convolution family ----------------------------------------------------------------------------


def _in_ker(p: dict[str, Any], t_input: str, t_kernel: str) -> tuple[Leaf, Leaf]:
    """The ``input`` and ``kernel`` leaves of a convolution case (``ne_input``, ``ne_kernel``)."""
    return Leaf("input", pad_ne(p["ne_input"]), t_input), Leaf("kernel", pad_ne(p["ne_kernel"]), t_kernel)


def _cwhn(b: Any, x: Mapping[str, Any], cwhn: int) -> tuple[Any, Any]:
    """Kernel and input; with test_conv_2d's ``cwhn``, made channels-innermost, then permuted back."""
    if not cwhn:
        return x["kernel"], x["input"]
    inp = b.permute(b.cont(b.permute(x["input"], 1, 2, 0, 3)), 2, 0, 1, 3)  # input first, as upstream
    return b.permute(b.cont(b.permute(x["kernel"], 2, 3, 1, 0)), 3, 2, 0, 1), inp


def _im2col_3d(op: str, params: str, p: dict[str, Any]) -> Case:
    ne, v = pad_ne(p["ne_input"]), int(p.get("v", 0))
    leaves = _in_ker(p, p["type_input"], p["type_kernel"])
    args = [int(p[k]) for k in ("IC", "s0", "s1", "s2", "p0", "p1", "p2", "d0", "d1", "d2")]

    small, dst = [n - 2 for n in ne], p["dst_type"]
    return _case(op, params, leaves, lambda b, x: b.im2col_3d(
        x["kernel"], _view(b, x["input"], small, v, "view_of_input"), *args, dst))  # fmt: skip


def _conv_2d(op: str, params: str, p: dict[str, Any]) -> Case:
    args = [int(p[k]) for k in ("stride0", "stride1", "padding0", "padding1", "dilation0", "dilation1")]
    cwhn = int(p.get("cwhn", 0))
    return _case(op, params, _in_ker(p, "f32", p["type_kernel"]),
                 lambda b, x: b.conv_2d_direct(*_cwhn(b, x, cwhn), *args), max_err=max_nmse(op))  # fmt: skip


def _conv_2d_dw(op: str, params: str, p: dict[str, Any]) -> Case:
    s, pad, d, cwhn = int(p["stride"]), int(p["padding"]), int(p["dilation"]), int(p.get("cwhn", 0))
    # the installed ggml's CPU conv_2d_dw reads an f16 kernel as if it were f32 (wrong values)
    return _case(op, params, _in_ker(p, "f32", p["type_kernel"]),
                 lambda b, x: b.conv_2d_dw_direct(*_cwhn(b, x, cwhn), s, s, pad, pad, d, d),
                 ggml_f32=("kernel",) if p["type_kernel"] != "f32" else ())  # fmt: skip


def _conv_3d(op: str, params: str, p: dict[str, Any]) -> Case:
    n, ic, oc = int(p["N"]), int(p["IC"]), int(p["OC"])
    ne_in = (int(p["IW"]), int(p["IH"]), int(p["ID"]), ic * n)
    ne_k = (int(p["KW"]), int(p["KH"]), int(p["KD"]), ic * oc)
    leaves = (Leaf("input", ne_in, "f32"), Leaf("kernel", ne_k, p["type_kernel"]))
    args = [int(p[k]) for k in ("s0", "s1", "s2", "p0", "p1", "p2", "d0", "d1", "d2")]
    return _case(op, params, leaves, lambda b, x: b.conv_3d_direct(x["kernel"], x["input"], *args, ic, n, oc),
                 max_err=max_nmse(op))  # fmt: skip


def _conv_transpose_2d(op: str, params: str, p: dict[str, Any]) -> Case:
    leaves = _in_ker(p, "f32", p["kernel_type"])
    stride = int(p["stride"])
    return _case(op, params, leaves, max_err=max_nmse(op),
                program=lambda b, x: b.conv_transpose_2d_p0(x["kernel"], x["input"], stride))  # fmt: skip


def _pool_kind(p: dict[str, Any]) -> int:
    return 0 if p["pool_type"] == "max" else 1  # GGML_OP_POOL_MAX = 0, AVG = 1


def _col2im_1d(op: str, params: str, p: dict[str, Any]) -> Case:
    t, k, oc, s0, p0 = p["type"], int(p["K"]), int(p["OC"]), int(p["s0"]), int(p["p0"])
    leaves = (Leaf("cols", pad_ne((k * oc, int(p["T_in"]))), t),)
    return _case(op, params, leaves, lambda b, x: b.col2im_1d(x["cols"], s0, oc, p0),
                max_err=1e-7 if t == "f32" else 5e-4)  # fmt: skip


# -- misc ------------------------------------------------------------------------------------------


def _solve_tri(op: str, params: str, p: dict[str, Any]) -> Case:
    leaves = (
        Leaf("a", pad_ne(p["ne_lhs"]), p["type"], Init("tril")),
        Leaf("b", pad_ne(p["ne_rhs"]), p["type"]),
    )
    return _case(op, params, leaves,
                lambda b, x: b.solve_tri(x["a"], x["b"], True, True, False), max_err=max_nmse(op))  # fmt: skip


BUILDERS: dict[str, CaseBuilder] = {
    # elementwise
    **{u: _unary for u in UNARY}, **{g: _glu for g in GLU}, "SWIGLU_OAI": _glu,
    **{o: _bin for o in ("ADD", "SUB", "MUL", "DIV")}, "ADD_ID": _add_id, "SQR": _call("sqr"),
    "SQRT": _call("sqrt", init=Init("uniform", 50.0, 100.0)), "LOG": _call("log", init=POS_09),
    "SIN": _call("sin", init=Init("uniform", -6.5, 6.5)), "COS": _call("cos", init=Init("uniform", -6.5, 6.5)),
    "LEAKY_RELU": _call("leaky_relu", _f("negative_slope"), False), "FILL": _call("fill", _f("c")),
    "CLAMP": _call("clamp", _f("min"), _f("max")), "TRI": _call("tri", _i("tri_type")), "DIAG": _call("diag"),
    "DIAG_MASK_INF": _call("diag_mask_inf", _i("n_past")),
    "SCALE": _call("scale_bias", _f("scale"), _f("bias", 0.0)),
    "ARANGE": _call("arange", _f("start"), _f("stop"), _f("step"), leaves=()),
    "XIELU": _call("xielu", 4.0, 20.0, 0.5, 1e-7),  # test_xielu: alpha_n, alpha_p, beta, eps
    "TIMESTEP_EMBEDDING": _call("timestep_embedding", _i("dim"), _i("max_period")),
    # data movement
    "GET_ROWS": _get_rows, "SET_ROWS": _set_rows, "CPY": _cpy, "DUP": _dup, "SET": _set, "ACC": _acc,
    "CONT": _cont, "REPEAT": _repeat, "REPEAT_BACK": _repeat_back, "CONCAT": _concat, "PAD": _pad,
    "PAD_REFLECT_1D": _pad_reflect_1d, "ROLL": _roll, "UPSCALE": _upscale,
    # reductions, norms, backward ops
    "NORM": _norm("norm"), "L2_NORM": _norm("l2_norm"),
    "RMS_NORM": _norm("rms_norm", Init("uniform", -10.0, 10.0)), "CUMSUM": _call("cumsum"),
    "MEAN": _call("mean", init=Init("uniform", -0.9, 1.1)), "SUM_ROWS": _sum_rows,
    "SUM": _sum, "ARGSORT": _call("argsort", _i("order"), init=Init("distinct")), "TOP_K": _top_k,
    "ARGMAX": _call("argmax", init=Init("distinct"), max_err=0.0), "COUNT_EQUAL": _count_equal,
    "GET_ROWS_BACK": _get_rows_back, "SILU_BACK": _call("silu_back", leaves=AB),
    "SOFT_MAX_BACK": _call("soft_max_ext_back", _f("scale"), _f("max_bias"), leaves=AB),
    "RMS_NORM_BACK": _call("rms_norm_back", _f("eps"), init=Init("uniform", -10.0, 10.0), leaves=AB),
    "CROSS_ENTROPY_LOSS_BACK": _cross_entropy_loss_back, "OPT_STEP_SGD": _opt_step_sgd,
    # matrices, attention, rope, softmax, recurrent
    "MUL_MAT": _mul_mat, "MUL_MAT_ID": _mul_mat_id, "MUL_MAT_HADAMARD": _mul_mat_hadamard,
    "OUT_PROD": _out_prod, "SOFT_MAX": _soft_max, "ROPE": _rope, "ROPE_BACK": _rope,
    "FLASH_ATTN_EXT": _flash_attn, "GATED_DELTA_NET": _gated_delta_net, "SSM_CONV": _call("ssm_conv", leaves=AB),
    "SOLVE_TRI": _solve_tri,
    # convolution family
    "IM2COL": _call("im2col", *map(_i, ("s0", "s1", "p0", "p1", "d0", "d1")), lambda p: bool(p["is_2D"]),
                    lambda p: p["dst_type"], leaves=IN_KER, order=KER_IN),
    "IM2COL_3D": _im2col_3d, "CONV_2D": _conv_2d, "CONV_2D_DW": _conv_2d_dw, "CONV_3D": _conv_3d,
    "CONV_TRANSPOSE_1D": _call("conv_transpose_1d", *map(_i, ("s0", "p0", "d0")), leaves=IN_KER, order=KER_IN),
    "CONV_TRANSPOSE_2D": _conv_transpose_2d,
    "POOL_1D": _call("pool_1d", _pool_kind, *map(_i, ("k0", "s0", "p0")), leaves=("input",)),
    "POOL_2D": _call("pool_2d", _pool_kind, *map(_i, ("k0", "k1", "s0", "s1", "p0", "p1")), leaves=("input",)),
    "COL2IM_1D": _col2im_1d,
}  # fmt: skip


def case_of(op_name: str, op_params: str, params: dict[str, Any] | None = None) -> Case:
    """The case of one test-backend-ops row, whatever the installed ggml; :class:`NoBuilder` when no
    builder knows it, KeyError naming a parameter the row lacks."""
    builder = BUILDERS.get(op_name)
    if builder is None:
        raise NoBuilder(f"no case builder for {op_name}")
    return builder(op_name, op_params, parse_params(op_params) if params is None else params)


def build(op_name: str, op_params: str) -> Case:
    """The executable case of one test-backend-ops row; :class:`NoCase` when no builder knows it
    or the installed ggml cannot build it."""
    try:
        case = case_of(op_name, op_params)
    except NoBuilder as e:
        missing = (
            ""
            if ggml_has_builder(op_name)
            else f": the installed ggml (ggml-python) has no ggml_{op_name.lower()}"
        )
        raise NoBuilder(f"{e}{missing}") from None
    except KeyError as e:
        raise NoCase(f"{op_name}: parameter {e.args[0]!r} missing") from e
    for leaf in case.leaves:
        if not ggml_has_type(leaf.dtype):
            raise NoCase(f"the installed ggml (ggml-python) has no type {leaf.dtype}")
    return case


def ggml_has_builder(op_name: str) -> bool:
    """Whether the oracle's ggml has the op's builder function (``ggml_<op>``)."""
    from ovkit import oracle

    return oracle.ggml_available() and hasattr(oracle.ggml_module(), f"ggml_{op_name.lower()}")


def ggml_has_type(dtype: str) -> bool:
    """Whether the oracle's ggml knows ``dtype`` (the case list can be newer than ggml-python)."""
    from ovkit import oracle

    try:
        oracle.type_id(dtype)
    except ValueError:
        return False
    return True
