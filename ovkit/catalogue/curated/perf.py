"""The perf set: model-sized cases for ``ovkit test-ops perf`` (time per run, GFLOPS or GB/s)."""

from __future__ import annotations

from dataclasses import replace

from ovkit.catalogue.case import Case, Init
from ovkit.catalogue.curated.build import attention_inputs, binary, case, fa_program, inp, rope_program, unary
from ovkit.ir import Op


def cases() -> list[Case]:
    """Larger cases for ``mode perf`` (time per run, GFLOPS or GB/s)."""
    n_tok, heads, hd, ctx = 32, 8, 64, 512
    emb = heads * hd
    cases = [
        binary("ADD", "add", (512, 4096), (512, 4096)),
        binary("MUL", "mul", (512, 4096), (1, 4096)),
        case("SCALE", [inp("a", (512, 4096))], lambda g, x: g.scale(x["a"], 0.5), "scale", s=0.5),
        unary("SILU", shape=(512, 4096)),
        unary("GELU", shape=(512, 4096)),
        case(Op.SWIGLU, [inp("a", (512, 4096))], lambda g, x: g.swiglu(x["a"]), "swiglu"),
        case(
            "RMS_NORM", [inp("a", (512, 4096))], lambda g, x: g.rms_norm(x["a"], 1e-6), "rms_norm", eps=1e-6
        ),
        case("SOFT_MAX", [inp("a", (512, 4096))], lambda g, x: g.soft_max(x["a"]), "soft_max"),
        replace(
            case(
                "GET_ROWS",
                [inp("a", (32000, 256)), inp("rows", (512,), "i32", Init("rows", n=32000))],
                lambda g, x: g.get_rows(x["a"], x["rows"]),
                "get_rows",
            ),
            nbytes=2 * 512 * 256 * 4 + 512 * 4,  # rows read + written, and the indices
        ),
        case(
            "CPY",
            [inp("a", (512, 4096)), inp("b", (512, 4096), "f16")],
            lambda g, x: g.cpy(x["a"], x["b"]),
            "cpy",
        ),
        case(
            "ROPE",
            [inp("a", (n_tok, heads, hd)), inp("pos", (n_tok,), "i32", Init("pos"))],
            rope_program(2, hd),
            "rope_ext",
            n_dims=hd,
            mode=2,
        ),
    ]
    for m, k, n in ((4096, 4096, 1), (4096, 4096, 32), (512, 512, 512), (4096, 4096, 512)):
        cases.append(
            case(
                "MUL_MAT",
                [inp("a", (m, k)), inp("b", (n, k))],
                lambda g, x: g.mul_mat(x["a"], x["b"]),
                "mul_mat",
                2 * m * k * n,
            )
        )
    for qtype in ("q4_0", "q8_0", "q4_K"):
        cases.append(
            case(
                "MUL_MAT",
                [inp("a", (4096, 4096), qtype), inp("b", (32, 4096))],
                lambda g, x: g.mul_mat(x["a"], x["b"]),
                "mul_mat",
                2 * 4096 * 4096 * 32,
            )
        )
    cases.append(
        case(
            "MUL_MAT",
            [inp("a", (4096, 4096), "f16"), inp("b", (32, 4096))],
            lambda g, x: g.mul_mat(x["a"], x["b"]),
            "mul_mat",
            2 * 4096 * 4096 * 32,
        )
    )
    for n_q in (1, n_tok):
        cases.append(
            case(
                "FLASH_ATTN_EXT",
                attention_inputs(n_q, ctx, heads, heads, hd),
                fa_program(1 / hd**0.5),
                "flash_attn_ext",
                4 * heads * n_q * ctx * hd,
                emb=emb,
            )
        )
    return cases
