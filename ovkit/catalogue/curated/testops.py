"""``ovkit test-ops``' own set: small cases, one or a few per op and parameter, grouped by op
(the order it prints them in).  Shapes are numpy's (outermost first)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ovkit.catalogue.case import POSITIVE, Case, Init
from ovkit.catalogue.curated.build import (
    attention_inputs,
    binary,
    call,
    case,
    fa_program,
    inp,
    rope_program,
    unary,
)
from ovkit.ir import Op


def _sinks_softmax(g: Any, x: Mapping[str, Any]) -> Any:
    sm = g.soft_max_ext(x["a"], x["mask"], 1.0, 0.0)
    g.soft_max_add_sinks(sm, x["sinks"])
    return sm


def _sinks_fa(g: Any, x: Mapping[str, Any]) -> Any:
    fa = fa_program(0.125)(g, x)
    g.flash_attn_ext_add_sinks(fa, x["sinks"])
    return fa


def _variety_cases() -> list[Case]:
    """More parameter variety (as test-backend-ops has): layouts, types, rope and attention
    variants — several of them rejected by upstream's policy, so the listing shows why."""
    pos = inp("pos", (5,), "i32", Init("pos"))
    rope_args = (0, 10000.0, 1.0, 0.0, 1.0, 32.0, 1.0)
    return [
        case(
            "ADD",
            [inp("a", (3, 10)), inp("b", (10, 3))],
            lambda g, x: g.add(x["a"], g.permute(x["b"], 1, 0, 2, 3)),
            "add",
            b="permuted",
        ),
        case(
            "MUL_MAT",
            [inp("a", (2, 16, 32)), inp("b", (5, 2, 32))],
            lambda g, x: g.mul_mat(x["a"], g.permute(x["b"], 0, 2, 1, 3)),
            "mul_mat",
            2 * 2 * 16 * 32 * 5,
            per=(0, 2, 1, 3),
        ),
        case(
            "CPY",
            [inp("a", (4, 10), "f16"), inp("b", (4, 10))],
            lambda g, x: g.cpy(x["a"], x["b"]),
            "cpy",
            src="f16",
            dst="f32",
        ),
        case(
            "CPY", [inp("a", (4, 10)), inp("b", (4, 10), "bf16")], lambda g, x: g.cpy(x["a"], x["b"]), "cpy"
        ),
        case(
            "CONCAT",
            [inp("a", (2, 4, 10), "f16"), inp("b", (3, 4, 10), "f16")],
            call("concat", ["a", "b"], 2),
            "concat",
            dim=2,
        ),
        case("CLAMP", [inp("a", (10, 10), "f16")], lambda g, x: g.clamp(x["a"], -0.5, 0.5), "clamp"),
        case(Op.GELU, [inp("a", (5, 128), "f16")], lambda g, x: g.gelu(x["a"]), "gelu"),
        case(
            "SUM_ROWS",
            [inp("a", (10, 4))],
            lambda g, x: g.sum_rows(g.permute(x["a"], 1, 0, 2, 3)),
            "sum_rows",
            a="permuted",
        ),
        case(
            "PAD",
            [inp("a", (3, 4, 10))],
            lambda g, x: g.pad_ext(x["a"], 1, 2, 0, 1, 2, 0, 0, 0),
            "pad_ext",
            pads=(1, 2, 0, 1, 2, 0, 0, 0),
        ),
        case(
            "GET_ROWS",
            [inp("a", (2, 1, 10, 16)), inp("rows", (2, 1, 5), "i32", Init("rows", n=10))],
            lambda g, x: g.get_rows(x["a"], x["rows"]),
            "get_rows",
        ),
        case(
            "SET_ROWS",
            [
                inp("dst", (10, 16), "f16"),
                inp("src", (3, 16)),
                inp("idx", (3,), "i32", Init("set_rows", n=10)),
            ],
            lambda g, x: g.set_rows(x["dst"], x["src"], x["idx"]),
            "set_rows",
        ),
        case(
            "MUL_MAT_ID",
            [inp("as", (1, 16, 32)), inp("b", (3, 1, 32)), inp("ids", (3, 1), "i32", Init("rows", n=1))],
            lambda g, x: g.mul_mat_id(x["as"], x["b"], x["ids"]),
            "mul_mat_id",
            experts=1,
        ),
        case(
            "SOFT_MAX",
            [inp("a", (4, 3, 32)), inp("mask", (3, 32), "f16", Init(lo=-1.0, hi=0.0)), inp("sinks", (4,))],
            _sinks_softmax,
            "soft_max_ext",
            sinks=1,
        ),
        case(
            "ROPE",
            [inp("a", (5, 4, 64)), pos],
            lambda g, x: g.rope_ext(x["a"], x["pos"], None, 32, 2, *rope_args),
            "rope_ext",
            n_dims=32,
            mode=2,
        ),
        case(
            "ROPE",
            [inp("a", (5, 4, 64)), pos, inp("ff", (32,), init=POSITIVE)],
            lambda g, x: g.rope_ext(
                x["a"], x["pos"], x["ff"], 64, 0, 4096, 10000.0, 0.5, 1.0, 1.0, 32.0, 1.0
            ),
            "rope_ext",
            n_dims=64,
            mode=0,
            freq_factors=1,
            yarn="ext_factor=1,freq_scale=0.5",
        ),
        case(
            "ROPE",
            [inp("a", (5, 4, 64)), inp("pos", (20,), "i32", Init("pos"))],
            lambda g, x: g.rope_multi(x["a"], x["pos"], None, 64, [8, 12, 12, 0], 40, *rope_args),
            "rope_multi",
            n_dims=64,
            mode=40,
            sections=(8, 12, 12, 0),
        ),
        case(
            "ROPE",
            [inp("a", (5, 4, 64)), inp("pos", (20,), "i32", Init("pos"))],
            lambda g, x: g.rope_multi(x["a"], x["pos"], None, 64, [8, 12, 12, 0], 8, *rope_args),
            "rope_multi",
            n_dims=64,
            mode=8,
            sections=(8, 12, 12, 0),
        ),
        case(
            "FLASH_ATTN_EXT",
            attention_inputs(5, 32, 4, 4, 64),
            fa_program(0.125, softcap=30.0),
            "flash_attn_ext",
            scale=0.125,
            logit_softcap=30.0,
        ),
        case(
            "FLASH_ATTN_EXT",
            [*attention_inputs(5, 32, 4, 4, 64), inp("sinks", (4,))],
            _sinks_fa,
            "flash_attn_ext",
            scale=0.125,
            sinks=1,
        ),
        case(
            "IM2COL",
            [inp("kernel", (2, 3, 3), "f16"), inp("img", (1, 3, 16))],
            lambda g, x: g.im2col(x["kernel"], x["img"], 1, 0, 1, 0, 1, 0, False, "f32"),
            "im2col",
            is_2D=0,
        ),
    ]


