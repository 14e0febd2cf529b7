"""The comparison set against ggml's CPU backend: every op in layouts, views, types, value ranges
and model-sized shapes, one ``vs(id, builder, leaves, *args)`` row per case (``ne`` innermost first)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict, Unpack

import numpy as np

from ovkit.catalogue.case import Case, Init, Leaf, Program
from ovkit.catalogue.curated.build import C, P, Range, V, f, fa_program, ints, leaf_of, rope_args, vs
from ovkit.catalogue.curated.llama_block import cases as llama_block_cases
from ovkit.dtypes import QUANT_TYPES
from ovkit.ir import GGML_SORT_ORDER_ASC, GGML_SORT_ORDER_DESC, Op, RopeType

SWIGLU, GEGLU = Op.SWIGLU.enum_value, Op.GEGLU.enum_value  # ggml_glu_op values
ASC, DESC = GGML_SORT_ORDER_ASC, GGML_SORT_ORDER_DESC
WIDE: Range = {"lo": -150.0, "hi": 150.0}  # test_unary / test_glu's value range


def _binary_cases() -> list[Case]:
    """Binary elementwise: ADD SUB MUL DIV (test_bin_bcast)."""
    out = []
    for op in ("add", "sub", "mul", "div"):
        r: Range = {"lo": 0.9, "hi": 1.1} if op in ("mul", "div") else {}
        out += [vs(f"{op}-same-{dt}", op, {"a": f(10, 5, 4, 3, dtype=dt, **r), "b": f(10, 5, 4, 3, dtype=dt, **r)},
                   "a", "b") for dt in ("f32", "f16", "bf16")]  # fmt: skip
        out += [
            vs(f"{op}-bcast-row", op, {"a": f(10, 5, 4, 3, **r), "b": f(10, 1, 1, 1, **r)}, "a", "b"),
            # ggml tiles b; upstream ADD/SUB/MUL broadcast only dims of size 1
            vs(f"{op}-bcast-tile", op, {"a": f(20, 10, 8, 6, **r), "b": f(10, 5, 4, 3, **r)}, "a", "b",
               rejected=None if op == "div" else "neither is 1"),  # fmt: skip
            vs(f"{op}-bcast-col", op, {"a": f(16, 5, 4, 3, **r), "b": f(1, 5, 4, 1, **r)}, "a", "b"),
            vs(f"{op}-f16-b-f32", op, {"a": f(10, 5, 4, 3, dtype="f16", **r), "b": f(10, 5, 1, 1, **r)},
               "a", "b"),
            # a non-contiguous view: the first half of each row of a wider tensor
            vs(f"{op}-src0-view", op, {"a": f(20, 5, 4, 3, **r), "b": f(10, 5, 4, 3, **r)},
               V("a", 10, 5, 4, 3), "b"),
            vs(f"{op}-src0-permuted", op, {"a": f(10, 4, 5, 3, **r), "b": f(10, 5, 1, 3, **r)},
               P("a", 0, 2, 1, 3), "b"),
        ]  # fmt: skip
    return out


def _scalar_cases() -> list[Case]:
    """ADD1, ADD_ID, SCALE, SQR, SQRT, CLAMP, FILL."""
    ids = leaf_of((8, 5), "i32", Init("experts", n=8))
    out = [
        vs("add1-f32", "add1", {"a": f(10, 5, 4, 3), "b": f(1)}, "a", "b"),
        vs("add1-f16", "add1", {"a": f(10, 5, 4, 3, dtype="f16"), "b": f(1, dtype="f16")}, "a", "b"),
        vs("add_id-all-experts", "add_id", {"a": f(32, 8, 5), "b": f(32, 8), "ids": ids}, "a", "b", "ids"),
        vs("add_id-ids-view", "add_id", {"a": f(32, 4, 5), "b": f(32, 8), "ids": ids}, "a", "b",
           V("ids", 4, 5)),
        vs("scale", "scale", {"a": f(10, 10, 10, 10)}, "a", 2.0),
        vs("scale_bias", "scale_bias", {"a": f(10, 10, 10, 10)}, "a", 0.75, -1.5),
    ]  # fmt: skip
    for dt in ("f32", "f16"):
        out += [
            vs(f"sqr-{dt}", "sqr", {"a": f(10, 5, 4, 3, dtype=dt)}, "a"),
            vs(f"sqrt-{dt}", "sqrt", {"a": f(10, 3, 3, 2, dtype=dt, lo=50.0, hi=100.0)}, "a"),
            vs(f"clamp-{dt}", "clamp", {"a": f(10, 5, 4, 3, dtype=dt)}, "a", -0.5, 0.5),
            vs(f"fill-{dt}", "fill", {"a": f(10, 10, 4, 3, dtype=dt)}, "a", 2.5),
        ]
    return [*out, vs("sqr-bf16", "sqr", {"a": f(10, 5, 4, 3, dtype="bf16")}, "a")]


def _unary_cases() -> list[Case]:
    """Unary sub-ops (test_unary: x in [-150, 150])."""
    out = []
    for u in ("gelu", "sigmoid", "silu", "softplus", "tanh", "neg"):
        out += [
            vs(f"{u}-f32", u, {"a": f(128, 2, 2, 2, **WIDE)}, "a"),
            vs(f"{u}-f32-narrow", u, {"a": f(128, 2, 2, 2, lo=-4.0, hi=4.0)}, "a"),
            vs(f"{u}-f16", u, {"a": f(128, 2, 2, 2, dtype="f16", lo=-10.0, hi=10.0)}, "a"),
            vs(f"{u}-f16-wide", u, {"a": f(128, 2, 2, 2, dtype="f16", **WIDE)}, "a"),
            vs(f"{u}-view", u, {"a": f(384, 4, 10, 8, **WIDE)}, V("a", 128, 2, 2, 2)),
        ]
    # bf16: ggml's CPU backend has bf16 kernels for these unary ops (not for GELU/SILU)
    out += [vs(f"{u}-bf16", u, {"a": f(128, 2, 2, 2, dtype="bf16", lo=-10.0, hi=10.0)}, "a")
            for u in ("neg", "tanh", "sigmoid", "softplus")]  # fmt: skip
    return [
        *out,
        vs("exp-f16", "exp", {"a": f(128, 2, 2, 2, dtype="f16", lo=-10.0, hi=10.0)}, "a"),
        # test-backend-ops' range [-150, 150] (why upstream rejects EXP f32: OpenVINO's Exp overflows
        # from x ~ 88.38, ovkit's translation keeps it finite up to 88.72 like ggml)
        vs("exp-f32-wide", "exp", {"a": f(128, 2, 2, 2, **WIDE)}, "a", rejected="exp"),
        vs("exp-f32", "exp", {"a": f(128, 2, 2, 2, lo=-10.0, hi=10.0)}, "a", rejected="exp"),
    ]


def _glu_cases() -> list[Case]:
    """GLU sub-ops (test_glu / test_glu_split / test_swiglu_oai: x in [-150, 150])."""
    out = []
    wide, wide3 = f(128, 2, 2, 2, **WIDE), f(384, 2, 2, 2, **WIDE)
    view = V("a", 128, 2, 2, 2)
    for name, sub in (("swiglu", SWIGLU), ("geglu", GEGLU)):
        for sw in (False, True):
            out += [
                vs(f"{name}-swapped{int(sw)}", name, {"a": wide}, program=C("glu", "a", sub, sw)),
                vs(f"{name}-swapped{int(sw)}-view", name, {"a": wide3}, program=C("glu", view, sub, sw)),
                vs(f"{name}-swapped{int(sw)}-f16", name,
                   {"a": f(128, 2, 2, 2, dtype="f16", lo=-10.0, hi=10.0)}, program=C("glu", "a", sub, sw)),  # fmt: skip
            ]  # fmt: skip
        out += [
            vs(f"{name}_split", name, {"a": wide, "b": wide}, program=C(f"{name}_split", "a", "b")),
            vs(f"{name}_split-view", name, {"a": wide3, "b": wide3},
               program=C(f"{name}_split", view, V("b", 128, 2, 2, 2))),  # fmt: skip
        ]  # fmt: skip
    narrow = f(128, 2, 2, 2, lo=-10.0, hi=10.0)
    return [
        *out,
        vs("swiglu_oai", "swiglu_oai", {"a": wide, "b": wide}, "a", "b", 1.702, 7.0),
        vs("swiglu_oai-narrow", "swiglu_oai", {"a": narrow, "b": narrow}, "a", "b", 1.702, 7.0),
        vs("swiglu_oai-view", "swiglu_oai", {"a": wide3, "b": wide3}, view, V("b", 128, 2, 2, 2), 1.702, 7.0),
    ]


def _layout_cases() -> list[Case]:
    """Layout ops: CONT, CPY, RESHAPE, VIEW, PERMUTE, TRANSPOSE."""
    # upstream: a TRANSPOSE output must not be bf16
    out = [vs(f"cont-transpose-{dt}", "cont", {"a": f(10, 10, 10, 1, dtype=dt)}, C("transpose", "a"),
              rejected="bf16" if dt == "bf16" else None) for dt in ("f32", "f16", "bf16")]  # fmt: skip
    wide = WIDE
    out += [
        # a slice of each row: 10 of a 10x10 plane's rows, from element 9 on
        vs("cont-view-slice-bf16", "cont", {"a": f(10, 10, 10, 1, dtype="bf16")},
           V("a", 10, 1, 10, 1, offset=18)),
        vs("cont-permute-4d", "cont", {"a": f(6, 5, 4, 3)}, P("a", 2, 0, 3, 1)),
        vs("cont-view-slice", "cont", {"a": f(10, 10, 10, 1)}, V("a", 10, 1, 10, 1, offset=36)),
        vs("cont_2d-of-permute", "cont", {"a": f(8, 4, 6)}, program=C("cont_2d", P("a", 0, 2, 1, 3), 32, 6)),
        vs("cpy-f32-f16", "cpy", {"a": f(10, 10, 10, 1, **wide), "d": f(10, 10, 10, 1, dtype="f16")},
           "a", "d"),
        vs("cpy-f16-f32", "cpy", {"a": f(10, 10, 10, 1, dtype="f16", **wide), "d": f(10, 10, 10, 1)},
           "a", "d"),
        vs("cpy-f32-permuted-src", "cpy", {"a": f(10, 8, 6, 1, **wide), "d": f(10, 6, 8, 1)},
           P("a", 0, 2, 1, 3), "d", max_nmse=0.0, why="test_cpy: 0 when src and dst types match"),  # fmt: skip
        vs("cpy-f32-f16-transposed-src", "cpy", {"a": f(12, 7, **wide), "d": f(7, 12, dtype="f16")},
           C("transpose", "a"), "d"),  # fmt: skip
        vs("reshape_2d", "reshape_2d", {"a": f(10, 5, 4, 3)}, "a", 50, 12),
        vs("reshape_4d-then-add", "reshape_4d", {"a": f(60, 4), "b": f(5, 3, 4, 4)},
           program=C("add", C("reshape_4d", "a", 5, 3, 4, 4), "b")),  # fmt: skip
        vs("reshape-of-cont-permute", "reshape_3d", {"a": f(4, 6, 5)}, C("cont", P("a", 1, 0, 2, 3)), 12,
           2, 5),
        vs("view_1d-offset", "view_1d", {"a": f(10, 5, 4)}, "a", 37, 4 * 11),
        vs("view_2d-rows", "view_2d", {"a": f(10, 8)}, "a", 6, 3, 40, 40 * 2 + 8),  # nb1 40: f32 rows of 10
        vs(
            "view_3d-strided", "view_3d", {"a": f(8, 6, 4)}, "a", 4, 3, 2, 32 * 2, 192 * 2, 4
        ),  # every 2nd row, plane
        vs("view_4d-then-mul", "view_4d", {"a": f(20, 5, 4, 3), "b": f(10, 5, 4, 3)},
           program=C("mul", V("a", 10, 5, 4, 3, offset=40), "b")),  # fmt: skip
    ]  # fmt: skip
    out += [vs(f"permute-{''.join(map(str, axes))}", "permute", {"a": f(6, 5, 4, 3)}, "a", *axes)
            for axes in ((1, 0, 2, 3), (0, 2, 1, 3), (2, 0, 1, 3), (3, 2, 1, 0))]  # fmt: skip
    return [
        *out,
        vs("permute-f16", "permute", {"a": f(6, 5, 4, 3, dtype="f16")}, "a", 0, 2, 1, 3),
        vs("transpose", "transpose", {"a": f(7, 5, 3)}, "a"),
        vs("transpose-f16-then-cont", "transpose", {"a": f(7, 5, dtype="f16")},
           program=C("cont", C("transpose", "a"))),
    ]  # fmt: skip


def _concat(
    dim: int, v: int, dtype: str, ne_a: tuple[int, int, int, int] = (10, 5, 5, 5), nb_d: int = 3
) -> Case:
    """test_concat: v bit 0 = a non-contiguous a, bit 1 = a non-contiguous b."""
    ne_b = list(ne_a)
    ne_b[dim] = nb_d
    big_a = (ne_a[0] * 2, ne_a[1] * 4, ne_a[2] * 3, ne_a[3]) if v & 1 else ne_a
    big_b = (ne_b[0] * 3, ne_b[1] * 2, ne_b[2] * 4, ne_b[3]) if v & 2 else ne_b
    a, b = (V("a", *ne_a) if v & 1 else "a"), (V("b", *ne_b) if v & 2 else "b")
    cid = f"concat-dim{dim}" + (f"-v{v}" if v else "") + ("" if dtype == "f32" else f"-{dtype}")
    return vs(cid, "concat", {"a": f(*big_a, dtype=dtype), "b": f(*big_b, dtype=dtype)}, a, b, dim)


def _concat_cases() -> list[Case]:
    """CONCAT (test_concat)."""
    return [
        *(_concat(dim, 0, "f32") for dim in range(4)),
        *(_concat(1, v, "f32") for v in (1, 2, 3)),
        _concat(2, 0, "f16"),
        vs("concat-dim0-i32", "concat", {"a": ints(10, 5, 5, 5, high=1000), "b": ints(3, 5, 5, 5,
           high=1000)}, "a", "b", 0),
    ]  # fmt: skip


def _rows_cases() -> list[Case]:
    """GET_ROWS / SET_ROWS / SET."""
    out = [vs(f"get_rows-{dt}", "get_rows", {"a": f(10, 5, dtype=dt), "r": ints(3, high=5)}, "a", "r")
           for dt in ("f32", "f16", "bf16")]  # fmt: skip
    batched = {"a": f(10, 5, 3), "r": ints(4, 3, high=5)}
    out += [
        vs("get_rows-batched", "get_rows", batched, "a", "r"),
        vs("get_rows-rows-view", "get_rows", batched, "a", V("r", 2, 3)),
        vs("get_rows-i32-data", "get_rows", {"a": ints(10, 5, high=100), "r": ints(3, high=5)}, "a", "r"),
    ]
    for dt in ("f32", "f16", "bf16"):
        for it in ("i64", "i32"):
            idx = leaf_of((3, 2), it, Init("set_rows", n=10))
            leaves = {"dst": f(32, 10, 2, dtype=dt), "src": f(32, 3, 2), "idx": idx}
            out.append(vs(f"set_rows-{dt}-{it}", "set_rows", leaves, "dst", "src", "idx"))
    return [
        *out,
        vs("set_rows-bcast", "set_rows",
           {"dst": f(16, 10, 4), "src": f(16, 3, 4), "idx": leaf_of((3, 2), "i64", Init("set_rows", n=10))},
           "dst", "src", "idx"),
        vs("set_rows-views", "set_rows",
           {"dst": f(16, 10, 2), "src": f(16, 4, 2), "idx": leaf_of((4, 2), "i64", Init("set_rows", n=10))},
           "dst", V("src", 16, 2, 2), V("idx", 2, 2)),
        # a's own strides (f32 [12, 5, 4, 3]: 48, 240, 960), from row 2, element 3
        vs("set-block", "set", {"a": f(12, 5, 4, 3), "b": f(6, 3, 2, 1)}, "a", "b", 48, 240, 960, 48 * 2 + 3 * 4),
        vs("set_1d", "set", {"a": f(40), "b": f(7)}, program=C("set_1d", "a", "b", 4 * 9)),
        vs("set_2d", "set", {"a": f(10, 6), "b": f(4, 3)}, program=C("set_2d", "a", "b", 40, 4 * 12)),
    ]  # fmt: skip


def _mul_mat_cases() -> list[Case]:
    """MUL_MAT (a ne [k, m, bs0, bs1], b ne [k, n, bs0*nr0, bs1*nr1]) and MUL_MAT_ID (as ne [k, m,
    n_mats], b ne [k, n_used or 1, n], ids ne [n_used, n])."""
    experts = Init("experts", n=4)
    return [
        vs("mul_mat-f32", "mul_mat", {"a": f(32, 16, 2, 3), "b": f(32, 8, 2, 3)}, "a", "b"),
        vs("mul_mat-gqa-bcast", "mul_mat", {"a": f(32, 16, 2, 1), "b": f(32, 8, 8, 2)}, "a", "b"),
        vs("mul_mat-vector", "mul_mat", {"a": f(64, 48), "b": f(64, 1)}, "a", "b"),
        vs("mul_mat-f16-a", "mul_mat", {"a": f(32, 16, 2, dtype="f16"), "b": f(32, 8, 2)}, "a", "b"),
        vs("mul_mat-f16-f16", "mul_mat", {"a": f(32, 16, 2, dtype="f16"), "b": f(32, 8, 2, dtype="f16")}, "a", "b"),
        vs("mul_mat-bf16-a", "mul_mat", {"a": f(32, 16, 2, dtype="bf16"), "b": f(32, 8, 2)}, "a", "b"),
        vs("mul_mat-permuted-0213", "mul_mat", {"a": f(32, 2, 16, 3), "b": f(32, 2, 8, 3)},
           P("a", 0, 2, 1, 3), P("b", 0, 2, 1, 3)),
        vs("mul_mat-a-view-k", "mul_mat", {"a": f(48, 16, 2), "b": f(32, 8, 2)}, V("a", 32, 16, 2), "b"),
        # [head_dim, n_head, n_tokens] as in llama.cpp
        vs("mul_mat-kq-attention", "mul_mat", {"k": f(16, 4, 24), "q": f(16, 4, 6)},
           P("k", 0, 2, 1, 3), P("q", 0, 2, 1, 3)),
        vs("mul_mat_id-f32", "mul_mat_id",
           {"as": f(32, 16, 4), "b": f(32, 2, 5), "ids": leaf_of((2, 5), "i32", experts)}, "as", "b", "ids"),
        vs("mul_mat_id-bcast-b", "mul_mat_id",
           {"as": f(32, 16, 4), "b": f(32, 1, 5), "ids": leaf_of((4, 5), "i32", experts)}, "as", "b", V("ids", 2, 5)),
        vs("mul_mat_id-f16", "mul_mat_id",
           {"as": f(32, 16, 8, dtype="f16"), "b": f(32, 3, 4), "ids": leaf_of((3, 4), "i32", Init("experts", n=8))},
           "as", "b", "ids"),
    ]  # fmt: skip


def _quantized_cases() -> list[Case]:
    """Quantized weights (the upstream backend's 8 types); get_rows rows of 512 avoid upstream's
    ne[0]==256 gate."""
    out = []
    for q in QUANT_TYPES:
        out += [
            vs(f"mul_mat-{q}", "mul_mat", {"w": leaf_of((256, 24), q), "x": f(256, 5)}, "w", "x"),
            vs(f"get_rows-{q}", "get_rows", {"w": leaf_of((512, 6), q), "r": ints(4, high=6)}, "w", "r"),
        ]
    for q in ("q4_0", "mxfp4"):
        ids = leaf_of((2, 3), "i32", Init("experts", n=4))
        leaves = {"as": leaf_of((256, 16, 4), q), "b": f(256, 2, 3), "ids": ids}
        out.append(vs(f"mul_mat_id-{q}", "mul_mat_id", leaves, "as", "b", "ids"))
    return out


def _norm_cases() -> list[Case]:
    """Norms and reductions."""
    distinct = Init("distinct")
    ten: Range = {"lo": -10.0, "hi": 10.0}
    return [
        vs("norm", "norm", {"a": f(64, 5, 4, 3)}, "a", 1e-6),
        vs("norm-view", "norm", {"a": f(64, 6, 4, 2)}, V("a", 32, 3, 2, 1), 1e-6),
        vs("norm-noncontig-rows", "norm", {"a": f(5, 64, 4, 3)}, P("a", 1, 0, 2, 3), 1e-5),
        vs("rms_norm", "rms_norm", {"a": f(64, 5, 4, 3, **ten)}, "a", 1e-6),
        vs("rms_norm-view", "rms_norm", {"a": f(64, 6, 4, 2, **ten)}, V("a", 32, 3, 2, 1), 1e-6),
        vs("rms_norm-eps-large", "rms_norm", {"a": f(32, 4, lo=-0.01, hi=0.01)}, "a", 1e-3),
        vs("l2_norm", "l2_norm", {"a": f(64, 6, 4, 2)}, "a", 1e-12),
        vs("l2_norm-view", "l2_norm", {"a": f(64, 6, 4, 2)}, V("a", 32, 3, 2, 1), 1e-12),
        vs("l2_norm-noncontig-rows", "l2_norm", {"a": f(6, 64, 4, 2)}, P("a", 1, 0, 2, 3), 1e-12),
        vs("sum_rows", "sum_rows", {"a": f(10, 5, 4, 3)}, "a"),
        # every 2nd plane of the first two batches of a's [10, 5, 4, 3] f32 (nb 40, 200, 800), from batch 1
        vs("sum_rows-slice-view", "sum_rows", {"a": f(10, 5, 4, 3)},
           C("view_4d", "a", 10, 5, 2, 2, 40, 400, 800, 800)),
        vs("cumsum", "cumsum", {"a": f(10, 5, 4, 3)}, "a"),
        vs("cumsum-long", "cumsum", {"a": f(200, 3)}, "a"),
        vs("argsort-asc", "argsort", {"a": leaf_of((16, 10, 4, 2), "f32", distinct)}, "a", ASC),
        vs("argsort-odd-width", "argsort", {"a": leaf_of((13, 7), "f32", distinct)}, "a", DESC),
        vs("argsort-desc", "argsort", {"a": leaf_of((16, 10, 4, 2), "f32", distinct)}, "a", DESC),
    ]  # fmt: skip


def _sm(mask: bool, scale: float, max_bias: float, sinks: bool) -> Program:
    def program(b: Any, t: Mapping[str, Any]) -> Any:
        out = b.soft_max_ext(t["a"], t["m"] if mask else None, scale, max_bias)
        if sinks:
            b.soft_max_add_sinks(out, t["s"])
        return out

    return program


def _sm_inputs(mask: str | None, sinks: bool, ne: tuple[int, int, int, int] = (16, 5, 4, 3),
               nr23: tuple[int, int] = (1, 1)) -> dict[str, Leaf]:  # fmt: skip
    ins = {"a": f(ne[0], ne[1], ne[2] * nr23[0], ne[3] * nr23[1])}
    if mask:
        ins["m"] = f(*ne, dtype=mask)
    if sinks:
        ins["s"] = f(ne[2] * nr23[0], lo=-10.0, hi=10.0)
    return ins


def _soft_max_cases() -> list[Case]:
    """SOFT_MAX (test_soft_max)."""
    sm = "soft_max_ext"
    causal = {"a": f(24, 6, 4, 1), "m": leaf_of((24, 6, 1, 1), "f16", Init("causal_mask"))}
    return [
        vs("soft_max-plain", "soft_max", {"a": f(16, 5, 4, 3)}, "a"),
        vs("soft_max_ext-scale", sm, _sm_inputs(None, False), program=_sm(False, 0.1, 0.0, False)),
        vs("soft_max_ext-mask-f32", sm, _sm_inputs("f32", False), program=_sm(True, 1.0, 0.0, False)),
        vs("soft_max_ext-mask-f16-scale", sm, _sm_inputs("f16", False), program=_sm(True, 0.1, 0.0, False)),
        vs("soft_max_ext-mask-bcast", sm, _sm_inputs("f32", False, nr23=(2, 3)),
           program=_sm(True, 0.5, 0.0, False)),
        vs("soft_max_ext-alibi", sm, _sm_inputs("f32", False), program=_sm(True, 1.0, 8.0, False)),
        vs("soft_max_ext-alibi-f16-mask", sm, _sm_inputs("f16", False, ne=(32, 4, 12, 1)),
           program=_sm(True, 0.25, 8.0, False)),  # fmt: skip
        vs("soft_max_ext-sinks", sm, _sm_inputs(None, True), program=_sm(False, 1.0, 0.0, True)),
        vs("soft_max_ext-mask-sinks", sm, _sm_inputs("f16", True), program=_sm(True, 0.1, 0.0, True)),
        vs("soft_max_ext-alibi-sinks", sm, _sm_inputs("f32", True), program=_sm(True, 1.0, 8.0, True)),
        vs("soft_max_ext-causal-mask", sm, causal, program=_sm(True, 0.125, 0.0, False)),
    ]  # fmt: skip


def _fa(
    hsk: int, hsv: int, nh: int, nr: int, kv: int, nb: int, mask: bool, kv_dtype: str
) -> tuple[dict[str, Leaf], Program]:
    """test_flash_attn_ext's leaves (q/k/v as llama.cpp passes them: permuted views) and program."""
    ins = {
        "q": f(hsk, nh * nr, nb),  # [head_dim, n_head, n_tokens], as after the Q projection
        "k": f(hsk, nh, kv, dtype=kv_dtype),  # cache layout [head_dim, n_head_kv, n_kv]
        "v": f(hsv, nh, kv, dtype=kv_dtype),
    }
    if mask:  # ggml-python's ggml pads the mask rows to GGML_KQ_MASK_PAD (32)
        ins["m"] = leaf_of((kv, -(-nb // 32) * 32, 1, 1), "f16", Init("causal_mask"))
    return ins, fa_program(1.0 / np.sqrt(hsk), mask="m" if mask else None)


def _flash_attn_cases() -> list[Case]:
    """FLASH_ATTN_EXT (test_flash_attn_ext)."""
    out = []
    for cid, args in {
        "fa-f16kv-mask": (64, 64, 4, 1, 32, 8, True, "f16"),
        "fa-f16kv-nomask": (64, 64, 4, 1, 32, 8, False, "f16"),
        "fa-gqa4-mask": (64, 64, 2, 4, 32, 8, True, "f16"),
        "fa-gqa2-hsv-ne-hsk": (64, 32, 2, 2, 48, 5, True, "f16"),
        "fa-f32kv-gqa": (32, 32, 2, 3, 16, 4, True, "f32"),
        "fa-decode-1-token": (64, 64, 4, 2, 40, 1, True, "f16"),
        "fa-bf16kv-gqa": (64, 64, 2, 2, 32, 6, True, "bf16"),
    }.items():
        ins, prog = _fa(*args)
        # upstream: a PERMUTE with bf16 output is rejected, and bf16 K/V reach FA through one
        out.append(
            vs(cid, "flash_attn_ext", ins, program=prog, rejected="bf16" if args[-1] == "bf16" else None)
        )
    return out


class Yarn(TypedDict, total=False):
    """YaRN's rope parameters: freq_scale, ext_factor, attn_factor."""

    fs: float
    ef: float
    af: float


_YARN: Yarn = {"fs": 1.4245, "ef": 0.7465, "af": 1.4245}


def _rope_in(ne: tuple[int, ...], dtype: str = "f32", ff: int = 0, planes: int = 1) -> dict[str, Leaf]:
    ins = {"a": f(*ne, dtype=dtype), "p": ints(ne[2] * planes, high=512)}
    if ff:
        ins["ff"] = f(ff, lo=0.9, hi=1.1)
    return ins


def _rope(n_dims: int, mode: int, ff: str | None = None, **yarn: Unpack[Yarn]) -> tuple[Any, ...]:
    """rope_ext's arguments on the leaves a, p (and ``ff``)."""
    return ("a", "p", ff, *rope_args(n_dims, mode, **yarn))


def _multi(
    n_dims: int, sections: list[int], mode: int = RopeType.IMROPE, ff: str | None = None, **yarn: Unpack[Yarn]
) -> tuple[Any, ...]:
    """rope_multi's arguments on the leaves a, p (and ``ff``)."""
    return ("a", "p", ff, n_dims, sections, *rope_args(n_dims, mode, **yarn)[1:])


def _rope_cases() -> list[Case]:
    """ROPE: NORMAL, NEOX (rope_ext) and IMROPE (rope_multi)."""
    out, small = [], _rope_in((32, 4, 5, 1))
    for name, mode in (("normal", RopeType.NORMAL), ("neox", RopeType.NEOX)):
        out += [
            vs(f"rope-{name}-full", "rope_ext", small, *_rope(32, mode)),
            vs(f"rope-{name}-partial", "rope_ext", small, *_rope(16, mode)),
            vs(f"rope-{name}-f16", "rope_ext", _rope_in((32, 4, 5, 1), dtype="f16"), *_rope(32, mode)),
            vs(f"rope-{name}-yarn", "rope_ext", _rope_in((64, 2, 7, 1)), *_rope(64, mode, **_YARN)),
            vs(f"rope-{name}-freq-factors", "rope_ext", _rope_in((32, 4, 5, 1), ff=16),
               *_rope(32, mode, "ff")),
            vs(f"rope-{name}-scaled", "rope_ext", _rope_in((16, 3, 6, 2)), *_rope(16, mode, fs=0.25)),
            # Q sliced out of a fused QKV projection (non-contiguous rows; qkv rows of 96 f32: nb1 384)
            vs(f"rope-{name}-qkv-view", "rope_ext", {"qkv": f(96, 5), "p": ints(5, high=512)},
               C("view_3d", "qkv", 16, 2, 5, 16 * 4, 384, 0), *_rope(16, mode)[1:]),  # fmt: skip
        ]  # fmt: skip
    planes = _rope_in((32, 4, 5, 1), planes=4)
    return [
        *out,
        vs("rope-imrope-full", "rope_multi", planes, *_multi(32, [6, 5, 5, 0])),
        vs("rope-imrope-partial", "rope_multi", _rope_in((32, 2, 6, 1), planes=4), *_multi(16, [3, 3, 2, 0])),
        vs("rope-imrope-f16", "rope_multi", _rope_in((32, 4, 5, 1), dtype="f16", planes=4),
           *_multi(32, [6, 5, 5, 0])),
        # test-backend-ops' v=1: a strided view; upstream only takes views with view_src ne[1] == ne[2]
        vs("rope-normal-strided-view", "rope_ext", {"a": f(20, 20, 15, 1), "p": ints(5, high=512)},
           V("a", 10, 5, 5, 1), *_rope(10, RopeType.NORMAL)[1:], rejected="view_src"),  # fmt: skip
        # MROPE (8) and VISION (24) are not registered upstream: rejected, yet ggml's numbers must hold
        vs("rope-mrope", "rope_multi", planes, *_multi(32, [5, 5, 6, 0], 8), rejected="mode"),
        vs("rope-vision", "rope_multi", planes, *_multi(16, [8, 8, 0, 0], 24), rejected="mode"),
        vs("rope-imrope-freq-factors", "rope_multi", {**planes, "ff": f(16, lo=0.9, hi=1.1)},
           *_multi(32, [6, 5, 5, 0], ff="ff"), rejected="imrope"),  # fmt: skip
        vs("rope-imrope-yarn", "rope_multi", planes, *_multi(32, [6, 5, 5, 0], **_YARN), rejected="imrope"),
    ]  # fmt: skip


def _gdn(hc: int, hs: int, nt: int, ns: int, vr: int) -> dict[str, Leaf]:
    """test_gated_delta_net's leaves (l2-normed q and k, as qwen3next feeds them: :func:`_gdn_call`)."""
    return {
        "q": f(hs, hc, nt, ns),
        "k": f(hs, hc, nt, ns),
        "v": f(hs, hc * vr, nt, ns, lo=-0.3, hi=5.0),
        "g": f(1, hc * vr, nt, ns, lo=-20.0, hi=-1e-4),
        "beta": f(1, hc * vr, nt, ns, lo=0.0, hi=1.0),
        "state": f(hs, hs, hc * vr, ns),
    }


def _gdn_call(v: Any = "v", k: int = 1) -> tuple[Any, ...]:
    return (C("l2_norm", "q", 1e-6), C("l2_norm", "k", 1e-6), v, "g", "beta", "state", k)


def _conv_and_recurrent_cases() -> list[Case]:
    """IM2COL, PAD, REPEAT, SSM_CONV, GATED_DELTA_NET, DIAG, TRI."""
    im2col = {"k": f(3, 3, 3, 1, dtype="f16"), "x": f(10, 10, 3, 1)}
    out = [
        vs(f"im2col-2d-{dst}", "im2col", im2col, "k", "x", 1, 1, 1, 1, 1, 1, True, dst)
        for dst in ("f32", "f16")
    ]
    out += [
        vs("im2col-2d-stride-dilation", "im2col", {"k": f(3, 3, 2, 4, dtype="f16"), "x": f(12, 9, 2, 2)},
           "k", "x", 2, 1, 0, 2, 2, 1, True, "f32"),
        vs("im2col-1d", "im2col", {"k": f(3, 4, 2, dtype="f16"), "x": f(20, 4, 2)},
           "k", "x", 2, 0, 1, 0, 1, 0, False, "f32"),
        vs("pad", "pad", {"a": f(16, 12, 1, 1)}, "a", 1, 2, 0, 0),
        vs("pad-4d", "pad", {"a": f(5, 4, 3, 2)}, "a", 2, 1, 1, 1),
        vs("pad_ext", "pad_ext", {"a": f(8, 6, 3, 1)}, "a", 1, 2, 0, 1, 1, 0, 0, 0),
        vs("pad_ext-permuted", "pad_ext", {"a": f(8, 6, 3, 1)}, P("a", 2, 1, 0, 3), 1, 1, 1, 1, 1, 1, 0, 0),
        vs("pad_ext-view", "pad_ext", {"a": f(8, 6, 3, 1)}, V("a", 4, 3, 2), 1, 1, 1, 1, 0, 1, 0, 0),
        vs("repeat", "repeat", {"a": f(10, 5, 4, 3), "tgt": f(20, 10, 4, 6)}, "a", "tgt"),
        vs("repeat-f16", "repeat", {"a": f(8, 1, 3, dtype="f16"), "tgt": f(16, 5, 3, dtype="f16")}, "a", "tgt"),
        vs("repeat-scalar", "repeat", {"a": f(1), "tgt": f(4, 3)}, "a", "tgt"),
        vs("ssm_conv", "ssm_conv", {"sx": f(3 + 5, 16, 2), "c": f(4, 16)}, "sx", "c"),
        vs("ssm_conv-1-token", "ssm_conv", {"sx": f(3 + 1, 32, 1), "c": f(4, 32)}, "sx", "c"),
    ]  # fmt: skip
    for cid, shape in {
        "gated_delta_net-1tok": (4, 16, 1, 1, 1),
        "gated_delta_net-seq": (4, 16, 5, 2, 1),
        "gated_delta_net-v-repeat": (2, 16, 3, 1, 2),
    }.items():
        out.append(vs(cid, "gated_delta_net", _gdn(*shape), *_gdn_call()))
    return [
        *out,
        vs("diag", "diag", {"a": f(10, 1, 4, 3)}, "a"),
        *(vs(f"tri-type{t}", "tri", {"a": f(10, 10, 4, 3)}, "a", t) for t in range(4)),
    ]


def _rejected_cases() -> list[Case]:
    """Cases upstream's policy rejects: ovkit raises UnsupportedOpError, and its translation still
    reproduces ggml's numbers (checked with the policy bypassed)."""
    fa, _ = _fa(64, 64, 2, 2, 32, 6, True, "f16")
    fa_prog, gdn = fa_program(0.125, mask="m"), _gdn(4, 16, 3, 1, 1)
    return [
        vs("fa-sinks", "flash_attn_ext", {**fa, "s": f(4, lo=-10.0, hi=10.0)},
           program=fa_program(0.125, mask="m", sinks="s"), rejected="sinks"),
        vs("fa-alibi", "flash_attn_ext", fa, program=fa_program(0.125, 8.0, mask="m"), rejected="max_bias"),
        vs("fa-softcap", "flash_attn_ext", fa, program=fa_program(0.125, 0.0, 30.0, mask="m"), rejected="logit_softcap"),
        vs("gated_delta_net-kda", "gated_delta_net", {**gdn, "g": f(16, 4, 3, 1, lo=-20.0, hi=-1e-4)},
           *_gdn_call(), rejected="kda"),
        vs("gated_delta_net-K2", "gated_delta_net", gdn, *_gdn_call(k=2), rejected="K=2"),
        vs("gated_delta_net-permuted-v", "gated_delta_net", {**gdn, "v": f(16, 3, 4, 1, lo=-0.3, hi=5.0)},
           *_gdn_call(P("v", 0, 2, 1, 3)), rejected="permute"),
        vs("swiglu-odd-width", "swiglu", {"a": f(127, 2, 2, **WIDE)}, program=C("glu", "a", SWIGLU, False),
           rejected="odd"),
        vs("sum_rows-permuted", "sum_rows", {"a": f(10, 5, 4, 3)}, P("a", 0, 2, 3, 1), rejected="permute"),
        vs("add-permuted-src1", "add", {"a": f(10, 5, 4, 3), "b": f(5, 4, 10, 3)}, "a", P("b", 1, 2, 0, 3),
           rejected="permute"),
        vs("get_rows-4d", "get_rows", {"a": f(10, 5, 3, 2), "r": ints(4, 3, 2, high=5)}, "a", "r", rejected="ne[3]"),
        vs("concat-i64", "concat", {"a": ints(4, 3, high=9, dtype="i64"), "b": ints(2, 3, high=9, dtype="i64")},
           "a", "b", 0, rejected="i64"),
        vs("mul_mat-both-views", "mul_mat", {"a": f(48, 16), "b": f(48, 8)}, V("a", 32, 16), V("b", 32, 8),
           rejected="view"),
        vs("cpy-f32-bf16", "cpy", {"a": f(10, 4), "d": f(10, 4, dtype="bf16")}, "a", "d", rejected="bf16"),
        # test_set: the nb of b (f32 [6, 5, 4, 3]: 24, 120, 480), not of a: upstream requires a's
        vs("set-foreign-strides", "set", {"a": f(12, 5, 4, 3), "b": f(6, 5, 4, 3)}, "a", "b", 24, 120, 480, 4 * 3,
           rejected="nb"),
        vs("mul_mat_id-one-expert", "mul_mat_id", {"as": f(32, 16, 1), "b": f(32, 1, 5), "ids": ints(1, 5, high=1)},
           "as", "b", "ids", rejected="ne[2]"),
        # flash attention over padding: a query row whose keys are all masked gives 0 in ggml (not NaN)
        vs("fa-fully-masked-rows", "flash_attn_ext", {**fa, "m": leaf_of((32, 32, 1, 1), "f16", Init("padded_mask"))},
           program=fa_prog),
    ]  # fmt: skip


def _model_sized_cases() -> list[Case]:
    """Model-sized shapes (test-backend-ops' larger cases: accumulation over long rows)."""
    fa, fa_prog = _fa(128, 128, 8, 4, 512, 16, True, "f16")
    return [
        vs("soft_max_ext-1024-alibi", "soft_max_ext", {"a": f(1024, 16), "m": f(1024, 16)},
           program=_sm(True, 1.0, 8.0, False)),
        vs("rms_norm-4096", "rms_norm", {"a": f(4096, 8, lo=-10.0, hi=10.0)}, "a", 1e-6),
        vs("norm-4096", "norm", {"a": f(4096, 4)}, "a", 1e-5),
        vs("mul_mat-k4096-f32", "mul_mat", {"a": f(4096, 64), "b": f(4096, 9)}, "a", "b"),
        vs("mul_mat-k4096-q4_K", "mul_mat", {"a": leaf_of((4096, 64), "q4_K"), "b": f(4096, 9)}, "a", "b"),
        vs("gelu-large", "gelu", {"a": f(4096, 16, **WIDE)}, "a"),
        vs("swiglu-large", "swiglu", {"a": f(2 * 2816, 8, **WIDE)}, program=C("glu", "a", SWIGLU, False)),
        vs("rope-neox-llama-shape", "rope_ext", _rope_in((128, 32, 48, 1)), *_rope(128, RopeType.NEOX)),
        vs("rope-normal-llama-shape-yarn", "rope_ext", _rope_in((128, 8, 48, 1)), *_rope(128, RopeType.NORMAL, **_YARN)),
        vs("fa-large-gqa4", "flash_attn_ext", fa, program=fa_prog),
        vs("cumsum-4096", "cumsum", {"a": f(4096, 4)}, "a"),
        vs("argsort-512", "argsort", {"a": leaf_of((512, 8), "f32", Init("distinct"))}, "a", DESC),
    ]  # fmt: skip


def cases() -> list[Case]:
    """The comparison set, in table order."""
    families = (
        _binary_cases, _scalar_cases, _unary_cases, _glu_cases, _layout_cases, _concat_cases, _rows_cases,
        _mul_mat_cases, _quantized_cases, _norm_cases, _soft_max_cases, _flash_attn_cases, _rope_cases,
        _conv_and_recurrent_cases, _rejected_cases, _model_sized_cases, llama_block_cases,
    )  # fmt: skip
    return [c for family in families for c in family()]
