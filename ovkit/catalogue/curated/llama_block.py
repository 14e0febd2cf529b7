"""The whole-block cases of the comparison set: a llama-style decoder layer over an f16 KV cache, as
llama.cpp builds it (RMS norm, rope, flash attention over the cache, SwiGLU feed-forward), run as
one graph against ggml."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ovkit.catalogue.case import Case, Init, Leaf, Program
from ovkit.catalogue.curated.build import f, leaf_of, vs
from ovkit.ir import RopeType

# --- whole-block chains: a llama-style layer over an f16 KV cache (as llama.cpp builds it) -----


def block(n_tok: int, ctx: int = 32, d: int = 64, heads: int = 4, kv_heads: int = 2,
          ff: int = 96, wtype: str = "f32") -> tuple[dict[str, Leaf], Program]:  # fmt: skip
    hd, kv_dim = d // heads, d // heads * kv_heads
    scale = 1.0 / float(np.sqrt(d))
    ins = {
        "x": f(d, n_tok),
        "pos": leaf_of((n_tok,), "i32", Init("rows", n=ctx)),
        "kv_idx": leaf_of((n_tok,), "i64", Init("set_rows", n=ctx)),
        "mask": leaf_of((ctx, 32, 1, 1), "f16", Init("causal_mask")),  # rows padded to GGML_KQ_MASK_PAD
        "cache_k": f(kv_dim, ctx, dtype="f16"),
        "cache_v": f(kv_dim, ctx, dtype="f16"),
        "attn_norm": f(d, lo=0.8, hi=1.2),
        "ffn_norm": f(d, lo=0.8, hi=1.2),
        "wq": leaf_of((d, d), wtype, Init(lo=-scale, hi=scale)),
        "wk": leaf_of((d, kv_dim), wtype, Init(lo=-scale, hi=scale)),
        "wv": leaf_of((d, kv_dim), wtype, Init(lo=-scale, hi=scale)),
        "wo": leaf_of((d, d), wtype, Init(lo=-scale, hi=scale)),
        "w_gate": leaf_of((d, ff), wtype, Init(lo=-scale, hi=scale)),
        "w_up": leaf_of((d, ff), wtype, Init(lo=-scale, hi=scale)),
        "w_down": leaf_of((ff, d), wtype, Init(lo=-1.0 / float(np.sqrt(ff)), hi=1.0 / float(np.sqrt(ff)))),
    }

    def program(b: Any, t: Mapping[str, Any]) -> Any:
        x = t["x"]
        h = b.mul(b.rms_norm(x, 1e-6), t["attn_norm"])
        q = b.reshape_3d(b.mul_mat(t["wq"], h), hd, heads, n_tok)
        k = b.reshape_3d(b.mul_mat(t["wk"], h), hd, kv_heads, n_tok)
        v = b.mul_mat(t["wv"], h)
        q = b.rope_ext(q, t["pos"], None, hd, RopeType.NEOX, 0, 10000.0, 1.0, 0.0, 1.0, 32.0, 1.0)
        k = b.rope_ext(k, t["pos"], None, hd, RopeType.NEOX, 0, 10000.0, 1.0, 0.0, 1.0, 32.0, 1.0)
        ck = b.set_rows(t["cache_k"], b.reshape_2d(k, kv_dim, n_tok), t["kv_idx"])
        cv = b.set_rows(t["cache_v"], v, t["kv_idx"])
        kk = b.permute(b.view_3d(ck, hd, kv_heads, ctx, hd * 2, kv_dim * 2, 0), 0, 2, 1, 3)
        vv = b.permute(b.view_3d(cv, hd, kv_heads, ctx, hd * 2, kv_dim * 2, 0), 0, 2, 1, 3)
        # a full view_3d, not view_tensor: ggml_view_tensor records no edge to its (computed) source
        qq = b.permute(b.view_3d(q, hd, heads, n_tok, q.nb[1], q.nb[2], 0), 0, 2, 1, 3)
        attn = b.flash_attn_ext(qq, kk, vv, t["mask"], 1.0 / float(np.sqrt(hd)), 0.0, 0.0)
        x2 = b.add(x, b.mul_mat(t["wo"], b.reshape_2d(attn, d, n_tok)))
        h2 = b.mul(b.rms_norm(x2, 1e-6), t["ffn_norm"])
        up = b.swiglu_split(b.mul_mat(t["w_gate"], h2), b.mul_mat(t["w_up"], h2))
        return b.add(x2, b.mul_mat(t["w_down"], up))

    return ins, program


_WHOLE = "test-backend-ops test_llama/test_falcon: 2e-3 for whole-model graphs (errors compound)"


def cases() -> list[Case]:
    """The llama blocks: prefill and decode, f32 and quantized weights."""
    shapes: dict[str, dict[str, Any]] = {
        "llama-block-prefill": {"n_tok": 5},
        "llama-block-decode": {"n_tok": 1},
        "llama-block-prefill-q4_0": {"n_tok": 5, "wtype": "q4_0"},
        "llama-block-decode-q4_K": {
            "n_tok": 1,
            "d": 256,
            "heads": 8,
            "kv_heads": 4,
            "ff": 256,
            "wtype": "q4_K",
        },
    }
    out = []
    for cid, kw in shapes.items():
        ins, program = block(**kw)
        out.append(vs(cid, "llama_block", ins, program=program, max_nmse=2e-3, why=_WHOLE))
    return out
