"""Model blocks built with the ggml-style ``Graph``: a llama-style transformer block over a KV cache.

Used by ``benchmarks/bench_engine.py`` (prefill / decode tokens per second) and the engine tests
(decode with a stateful KV cache must equal recomputing the whole sequence).  The KV cache is a
fixed-size f16 buffer written with ``set_rows`` and read through views + a mask, exactly as
llama.cpp keeps it; ``ovkit.engine.graph_session`` turns the two buffers into state.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True, slots=True)
class BlockConfig:
    """Sizes of one block (defaults: a small realistic model, GQA 8 query / 4 KV heads)."""

    d: int = 512
    heads: int = 8
    kv_heads: int = 4
    head_dim: int = 64
    ff: int = 1408
    ctx: int = 256
    eps: float = 1e-6
    rope_base: float = 10000.0

    def __post_init__(self) -> None:
        if self.heads * self.head_dim != self.d:
            raise ValueError(f"heads*head_dim = {self.heads * self.head_dim} must equal d = {self.d}")
        if self.heads % self.kv_heads:
            raise ValueError(f"heads={self.heads} must be a multiple of kv_heads={self.kv_heads}")

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    def flops_per_token(self) -> int:
        """Matrix-multiply FLOPs per token (projections and FFN; attention excluded)."""
        return 2 * (2 * self.d * self.d + 2 * self.d * self.kv_dim + 3 * self.d * self.ff)


def block_weights(cfg: BlockConfig, seed: int = 0) -> dict[str, np.ndarray]:
    """Random weights scaled like an initialised model (rows ~ 1/sqrt(fan_in))."""
    rng = np.random.default_rng(seed)

    def w(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols), dtype=np.float32) / np.sqrt(cols)).astype(np.float32)

    return {
        "attn_norm": (1 + 0.1 * rng.standard_normal(cfg.d)).astype(np.float32),
        "wq": w(cfg.d, cfg.d),
        "wk": w(cfg.kv_dim, cfg.d),
        "wv": w(cfg.kv_dim, cfg.d),
        "wo": w(cfg.d, cfg.d),
        "ffn_norm": (1 + 0.1 * rng.standard_normal(cfg.d)).astype(np.float32),
        "w_gate": w(cfg.ff, cfg.d),
        "w_up": w(cfg.ff, cfg.d),
        "w_down": w(cfg.d, cfg.ff),
    }


def transformer_block(
    cfg: BlockConfig, n_tok: int, weights: dict[str, np.ndarray]
) -> tuple[Any, Any, dict[str, Any]]:
    """Graph of one block for ``n_tok`` new tokens: (graph, output, {state name: next value}).

    Inputs: ``x`` (n_tok, d) f32, ``pos`` (n_tok,) i32, ``kv_idx`` (n_tok,) i64 (cache rows to
    write), ``mask`` (n_tok, ctx) f16 (0 = attend, -inf = masked), and the states ``cache_k`` /
    ``cache_v`` (ctx, kv_dim) f16.  RMS norm → Q/K/V mul_mat → NEOX rope → set_rows into the
    cache → flash attention over the cache → output projection + residual → RMS norm → SwiGLU
    FFN + residual.
    """
    from ovkit.graph import GGML_ROPE_TYPE_NEOX, Graph

    hd, ctx = cfg.head_dim, cfg.ctx
    g = Graph()
    x = g.input("x", (n_tok, cfg.d))
    pos = g.input("pos", (n_tok,), "i32")
    kv_idx = g.input("kv_idx", (n_tok,), "i64")
    mask = g.input("mask", (n_tok, ctx), "f16")
    cache_k = g.input("cache_k", (ctx, cfg.kv_dim), "f16")
    cache_v = g.input("cache_v", (ctx, cfg.kv_dim), "f16")
    c = {k: g.constant(v, k) for k, v in weights.items()}

    h = g.mul(g.rms_norm(x, cfg.eps), c["attn_norm"])
    q = g.reshape_3d(g.mul_mat(c["wq"], h), hd, cfg.heads, n_tok)
    k = g.reshape_3d(g.mul_mat(c["wk"], h), hd, cfg.kv_heads, n_tok)
    v = g.mul_mat(c["wv"], h)
    rope = (None, hd, GGML_ROPE_TYPE_NEOX, 0, cfg.rope_base, 1.0, 0.0, 1.0, 32.0, 1.0)
    q = g.rope_ext(q, pos, *rope)
    k = g.rope_ext(k, pos, *rope)
    ck = g.set_rows(cache_k, g.reshape_2d(k, cfg.kv_dim, n_tok), kv_idx)
    cv = g.set_rows(cache_v, v, kv_idx)
    row = hd * 2  # f16 bytes
    # K/V are read through PERMUTE <- VIEW of the updated cache (the set_rows result: in a
    # functional graph that is the data dependency; llama.cpp views the cache buffer that
    # set_rows wrote in place) — the pattern upstream's FLASH_ATTN_EXT policy accepts.
    kk = g.permute(g.view_3d(ck, hd, cfg.kv_heads, ctx, row, cfg.kv_dim * 2, 0), 0, 2, 1, 3)
    vv = g.permute(g.view_3d(cv, hd, cfg.kv_heads, ctx, row, cfg.kv_dim * 2, 0), 0, 2, 1, 3)
    # A full view_3d (not view_tensor: in ggml that records no graph edge to the rope).
    qq = g.permute(g.view_3d(q, hd, cfg.heads, n_tok, q.nb[1], q.nb[2], 0), 0, 2, 1, 3)
    attn = g.flash_attn_ext(qq, kk, vv, mask, 1.0 / float(np.sqrt(hd)), 0.0, 0.0)
    x2 = g.add(x, g.mul_mat(c["wo"], g.reshape_2d(attn, cfg.d, n_tok)))
    h2 = g.mul(g.rms_norm(x2, cfg.eps), c["ffn_norm"])
    ff = g.mul_mat(c["w_down"], g.swiglu_split(g.mul_mat(c["w_gate"], h2), g.mul_mat(c["w_up"], h2)))
    return g, g.add(x2, ff), {"cache_k": ck, "cache_v": cv}


def block_inputs(cfg: BlockConfig, x: np.ndarray, start: int) -> dict[str, np.ndarray]:
    """Inputs for tokens ``x`` (n_tok, d) at positions start.. with a causal mask over the cache."""
    n_tok = x.shape[0]
    positions = np.arange(start, start + n_tok)
    if positions[-1] >= cfg.ctx:
        raise ValueError(f"positions up to {positions[-1]} do not fit the KV cache of ctx={cfg.ctx}")
    mask = np.full((n_tok, cfg.ctx), -np.inf, np.float16)
    for i, p in enumerate(positions):
        mask[i, : p + 1] = 0
    return {
        "x": np.ascontiguousarray(x, dtype=np.float32),
        "pos": positions.astype(np.int32),
        "kv_idx": positions.astype(np.int64),
        "mask": mask,
    }
