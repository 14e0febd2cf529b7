"""The perf set: model-sized cases for ``ovkit test-ops perf`` (time per run, GFLOPS or GB/s)."""

from __future__ import annotations

from dataclasses import replace

from ovkit.catalogue.case import Case, Init
from ovkit.catalogue.curated.build import attention_inputs, case, f, fa_program, ints, leaf_of, rope_args


def cases() -> list[Case]:
    """Larger cases for ``mode perf`` (time per run, GFLOPS or GB/s)."""
    n_tok, heads, hd, ctx = 32, 8, 64, 512
    big = {"a": f(4096, 512)}
    cases = [
        case("add", {"a": f(4096, 512), "b": f(4096, 512)}, "a", "b"),
        case("mul", {"a": f(4096, 512), "b": f(4096, 1)}, "a", "b"),
        case("scale", big, "a", 0.5, s=0.5),
        case("silu", big, "a"),
        case("gelu", big, "a"),
        case("swiglu", big, "a"),
        case("rms_norm", big, "a", 1e-6, eps=1e-6),
        case("soft_max", big, "a"),
        replace(
            case("get_rows", {"a": f(256, 32000), "rows": ints(512, high=32000)}, "a", "rows"),
            nbytes=2 * 512 * 256 * 4 + 512 * 4,  # rows read + written, and the indices
        ),
        case("cpy", {"a": f(4096, 512), "b": f(4096, 512, dtype="f16")}, "a", "b"),
        case("rope_ext", {"a": f(hd, heads, n_tok), "pos": leaf_of((n_tok,), "i32", Init("pos"))},
             *("a", "pos", None, *rope_args(hd, 2)), n_dims=hd, mode=2),
    ]  # fmt: skip
    for m, k, n in ((4096, 4096, 1), (4096, 4096, 32), (512, 512, 512), (4096, 4096, 512)):
        cases.append(case("mul_mat", {"a": f(k, m), "b": f(k, n)}, "a", "b", flops=2 * m * k * n))
    for qtype in ("q4_0", "q8_0", "q4_K", "f16"):
        leaves = {"a": f(4096, 4096, dtype=qtype), "b": f(4096, 32)}
        cases.append(case("mul_mat", leaves, "a", "b", flops=2 * 4096 * 4096 * 32))
    for n_q in (1, n_tok):
        flops = 4 * heads * n_q * ctx * hd
        fa = attention_inputs(n_q, ctx, heads, heads, hd)
        cases.append(case("flash_attn_ext", fa, program=fa_program(1 / hd**0.5), flops=flops, emb=heads * hd))
    return cases