def _elementwise_cases() -> list[Case]:
    """Binary, scalar, unary and GLU ops."""
    cases: list[Case] = []
    for op, b in (("ADD", "add"), ("SUB", "sub"), ("MUL", "mul"), ("DIV", "div")):
        cases.append(binary(op, b, (4, 3, 10), (4, 3, 10)))
        cases.append(binary(op, b, (2, 3, 5, 10), (1, 1, 1, 10)))
    cases.append(binary("ADD", "add", (3, 10), (3, 10), "f16"))
    cases.append(binary("ADD", "add", (3, 10), (3, 10), "bf16"))
    cases.append(
        case("ADD1", [inp("a", (3, 10)), inp("b", (1,))], lambda g, x: g.add1(x["a"], x["b"]), "add1")
    )
    cases.append(
        case(
            "ADD_ID",
            [inp("a", (4, 2, 16)), inp("b", (3, 16)), inp("ids", (4, 2), "i32", Init("rows", n=3))],
            lambda g, x: g.add_id(x["a"], x["b"], x["ids"]),
            "add_id",
        )
    )
    cases.append(case("SCALE", [inp("a", (10, 10))], lambda g, x: g.scale(x["a"], 0.5), "scale", s=0.5))
    cases.append(
        case(
            "SCALE",
            [inp("a", (10, 10))],
            lambda g, x: g.scale_bias(x["a"], 2.0, 0.25),
            "scale_bias",
            s=2.0,
            b=0.25,
        )
    )
    cases.append(case("SQR", [inp("a", (10, 10))], lambda g, x: g.sqr(x["a"]), "sqr"))
    cases.append(case("SQRT", [inp("a", (10, 10), init=POSITIVE)], lambda g, x: g.sqrt(x["a"]), "sqrt"))
    cases.append(
        case(
            "CLAMP", [inp("a", (10, 10))], lambda g, x: g.clamp(x["a"], -0.5, 0.5), "clamp", min=-0.5, max=0.5
        )
    )
    cases.append(case("FILL", [inp("a", (4, 10))], lambda g, x: g.fill(x["a"], 1.5), "fill", c=1.5))
    for sub in ("GELU", "SIGMOID", "SILU", "SOFTPLUS", "TANH", "NEG"):
        cases.append(unary(sub))
    cases.append(unary("EXP", "f32"))  # upstream rejects EXP with an f32 output
    cases.append(unary("EXP", "f16"))
    cases.append(unary("SILU", "f16"))
    cases.append(case(Op.SWIGLU, [inp("a", (4, 32))], lambda g, x: g.swiglu(x["a"]), "swiglu"))
    cases.append(
        case(
            Op.SWIGLU,
            [inp("a", (4, 32))],
            lambda g, x: g.swiglu_swapped(x["a"]),
            "swiglu_swapped",
            swapped=1,
        )
    )
    cases.append(case(Op.SWIGLU, [inp("a", (4, 33))], lambda g, x: g.swiglu(x["a"]), "swiglu"))  # odd ne0
    cases.append(
        case(
            Op.SWIGLU,
            [inp("a", (4, 16)), inp("b", (4, 16))],
            lambda g, x: g.swiglu_split(x["a"], x["b"]),
            "swiglu_split",
            split=1,
        )
    )
    cases.append(case(Op.GEGLU, [inp("a", (4, 32))], lambda g, x: g.geglu(x["a"]), "geglu"))
    cases.append(
        case(
            Op.SWIGLU_OAI,
            [inp("a", (4, 16)), inp("b", (4, 16))],
            lambda g, x: g.swiglu_oai(x["a"], x["b"], 1.702, 7.0),
            "swiglu_oai",
            alpha=1.702,
            limit=7.0,
        )
    )
    cases.append(
        case(
            "CONT",
            [inp("a", (3, 5, 8))],
            lambda g, x: g.cont(g.permute(x["a"], 1, 0, 2, 3)),
            "cont",
            perm=(1, 0, 2, 3),
        )
    )
    return cases


