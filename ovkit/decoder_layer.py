"""One llama decoder layer (a transformer block) over a KV cache, for engine tests and benchmarks.

The layer is ``ovkit.model.program.decoder_layer`` over the builder API, so :func:`block_program`
runs on an ovkit ``Graph`` and on real ggml alike; the input is the hidden state ``x``, the KV
cache the f16 tensors ``cache_k_l0``/``cache_v_l0``, written with SET_ROWS and read through views.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ovkit.model.arch import HParams
from ovkit.model.program import GraphShape, causal_inputs, decoder_layer, input_specs
from ovkit.model.synthetic import random_values, tensor_shapes

CACHE_NAMES: tuple[str, str] = ("cache_k_l0", "cache_v_l0")
_LAYER_INPUTS = ("inp_pos", "attn_inp_k_idxs", "attn_inp_v_idxs", "attn_inp_kq_mask", *CACHE_NAMES)


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

    @property
    def hparams(self) -> HParams:
        """The layer as a llama model's hparams (two layers, so layer 0 keeps every position)."""
        return HParams(
            arch="llama",
            n_vocab=1,
            n_embd=self.d,
            n_layer=2,
            n_head=self.heads,
            n_head_kv=self.kv_heads,
            n_ff=self.ff,
            head_dim=self.head_dim,
            rms_eps=self.eps,
            rope_freq_base=self.rope_base,
        )

    def shape(self, n_tok: int) -> GraphShape:
        return GraphShape(n_tok, self.ctx, self.ctx, n_tok, flash_attn=True)

    def flops_per_token(self) -> int:
        """Matrix-multiply FLOPs per token (projections and FFN; attention excluded)."""
        return 2 * (2 * self.d * self.d + 2 * self.d * self.kv_dim + 3 * self.d * self.ff)


def block_weights(cfg: BlockConfig, seed: int = 0) -> dict[str, np.ndarray]:
    """Random weights by their GGUF names, scaled like an initialised model (rows ~ 1/sqrt(fan_in))."""
    rng = np.random.default_rng(seed)
    return {
        n: random_values(n, s, rng) for n, s in tensor_shapes(cfg.hparams).items() if n.startswith("blk.0.")
    }


def block_program(cfg: BlockConfig, n_tok: int) -> Callable[[Any, Mapping[str, Any]], list[Any]]:
    """``program(b, leaves) -> [out, next cache_k_l0, next cache_v_l0]`` on either builder."""
    hp, shape = cfg.hparams, cfg.shape(n_tok)

    def program(b: Any, leaves: Mapping[str, Any]) -> list[Any]:
        layer = decoder_layer(b, hp, shape, 0, leaves["x"], leaves)
        return [layer.out, *(layer.caches[n] for n in CACHE_NAMES)]

    return program


def block_leaves(cfg: BlockConfig, n_tok: int) -> dict[str, tuple[tuple[int, ...], str]]:
    """The block's non-weight inputs (numpy shape, dtype) by name."""
    specs = input_specs(cfg.hparams, cfg.shape(n_tok))
    return {"x": ((n_tok, cfg.d), "f32"), **{n: specs[n] for n in _LAYER_INPUTS}}


def transformer_block(
    cfg: BlockConfig, n_tok: int, weights: dict[str, np.ndarray]
) -> tuple[Any, Any, dict[str, Any]]:
    """Graph of one block for ``n_tok`` new tokens: (graph, output, {state name: next value}); its
    inputs are :func:`block_leaves`' (fed by :func:`block_inputs`), its states the f16 KV caches."""
    from ovkit.graph import Graph

    g = Graph()
    leaves: dict[str, Any] = {n: g.constant(v, n) for n, v in weights.items()}
    leaves.update({n: g.input(n, shp, dt) for n, (shp, dt) in block_leaves(cfg, n_tok).items()})
    out, ck, cv = block_program(cfg, n_tok)(g, leaves)
    return g, out, {CACHE_NAMES[0]: ck, CACHE_NAMES[1]: cv}


def block_inputs(cfg: BlockConfig, x: np.ndarray, start: int) -> dict[str, np.ndarray]:
    """Inputs for hidden states ``x`` (n_tok, d) at positions start.. with a causal mask."""
    n_tok = x.shape[0]
    if start + n_tok > cfg.ctx:
        raise ValueError(f"positions up to {start + n_tok - 1} do not fit the KV cache of ctx={cfg.ctx}")
    feed = causal_inputs(cfg.hparams, cfg.shape(n_tok), np.zeros(n_tok, np.int32), start)
    feed = {n: v for n, v in feed.items() if n in _LAYER_INPUTS}
    return {"x": np.ascontiguousarray(x, dtype=np.float32), **feed}
