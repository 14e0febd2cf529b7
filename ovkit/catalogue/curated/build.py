"""What the curated case sets are built from: test-backend-ops' parameter strings, leaves by numpy
or ggml shape, and a case of the comparison set from a builder name (its op from the op table)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from ovkit.catalogue.case import POSITIVE, UNIFORM, Case, Init, Leaf, Program
from ovkit.ir import GGML_SORT_ORDER_ASC, GGML_SORT_ORDER_DESC, Op, pad_ne
from ovkit.ops import table

TEST_OPS, GGML, PERF = "test-ops", "ggml", "perf"
#: The curated sets, in the order :func:`ovkit.catalogue.curated.cases` lists them.
SETS: tuple[str, ...] = (TEST_OPS, GGML, PERF)
#: Leaf draws that are indices or positions, not data: not part of a case's ``type=``.
INDEX_KINDS = frozenset({"rows", "pos", "experts"})


def fmt(v: Any) -> str:
    if isinstance(v, tuple | list):
        return "[" + ",".join(str(x) for x in v) + "]"
    return str(v)


def label(leaves: Sequence[Leaf], **params: Any) -> str:
    """test-backend-ops' parameter string: the data types, every leaf's ``ne``, then ``params``."""
    types = sorted({lf.dtype for lf in leaves if lf.init.kind not in INDEX_KINDS})
    parts = [f"type={'/'.join(types) if types else leaves[0].dtype}"]
    parts += [f"ne_{lf.name}={fmt(lf.ne)}" for lf in leaves]
    parts += [f"{k}={fmt(v)}" for k, v in params.items()]
    return ",".join(parts)


def split_params(params: str) -> list[str]:
    """A parameter string's ``key=value`` parts (commas inside ``[...]`` kept)."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(params):
        depth += {"[": 1, "]": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            parts.append(params[start:i])
            start = i + 1
    return [*parts, params[start:]] if params else parts


def param(c: Case, key: str) -> str:
    """The value of parameter ``key`` in the case's name (``type`` -> ``f32``); KeyError if absent."""
    for part in split_params(c.params):
        k, _, v = part.partition("=")
        if k == key:
            return v
    raise KeyError(f"{c.name}: no parameter {key!r}")


def relabel(c: Case) -> Case:
    """``c`` with its ``type`` and ``ne_*`` parameters recomputed from its leaves (after an edit
    of their shapes or types), its other parameters kept."""
    rest = [p for p in split_params(c.params) if not p.startswith(("type=", "ne_"))]
    return replace(c, params=",".join([label(c.leaves), *rest]))


def inp(name: str, shape: Sequence[int], dtype: str = "f32", init: Init = UNIFORM) -> Leaf:
    """A leaf given by its numpy shape (outermost first)."""
    return Leaf(name, pad_ne(tuple(reversed(shape))), dtype, init)


def case(
    op: str, inputs: Sequence[Leaf], program: Program, builder: str, flops: int = 0, **params: Any
) -> Case:
    """A case of op key ``op`` whose error bound is builder ``builder``'s threshold."""
    return Case(
        str(op), label(inputs, **params), tuple(inputs), program, table.max_nmse(builder), flops=flops
    )


def binary(op: str, builder: str, sa: tuple[int, ...], sb: tuple[int, ...], dtype: str = "f32") -> Case:
    init_b = POSITIVE if op == "DIV" else UNIFORM
    return case(
        op,
        [inp("a", sa, dtype), inp("b", sb, dtype, init_b)],
        lambda g, x: getattr(g, builder)(x["a"], x["b"]),
        builder,
    )


def unary(sub: str, dtype: str = "f32", shape: tuple[int, ...] = (5, 128)) -> Case:
    name = sub.lower()
    return case(Op[sub], [inp("a", shape, dtype)], lambda g, x: getattr(g, name)(x["a"]), name)


def call(builder: str, names: Sequence[str], *extra: Any) -> Program:
    """A program calling ``builder`` on the named inputs, then ``extra`` arguments."""
    return lambda g, x: getattr(g, builder)(*[x[n] for n in names], *extra)


def attention_inputs(n_q: int, n_kv: int, heads: int, kv_heads: int, hd: int) -> list[Leaf]:
    # q/k/v are stored token-major ([tokens, heads, head_dim]) and permuted to [heads, tokens, hd]
    # as llama.cpp does; the mask is f16 [n_q, n_kv].
    return [
        inp("q", (n_q, heads, hd)),
        inp("k", (n_kv, kv_heads, hd), "f16"),
        inp("v", (n_kv, kv_heads, hd), "f16"),
        inp("mask", (n_q, n_kv), "f16", Init(lo=-1.0, hi=0.0)),
    ]


def pv(b: Any, x: Any) -> Any:
    """PERMUTE <- VIEW <- base, as llama.cpp feeds flash attention (and upstream's policy
    requires); a full view_3d, as ggml_view_tensor is op NONE in ggml (the real backend rejects it)."""
    return b.permute(b.view_3d(x, x.ne[0], x.ne[1], x.ne[2], x.nb[1], x.nb[2], 0), 0, 2, 1, 3)


def fa_program(scale: float, max_bias: float = 0.0, softcap: float = 0.0) -> Program:
    def program(g: Any, x: Mapping[str, Any]) -> Any:
        q, k, v = pv(g, x["q"]), pv(g, x["k"]), pv(g, x["v"])
        return g.flash_attn_ext(q, k, v, x["mask"], scale, max_bias, softcap)

    return program


def rope_program(mode: int, n_dims: int = 64) -> Program:
    return lambda g, x: g.rope_ext(x["a"], x["pos"], None, n_dims, mode, 0, 10000.0, 1.0, 0.0, 1.0, 32.0, 1.0)


# ---------------------------------------------------------------------------------------------
# The comparison against ggml: ne written innermost first, as test-backend-ops does.
# ---------------------------------------------------------------------------------------------
ASC, DESC = GGML_SORT_ORDER_ASC, GGML_SORT_ORDER_DESC
SWIGLU, GEGLU = Op.SWIGLU.enum_value, Op.GEGLU.enum_value  # ggml_glu_op values

#: builder name -> the op key of the node it makes (the ``op`` of a comparison case): the op
#: table's, and the whole-block case.
BUILDER_OP: dict[str, str] = {
    **{b: str(op) for b, op in table.BUILDER_OP.items()},
    "llama_block": "LLAMA_BLOCK",
}


def bound(fn: Callable[..., Any], *args: Any) -> Program:
    """``fn(builder, leaves, *args)`` as a program: binds a loop's values."""
    return lambda b, t: fn(b, t, *args)


def vs(
    out: list[Case],
    id: str,
    builder: str,
    inputs: Mapping[str, Leaf],
    program: Program,
    *,
    max_nmse: float | None = None,
    why: str = "",
    rejected: str | None = None,
) -> None:
    """One case of the comparison set; ``id`` names its variant (``add-src0-view``)."""
    leaves = tuple(replace(lf, name=n) for n, lf in inputs.items())
    op = BUILDER_OP[builder]
    # the variant: what the id says beyond the builder, or the builder when the op has several
    variant = id.removeprefix(builder).lstrip("-_") or (builder if op.lower() != builder else "")
    params = label(leaves, **({"v": variant} if variant else {}))
    bound = max_nmse if max_nmse is not None else table.max_nmse(builder)
    out.append(Case(op, params, leaves, program, bound, why=why, rejected=rejected or ""))


def f(*ne: int, dtype: str = "f32", lo: float = -1.0, hi: float = 1.0) -> Leaf:
    """A data leaf, uniform in [lo, hi] (named by its key in the case's inputs)."""
    return Leaf("", pad_ne(ne), dtype, Init(lo=lo, hi=hi))


def ints(*ne: int, high: int, dtype: str = "i32") -> Leaf:
    """An index leaf, integers in [0, high)."""
    return Leaf("", pad_ne(ne), dtype, Init("rows", n=high))


def leaf_of(ne: Sequence[int], dtype: str, init: Init = UNIFORM) -> Leaf:
    return Leaf("", pad_ne(ne), dtype, init)