def _layout_cases() -> list[Case]:
    """Layout, rows, concatenation and matmul ops."""
    cases: list[Case] = []
    cases.append(case("TRANSPOSE", [inp("a", (6, 8))], lambda g, x: g.cont(g.transpose(x["a"])), "cont"))
    cases.append(
        case(
            "PERMUTE",
            [inp("a", (3, 5, 8), "bf16")],
            lambda g, x: g.cont(g.permute(x["a"], 1, 0, 2, 3)),
            "cont",
            perm=(1, 0, 2, 3),
        )
    )
    cases.append(
        case("RESHAPE", [inp("a", (6, 8))], lambda g, x: g.scale(g.reshape_2d(x["a"], 16, 3), 1.0), "scale")
    )
    cases.append(
        case(
            "VIEW",
            [inp("a", (6, 8))],
            lambda g, x: g.cont(g.view_2d(x["a"], 4, 6, 32, 8)),
            "cont",
            view="ne=[4,6],nb1=32,offs=8",
        )
    )
    cases.append(
        case("CPY", [inp("a", (4, 10)), inp("b", (4, 10), "f16")], lambda g, x: g.cpy(x["a"], x["b"]), "cpy")
    )
    for dim in (0, 1):
        sb = (4, 6) if dim == 0 else (3, 10)
        cases.append(
            case(
                "CONCAT",
                [inp("a", (4, 10)), inp("b", sb)],
                call("concat", ["a", "b"], dim),
                "concat",
                dim=dim,
            )
        )
    cases.append(
        case(
            "REPEAT", [inp("a", (1, 10)), inp("b", (4, 10))], lambda g, x: g.repeat(x["a"], x["b"]), "repeat"
        )
    )
    cases.append(
        case("PAD", [inp("a", (4, 10))], lambda g, x: g.pad(x["a"], 1, 2, 0, 0), "pad", pad=(1, 2, 0, 0))
    )
    cases.append(
        case(
            "GET_ROWS",
            [inp("a", (10, 16)), inp("rows", (5,), "i32", Init("rows", n=10))],
            lambda g, x: g.get_rows(x["a"], x["rows"]),
            "get_rows",
        )
    )
    cases.append(
        case(
            "GET_ROWS",
            [inp("a", (10, 16), "f16"), inp("rows", (5,), "i32", Init("rows", n=10))],
            lambda g, x: g.get_rows(x["a"], x["rows"]),
            "get_rows",
        )
    )
    cases.append(
        case(
            "SET_ROWS",
            [inp("dst", (10, 16)), inp("src", (3, 16)), inp("idx", (3,), "i64", Init("set_rows", n=10))],
            lambda g, x: g.set_rows(x["dst"], x["src"], x["idx"]),
            "set_rows",
        )
    )
    cases.append(
        case(
            "SET",
            [inp("a", (6, 8)), inp("b", (2, 8))],
            lambda g, x: g.set_2d(x["a"], x["b"], 32, 64),
            "set_2d",
            nb1=32,
            offset=64,
        )
    )
    cases.append(
        case(
            "MUL_MAT",
            [inp("a", (32, 64)), inp("b", (8, 64))],
            lambda g, x: g.mul_mat(x["a"], x["b"]),
            "mul_mat",
            2 * 32 * 64 * 8,
        )
    )
    cases.append(
        case(
            "MUL_MAT",
            [inp("a", (32, 64), "f16"), inp("b", (8, 64))],
            lambda g, x: g.mul_mat(x["a"], x["b"]),
            "mul_mat",
            2 * 32 * 64 * 8,
        )
    )
    cases.append(
        case(
            "MUL_MAT",
            [inp("a", (2, 16, 32)), inp("b", (4, 5, 32))],
            lambda g, x: g.mul_mat(x["a"], x["b"]),
            "mul_mat",
            2 * 4 * 16 * 32 * 5,
            bcast="gqa",
        )
    )
    for qtype in ("q4_0", "q4_1", "q5_1", "q8_0", "q4_K", "q5_K", "q6_K", "mxfp4"):
        cases.append(
            case(
                "MUL_MAT",
                [inp("a", (16, 256), qtype), inp("b", (4, 256))],
                lambda g, x: g.mul_mat(x["a"], x["b"]),
                "mul_mat",
                2 * 16 * 256 * 4,
            )
        )
    for qtype in ("q4_0", "q8_0", "q4_K"):  # q4_K rows of 256 hit upstream's get_rows gate
        cases.append(
            case(
                "GET_ROWS",
                [inp("a", (10, 256), qtype), inp("rows", (5,), "i32", Init("rows", n=10))],
                lambda g, x: g.get_rows(x["a"], x["rows"]),
                "get_rows",
            )
        )
    cases.append(
        case(
            "MUL_MAT_ID",
            [inp("as", (4, 16, 32)), inp("b", (3, 2, 32)), inp("ids", (3, 2), "i32", Init("rows", n=4))],
            lambda g, x: g.mul_mat_id(x["as"], x["b"], x["ids"]),
            "mul_mat_id",
            2 * 3 * 2 * 16 * 32,
        )
    )
    return cases


