"""``ovkit test-ops``' own set: small cases, one or a few per op and parameter, grouped by op
(the order it prints them in).  Leaves by ggml ``ne`` (innermost first); a registered unary or
GLU sub-op gets its case from the op table."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ovkit.catalogue.case import POSITIVE, Case, Init
from ovkit.catalogue.curated.build import (
    C,
    P,
    attention_inputs,
    case,
    f,
    fa_program,
    ints,
    leaf_of,
    rope_args,
    sub_op_cases,
)

POS5 = leaf_of((5,), "i32", Init("pos"))
POS20 = leaf_of((20,), "i32", Init("pos"))


def _sinks_softmax(g: Any, x: Mapping[str, Any]) -> Any:
    sm = g.soft_max_ext(x["a"], x["mask"], 1.0, 0.0)
    g.soft_max_add_sinks(sm, x["sinks"])
    return sm


def _elementwise_cases() -> list[Case]:
    """Binary, scalar, unary and GLU ops."""
    cases: list[Case] = []
    for b in ("add", "sub", "mul", "div"):
        b_init = POSITIVE if b == "div" else None
        cases.append(case(b, {"a": f(10, 3, 4), "b": f(10, 3, 4, init=b_init)}, "a", "b"))
        cases.append(case(b, {"a": f(10, 5, 3, 2), "b": f(10, 1, 1, 1, init=b_init)}, "a", "b"))
    for dt in ("f16", "bf16"):
        cases.append(case("add", {"a": f(10, 3, dtype=dt), "b": f(10, 3, dtype=dt)}, "a", "b"))
    cases += [
        case("add1", {"a": f(10, 3), "b": f(1)}, "a", "b"),
        case("add_id", {"a": f(16, 2, 4), "b": f(16, 3), "ids": ints(2, 4, high=3)}, "a", "b", "ids"),
        case("scale", {"a": f(10, 10)}, "a", 0.5, s=0.5),
        case("scale_bias", {"a": f(10, 10)}, "a", 2.0, 0.25, s=2.0, b=0.25),
        case("sqr", {"a": f(10, 10)}, "a"),
        case("sqrt", {"a": f(10, 10, init=POSITIVE)}, "a"),
        case("clamp", {"a": f(10, 10)}, "a", -0.5, 0.5, min=-0.5, max=0.5),
        case("fill", {"a": f(10, 4)}, "a", 1.5, c=1.5),
        *sub_op_cases(unary={"a": f(128, 5)}, glu={"a": f(32, 4)}),
        case("exp", {"a": f(128, 5, dtype="f16")}, "a"),  # upstream rejects EXP with an f32 output
        case("silu", {"a": f(128, 5, dtype="f16")}, "a"),
        case("swiglu_swapped", {"a": f(32, 4)}, "a", swapped=1),
        case("swiglu", {"a": f(33, 4)}, "a"),  # odd ne0
        case("swiglu_split", {"a": f(16, 4), "b": f(16, 4)}, "a", "b", split=1),
        case("swiglu_oai", {"a": f(16, 4), "b": f(16, 4)}, "a", "b", 1.702, 7.0, alpha=1.702, limit=7.0),
        case("cont", {"a": f(8, 5, 3)}, P("a", 1, 0, 2, 3), perm=(1, 0, 2, 3)),
    ]
    return cases


def _layout_cases() -> list[Case]:
    """Layout, rows, concatenation and matmul ops."""
    rows = ints(5, high=10)
    cases = [
        case("cont", {"a": f(8, 6)}, C("transpose", "a"), op="TRANSPOSE"),
        case("cont", {"a": f(8, 5, 3, dtype="bf16")}, P("a", 1, 0, 2, 3), op="PERMUTE", perm=(1, 0, 2, 3)),
        case("scale", {"a": f(8, 6)}, C("reshape_2d", "a", 16, 3), 1.0, op="RESHAPE"),
        case("cont", {"a": f(8, 6)}, C("view_2d", "a", 4, 6, 32, 8), op="VIEW",
             view="ne=[4,6],nb1=32,offs=8"),
        case("cpy", {"a": f(10, 4), "b": f(10, 4, dtype="f16")}, "a", "b"),
        case("concat", {"a": f(10, 4), "b": f(6, 4)}, "a", "b", 0, dim=0),
        case("concat", {"a": f(10, 4), "b": f(10, 3)}, "a", "b", 1, dim=1),
        case("repeat", {"a": f(10, 1), "b": f(10, 4)}, "a", "b"),
        case("pad", {"a": f(10, 4)}, "a", 1, 2, 0, 0, pad=(1, 2, 0, 0)),
        case("get_rows", {"a": f(16, 10), "rows": rows}, "a", "rows"),
        case("get_rows", {"a": f(16, 10, dtype="f16"), "rows": rows}, "a", "rows"),
        case("set_rows",
             {"dst": f(16, 10), "src": f(16, 3), "idx": leaf_of((3,), "i64", Init("set_rows", n=10))},
             "dst", "src", "idx"),
        case("set_2d", {"a": f(8, 6), "b": f(8, 2)}, "a", "b", 32, 64, nb1=32, offset=64),
        case("mul_mat", {"a": f(64, 32), "b": f(64, 8)}, "a", "b", flops=2 * 32 * 64 * 8),
        case("mul_mat", {"a": f(64, 32, dtype="f16"), "b": f(64, 8)}, "a", "b", flops=2 * 32 * 64 * 8),
        case("mul_mat", {"a": f(32, 16, 2), "b": f(32, 5, 4)}, "a", "b",
             flops=2 * 4 * 16 * 32 * 5, bcast="gqa"),
    ]  # fmt: skip
    for qtype in ("q4_0", "q4_1", "q5_1", "q8_0", "q4_K", "q5_K", "q6_K", "mxfp4"):
        cases.append(
            case("mul_mat", {"a": f(256, 16, dtype=qtype), "b": f(256, 4)}, "a", "b", flops=2 * 16 * 256 * 4)
        )
    for qtype in ("q4_0", "q8_0", "q4_K"):  # q4_K rows of 256 hit upstream's get_rows gate
        cases.append(case("get_rows", {"a": f(256, 10, dtype=qtype), "rows": rows}, "a", "rows"))
    cases.append(
        case("mul_mat_id", {"as": f(32, 16, 4), "b": f(32, 2, 3), "ids": ints(2, 3, high=4)}, "as", "b",
             "ids", flops=2 * 3 * 2 * 16 * 32)
    )  # fmt: skip
    return cases


def _reduction_cases() -> list[Case]:
    """Norms, reductions, sorting, softmax, rope, attention and the rest."""
    cases = [case(b, {"a": f(64, 4)}, "a", 1e-6, eps=1e-6) for b in ("norm", "rms_norm", "l2_norm")]
    cases += [
        case("sum_rows", {"a": f(10, 3, 4)}, "a"),
        case("cumsum", {"a": f(10, 4)}, "a"),
        *(case("argsort", {"a": f(16, 4, init=Init("distinct"))}, "a", o, order=o) for o in (0, 1)),
        case("soft_max", {"a": f(32, 4)}, "a"),
    ]
    for ne_a, ne_m, scale, max_bias in (((32, 4), (32, 4), 0.5, 0.0), ((32, 3, 4), (32, 3), 1.0, 8.0)):
        leaves = {"a": f(*ne_a), "mask": f(*ne_m, lo=-1.0, hi=0.0)}
        cases.append(
            case("soft_max_ext", leaves, "a", "mask", scale, max_bias, scale=scale, max_bias=max_bias)
        )
    for dtype, mode, n_dims in (("f32", 0, 64), ("f32", 2, 64), ("f16", 2, 64), ("f32", 2, 33)):
        leaves = {"a": f(64, 4, 5, dtype=dtype), "pos": POS5}
        cases.append(
            case("rope_ext", leaves, "a", "pos", None, *rope_args(n_dims, mode), n_dims=n_dims, mode=mode)
        )
    for heads, kv_heads in ((4, 4), (4, 2)):
        flops = 4 * heads * 5 * 32 * 64
        cases.append(
            case("flash_attn_ext", attention_inputs(5, 32, heads, kv_heads, 64), program=fa_program(0.125),
                 flops=flops, scale=0.125)
        )  # fmt: skip
    fa = attention_inputs(5, 32, 4, 4, 64)
    cases += [
        case("flash_attn_ext", fa, program=fa_program(0.125, max_bias=8.0), scale=0.125, max_bias=8.0),
        case("im2col", {"kernel": f(3, 3, 3, 2, dtype="f16"), "img": f(8, 8, 3, 1)},
             *("kernel", "img", 1, 1, 1, 1, 1, 1, True, "f32"), s=1, p=1, d=1),
        case("ssm_conv", {"sx": f(8, 16, 1), "c": f(4, 16)}, "sx", "c"),
        case("gated_delta_net", {"q": f(16, 2, 4, lo=-0.25, hi=0.25), "k": f(16, 2, 4, lo=-0.25, hi=0.25),
                                 "v": f(16, 2, 4), "g": f(1, 2, 4, lo=-1.0, hi=0.0),
                                 "beta": f(1, 2, 4, lo=0.0, hi=1.0), "state": f(16, 16, 2, lo=-0.5, hi=0.5)},
             *("q", "k", "v", "g", "beta", "state", 1)),
        *_variety_cases(),
        case("diag", {"a": f(8, 1)}, "a"),
        *(case("tri", {"a": f(8, 8)}, "a", t, tri_type=t) for t in range(4)),
    ]  # fmt: skip
    return cases


def _variety_cases() -> list[Case]:
    """More parameter variety (as test-backend-ops has): layouts, types, rope and attention
    variants — several of them rejected by upstream's policy, so the listing shows why."""
    fa = attention_inputs(5, 32, 4, 4, 64)
    return [
        case("add", {"a": f(10, 3), "b": f(3, 10)}, "a", P("b", 1, 0, 2, 3), b="permuted"),
        case("mul_mat", {"a": f(32, 16, 2), "b": f(32, 2, 5)}, *("a", P("b", 0, 2, 1, 3)),
             flops=2 * 2 * 16 * 32 * 5, per=(0, 2, 1, 3)),
        case("cpy", {"a": f(10, 4, dtype="f16"), "b": f(10, 4)}, "a", "b", src="f16", dst="f32"),
        case("cpy", {"a": f(10, 4), "b": f(10, 4, dtype="bf16")}, "a", "b"),
        case("concat", {"a": f(10, 4, 2, dtype="f16"), "b": f(10, 4, 3, dtype="f16")}, "a", "b", 2, dim=2),
        case("clamp", {"a": f(10, 10, dtype="f16")}, "a", -0.5, 0.5),
        case("gelu", {"a": f(128, 5, dtype="f16")}, "a"),
        case("sum_rows", {"a": f(4, 10)}, P("a", 1, 0, 2, 3), a="permuted"),
        case("pad_ext", {"a": f(10, 4, 3)}, "a", 1, 2, 0, 1, 2, 0, 0, 0, pads=(1, 2, 0, 1, 2, 0, 0, 0)),
        case("get_rows", {"a": f(16, 10, 1, 2), "rows": ints(5, 1, 2, high=10)}, "a", "rows"),
        case("set_rows", {"dst": f(16, 10, dtype="f16"), "src": f(16, 3),
                          "idx": leaf_of((3,), "i32", Init("set_rows", n=10))}, "dst", "src", "idx"),
        case("mul_mat_id", {"as": f(32, 16, 1), "b": f(32, 1, 3), "ids": ints(1, 3, high=1)},
             *("as", "b", "ids"), experts=1),
        case("soft_max_ext",
             {"a": f(32, 3, 4), "mask": f(32, 3, dtype="f16", lo=-1.0, hi=0.0), "sinks": f(4)},
             program=_sinks_softmax, sinks=1),
        case("rope_ext", {"a": f(64, 4, 5), "pos": POS5}, *("a", "pos", None, *rope_args(32, 2)),
             n_dims=32, mode=2),
        case("rope_ext", {"a": f(64, 4, 5), "pos": POS5, "ff": f(32, init=POSITIVE)},
             *("a", "pos", "ff", *rope_args(64, 0, fs=0.5, ef=1.0, n_ctx_orig=4096)), n_dims=64, mode=0,
             freq_factors=1, yarn="ext_factor=1,freq_scale=0.5"),
        *(
            case("rope_multi", {"a": f(64, 4, 5), "pos": POS20},
                 *("a", "pos", None, 64, [8, 12, 12, 0], *rope_args(64, mode)[1:]), n_dims=64, mode=mode,
                 sections=(8, 12, 12, 0))
            for mode in (40, 8)
        ),
        case("flash_attn_ext", fa, program=fa_program(0.125, softcap=30.0), scale=0.125, logit_softcap=30.0),
        case("flash_attn_ext", {**fa, "sinks": f(4)}, program=fa_program(0.125, sinks="sinks"),
             scale=0.125, sinks=1),
        case("im2col", {"kernel": f(3, 3, 2, dtype="f16"), "img": f(16, 3, 1)},
             *("kernel", "img", 1, 0, 1, 0, 1, 0, False, "f32"), is_2D=0),
    ]  # fmt: skip


def cases() -> list[Case]:
    """``ovkit test-ops``' own set, grouped by op (the order it prints them in)."""
    return [*_elementwise_cases(), *_layout_cases(), *_reduction_cases()]
