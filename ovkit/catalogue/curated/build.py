"""What the curated sets are written with: leaves by ggml ``ne``, a program as a builder call on
them (:class:`Call`), op and NMSE threshold from the op table."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ovkit.catalogue.case import UNIFORM, Case, Init, Leaf, Program
from ovkit.ir import pad_ne
from ovkit.ops import table

TEST_OPS, GGML, PERF = "test-ops", "ggml", "perf"
#: The curated sets, in the order :func:`ovkit.catalogue.curated.cases` lists them.
SETS: tuple[str, ...] = (TEST_OPS, GGML, PERF)
#: Leaf draws that are indices or positions, not data: not part of a case's ``type=``.
INDEX_KINDS = frozenset({"rows", "pos", "experts"})

#: builder name -> the op key of the node it makes (a case's ``op``): the op table's, and the
#: whole-block case.
BUILDER_OP: dict[str, str] = {
    **{b: str(op) for b, op in table.BUILDER_OP.items()},
    "llama_block": "LLAMA_BLOCK",
}


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
    return re.findall(r"(?:[^,\[]|\[[^\]]*\])+", params)


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


# -- Leaves, by ggml ne ----------------------------------------------------------------------------
def f(*ne: int, dtype: str = "f32", lo: float = -1.0, hi: float = 1.0, init: Init | None = None) -> Leaf:
    """A data leaf, uniform in [lo, hi] unless ``init`` says otherwise (named by its key in the
    case's leaves)."""
    return Leaf("", pad_ne(ne), dtype, init or Init(lo=lo, hi=hi))


def ints(*ne: int, high: int, dtype: str = "i32") -> Leaf:
    """An index leaf, integers in [0, high)."""
    return Leaf("", pad_ne(ne), dtype, Init("rows", n=high))


def leaf_of(ne: Sequence[int], dtype: str, init: Init = UNIFORM) -> Leaf:
    return Leaf("", pad_ne(ne), dtype, init)


# -- Programs as data: builder calls on the leaves -------------------------------------------------
def _value(a: Any, b: Any, leaves: Mapping[str, Any]) -> Any:
    if isinstance(a, Call | View):
        return a(b, leaves)
    if isinstance(a, str) and a in leaves:
        return leaves[a]
    return a


@dataclass(frozen=True, slots=True)
class Call:
    """``builder(*args)`` on a case's leaves: an argument is a leaf's name, another call or view,
    or a value.  Runs on ``ovkit.Graph`` and on ``oracle.GgmlBuilder`` alike."""

    builder: str
    args: tuple[Any, ...] = ()

    def __call__(self, b: Any, leaves: Mapping[str, Any]) -> Any:
        return getattr(b, self.builder)(*(_value(a, b, leaves) for a in self.args))


@dataclass(frozen=True, slots=True)
class View:
    """``ggml_view_<n>d(src, ne..., src.nb[1], .., src.nb[n-1], offset)`` for n = len(ne): part of
    a bigger tensor with its strides, as test-backend-ops makes its non-contiguous operands."""

    src: Any
    ne: tuple[int, ...]
    offset: int = 0

    def __call__(self, b: Any, leaves: Mapping[str, Any]) -> Any:
        x = _value(self.src, b, leaves)
        n = len(self.ne)
        return getattr(b, f"view_{n}d")(x, *self.ne, *x.nb[1:n], self.offset)


def C(builder: str, *args: Any) -> Call:  # noqa: N802 - a call reads as the builder's own name
    return Call(builder, args)


def V(src: Any, *ne: int, offset: int = 0) -> View:  # noqa: N802
    return View(src, ne, offset)


def P(src: Any, *axes: int) -> Call:  # noqa: N802
    """``ggml_permute(src, axes...)``."""
    return Call("permute", (src, *axes))


def case(builder: str, leaves: Mapping[str, Leaf], *args: Any, op: str | None = None,
         program: Program | None = None, flops: int = 0, max_nmse: float | None = None,
         why: str = "", rejected: str | None = None, **params: Any) -> Case:  # fmt: skip
    """One case: ``builder(*args)`` on ``leaves`` (or ``program``), named as test-backend-ops names
    it; op and threshold the builder's unless given; ``rejected``: a fragment of upstream's reason."""
    named = tuple(replace(lf, name=n) for n, lf in leaves.items())
    key = op or BUILDER_OP[builder]
    bound = max_nmse if max_nmse is not None else table.max_nmse(builder)
    run = program if program is not None else Call(builder, args)
    return Case(key, label(named, **params), named, run, bound, flops=flops, why=why, rejected=rejected or "")


def vs(id: str, builder: str, leaves: Mapping[str, Leaf], *args: Any,
       program: Program | None = None, max_nmse: float | None = None, why: str = "",
       rejected: str | None = None) -> Case:  # fmt: skip
    """A case of the comparison set against ggml: ``id`` names its variant (``add-src0-view``),
    shown as ``v=`` after the leaves (the builder when the op has several builders)."""
    op = BUILDER_OP[builder]
    variant = id.removeprefix(builder).lstrip("-_") or (builder if op.lower() != builder else "")
    extra: dict[str, Any] = {"v": variant} if variant else {}
    return case(
        builder, leaves, *args, program=program, max_nmse=max_nmse, why=why, rejected=rejected, **extra
    )


def sub_op_cases(unary: Mapping[str, Leaf], glu: Mapping[str, Leaf]) -> list[Case]:
    """A case of every registered unary sub-op (``unary`` leaves) and of every registered GLU
    sub-op ``Graph.glu`` builds (``glu`` leaves), from the op table: a new one gets its own."""
    return [
        case(e.builders[0], unary if e.kind == "unary" else glu, "a")
        for e in table.ENTRIES
        if e.registered and ("unary" in e.builders or "glu" in e.builders)
    ]


# -- Attention and rope, as llama.cpp feeds them ---------------------------------------------------
def attention_inputs(n_q: int, n_kv: int, heads: int, kv_heads: int, hd: int) -> dict[str, Leaf]:
    """q/k/v stored token-major (ne [hd, heads, tokens]) and permuted to [hd, tokens, heads] as
    llama.cpp does; the mask f16 [n_kv, n_q]."""
    return {
        "q": f(hd, heads, n_q),
        "k": f(hd, kv_heads, n_kv, dtype="f16"),
        "v": f(hd, kv_heads, n_kv, dtype="f16"),
        "mask": f(n_kv, n_q, dtype="f16", lo=-1.0, hi=0.0),
    }


def pv(b: Any, x: Any) -> Any:
    """PERMUTE <- VIEW <- base, as llama.cpp feeds flash attention (and upstream's policy
    requires); a full view_3d, as ggml_view_tensor is op NONE in ggml (the real backend rejects it)."""
    return b.permute(b.view_3d(x, x.ne[0], x.ne[1], x.ne[2], x.nb[1], x.nb[2], 0), 0, 2, 1, 3)


def fa_program(
    scale: float, max_bias: float = 0.0, softcap: float = 0.0, mask: str | None = "mask", sinks: str = ""
) -> Program:
    """``flash_attn_ext`` of the leaves q, k, v (through :func:`pv`) and ``mask``; ``sinks``: the
    leaf added by ``flash_attn_ext_add_sinks``."""

    def program(g: Any, x: Mapping[str, Any]) -> Any:
        m = x[mask] if mask else None
        out = g.flash_attn_ext(pv(g, x["q"]), pv(g, x["k"]), pv(g, x["v"]), m, scale, max_bias, softcap)
        if sinks:
            g.flash_attn_ext_add_sinks(out, x[sinks])
        return out

    return program


def rope_args(
    n_dims: int, mode: int, fs: float = 1.0, ef: float = 0.0, af: float = 1.0, n_ctx_orig: int = 0
) -> tuple[Any, ...]:
    """rope_ext's arguments after (a, pos, freq_factors): n_dims, mode, n_ctx_orig, freq_base 10000,
    freq_scale, ext_factor, attn_factor, beta_fast 32, beta_slow 1."""
    return (n_dims, mode, n_ctx_orig, 10000.0, fs, ef, af, 32.0, 1.0)