def _reduction_cases() -> list[Case]:
    """Norms, reductions, sorting, softmax, rope, attention and the rest."""
    cases: list[Case] = []
    for op, b in (("NORM", "norm"), ("RMS_NORM", "rms_norm"), ("L2_NORM", "l2_norm")):
        cases.append(case(op, [inp("a", (4, 64))], call(b, ["a"], 1e-6), b, eps=1e-6))
    cases.append(case("SUM_ROWS", [inp("a", (4, 3, 10))], lambda g, x: g.sum_rows(x["a"]), "sum_rows"))
    cases.append(case("CUMSUM", [inp("a", (4, 10))], lambda g, x: g.cumsum(x["a"]), "cumsum"))
    for order in (0, 1):
        cases.append(
            case(
                "ARGSORT",
                [inp("a", (4, 16), init=Init("distinct"))],
                call("argsort", ["a"], order),
                "argsort",
                order=order,
            )
        )
    cases.append(case("SOFT_MAX", [inp("a", (4, 32))], lambda g, x: g.soft_max(x["a"]), "soft_max"))
    for a_shape, mask_shape, scale, max_bias in (
        ((4, 32), (4, 32), 0.5, 0.0),
        ((4, 3, 32), (3, 32), 1.0, 8.0),
    ):
        cases.append(
            case(
                "SOFT_MAX",
                [inp("a", a_shape), inp("mask", mask_shape, "f32", Init(lo=-1.0, hi=0.0))],
                call("soft_max_ext", ["a", "mask"], scale, max_bias),
                "soft_max_ext",
                scale=scale,
                max_bias=max_bias,
            )
        )
    for dtype, mode, n_dims in (("f32", 0, 64), ("f32", 2, 64), ("f16", 2, 64), ("f32", 2, 33)):
        cases.append(
            case(
                "ROPE",
                [inp("a", (5, 4, 64), dtype), inp("pos", (5,), "i32", Init("pos"))],
                rope_program(mode, n_dims),
                "rope_ext",
                n_dims=n_dims,
                mode=mode,
            )
        )
    for heads, kv_heads in ((4, 4), (4, 2)):
        cases.append(
            case(
                "FLASH_ATTN_EXT",
                attention_inputs(5, 32, heads, kv_heads, 64),
                fa_program(0.125),
                "flash_attn_ext",
                4 * heads * 5 * 32 * 64,
                scale=0.125,
            )
        )
    cases.append(
        case(
            "FLASH_ATTN_EXT",
            attention_inputs(5, 32, 4, 4, 64),
            fa_program(0.125, max_bias=8.0),
            "flash_attn_ext",
            scale=0.125,
            max_bias=8.0,
        )
    )
    cases.append(
        case(
            "IM2COL",
            [inp("kernel", (2, 3, 3, 3), "f16"), inp("img", (1, 3, 8, 8))],
            lambda g, x: g.im2col(x["kernel"], x["img"], 1, 1, 1, 1, 1, 1, True, "f32"),
            "im2col",
            s=1,
            p=1,
            d=1,
        )
    )
    cases.append(
        case(
            "SSM_CONV",
            [inp("sx", (1, 16, 8)), inp("c", (16, 4))],
            lambda g, x: g.ssm_conv(x["sx"], x["c"]),
            "ssm_conv",
        )
    )
    cases.append(
        case(
            "GATED_DELTA_NET",
            [
                inp("q", (4, 2, 16), init=Init(lo=-0.25, hi=0.25)),
                inp("k", (4, 2, 16), init=Init(lo=-0.25, hi=0.25)),
                inp("v", (4, 2, 16)),
                inp("g", (4, 2, 1), init=Init(lo=-1.0, hi=0.0)),
                inp("beta", (4, 2, 1), init=Init(lo=0.0, hi=1.0)),
                inp("state", (2, 16, 16), init=Init(lo=-0.5, hi=0.5)),
            ],
            call("gated_delta_net", ["q", "k", "v", "g", "beta", "state"], 1),
            "gated_delta_net",
        )
    )
    cases.extend(_variety_cases())
    cases.append(case("DIAG", [inp("a", (1, 8))], lambda g, x: g.diag(x["a"]), "diag"))
    for tri in range(4):
        cases.append(case("TRI", [inp("a", (8, 8))], call("tri", ["a"], tri), "tri", tri_type=tri))
    return cases


def cases() -> list[Case]:
    """``ovkit test-ops``' own set, grouped by op (the order it prints them in)."""
    return [*_elementwise_cases(), *_layout_cases(), *_reduction_cases()]
