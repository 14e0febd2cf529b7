"""The compute graph llama.cpp builds for a decoder model, written once over the builder API.

``decoder_program(hp, shape)`` returns ``program(b, leaves)`` over an ovkit ``Graph`` or the
oracle's ``GgmlBuilder``, ``leaves`` keyed by llama.cpp's tensor names.  Ops, order, result names
and KV cache views follow llama.cpp's ``llm_graph_context`` and ``llama_kv_cache`` (the V cache
transposed with ``-fa off``), so the backend's support rules place this graph as upstream's.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ovkit.ir import GGML_PREC_F32, GGML_SORT_ORDER_DESC
from ovkit.model.arch import HParams

KV_PAD = 256  # llama_kv_cache::get_padding: n_kv grows in steps of 256 cells
F16_BYTES = 2  # the KV cache holds f16
F16_TINY = 6.103515625e-5  # the smallest normal f16: llama.cpp clamps the MoE weight sums to it
SWA_MASK = "attn_inp_kq_mask_swa"
#: The gated FFN's GLU by activation: builder method and the name llama.cpp's build_ffn gives it.
FFN_GLU: dict[str, tuple[str, str]] = {
    "silu": ("swiglu_split", "ffn_swiglu"),
    "gelu": ("geglu_split", "ffn_geglu"),
}


@dataclass(frozen=True, slots=True)
class GraphShape:
    """One shape bucket: ``n_tokens`` new tokens over ``n_kv`` cache cells of an ``n_ctx`` cache."""

    n_tokens: int
    n_kv: int
    n_ctx: int
    n_outputs: int
    flash_attn: bool = True

    def __post_init__(self) -> None:
        if not 1 <= self.n_tokens <= self.n_ctx:
            raise ValueError(f"n_tokens={self.n_tokens} must be in 1..n_ctx={self.n_ctx}")
        if not 1 <= self.n_kv <= self.n_ctx:
            raise ValueError(f"n_kv={self.n_kv} must be in 1..n_ctx={self.n_ctx}")
        if not 1 <= self.n_outputs <= self.n_tokens:
            raise ValueError(f"n_outputs={self.n_outputs} must be in 1..n_tokens={self.n_tokens}")


def n_kv_for(n_ctx: int, used: int) -> int:
    """llama.cpp's ``n_kv``: the used cells padded to 256 (at least 256), capped by the cache size."""
    return min(n_ctx, max(KV_PAD, -(-used // KV_PAD) * KV_PAD))


def cache_names(n_layer: int) -> list[str]:
    """The KV cache tensors, as llama.cpp names them (``cache_k_l0``, ``cache_v_l0``, ...)."""
    return [f"cache_{kv}_l{il}" for il in range(n_layer) for kv in ("k", "v")]


def input_specs(
    hp: HParams, shape: GraphShape, *, cache_rows: int | None = None
) -> dict[str, tuple[tuple[int, ...], str]]:
    """The graph inputs (numpy shape, dtype) by llama.cpp's names; ``cache_rows``: the caches' rows
    (``n_ctx``, or with flash attention as few as the ``n_kv`` the graph reads)."""
    n, kv = shape.n_tokens, hp.n_embd_kv
    rows = shape.n_ctx if cache_rows is None else cache_rows
    if not (shape.n_kv <= rows <= shape.n_ctx and (shape.flash_attn or rows == shape.n_ctx)):
        raise ValueError(
            f"cache_rows={rows}: expected n_kv={shape.n_kv}..n_ctx={shape.n_ctx} "
            "(n_ctx without flash attention: the transposed V cache strides by n_ctx)"
        )
    specs: dict[str, tuple[tuple[int, ...], str]] = {
        "inp_tokens": ((n,), "i32"),
        "inp_pos": ((n,), "i32"),
        "attn_inp_k_idxs": ((n,), "i64"),
        # non-FA: the V cache is transposed, every element of a row is a SET_ROWS row of its own
        "attn_inp_v_idxs": ((n,) if shape.flash_attn else (n * kv,), "i64"),
        "attn_inp_kq_mask": ((n, shape.n_kv), "f16" if shape.flash_attn else "f32"),
        "out_ids": ((shape.n_outputs,), "i32"),
    }
    if any(hp.swa_layers):  # the SWA cache's mask (llama.cpp names it attn_inp_kq_mask as well)
        specs[SWA_MASK] = specs["attn_inp_kq_mask"]
    for name in cache_names(hp.n_layer):
        specs[name] = ((rows, kv), "f16")
    return specs


def _namer(b: Any) -> Callable[[Any, str, int], Any]:
    """llama.cpp's ``cb(t, name, il)``: names ``name-il`` (``name`` for il < 0) on either builder."""
    from ovkit.graph import Graph

    def cb(t: Any, name: str, il: int) -> Any:
        full = f"{name}-{il}" if il >= 0 else name
        if isinstance(b, Graph):
            t.set_name(full)
        else:
            b.set_name(t, full.encode())
        return t

    return cb


def _norm(b: Any, cb: Callable[[Any, str, int], Any], x: Any, w: Any, eps: float, il: int) -> Any:
    """``build_norm(LLM_NORM_RMS)``: rms_norm named ``norm``, then the weight."""
    return b.mul(cb(b.rms_norm(x, eps), "norm", il), w)


@dataclass(frozen=True, slots=True)
class LayerOut:
    """A layer's output and the next value of each KV cache tensor it wrote."""

    out: Any
    caches: dict[str, Any]


def attention(
    b: Any, hp: HParams, shape: GraphShape, il: int, q: Any, k: Any, v: Any, L: Mapping[str, Any]
) -> tuple[Any, dict[str, Any]]:
    """``build_attn`` over the KV cache: store K/V (SET_ROWS), view the cache, attend; ``kqv_out``.
    A sliding-window layer uses its own full-size cache and the window's mask; K/V are views of the
    cache tensors after the stores, as the backend's FLASH_ATTN_EXT rule wants."""
    cb = _namer(b)
    hd, n, n_kv, n_ctx, kvd = hp.head_dim, shape.n_tokens, shape.n_kv, shape.n_ctx, hp.n_embd_kv
    ck_name, cv_name = f"cache_k_l{il}", f"cache_v_l{il}"
    for t in (q, k, v):  # llama.cpp expands these together so that they are not reordered
        b.build_forward_expand(t)
    # cpy_k: merge heads, store the rows at attn_inp_k_idxs
    ck = b.set_rows(L[ck_name], b.view_2d(k, kvd, n, k.nb[2], 0), L["attn_inp_k_idxs"])
    b.build_forward_expand(ck)
    if shape.flash_attn:
        cv = b.set_rows(L[cv_name], b.view_2d(v, kvd, n, v.nb[2], 0), L["attn_inp_v_idxs"])
    else:  # the transposed V cache: each element is a row of one value
        v_view = b.reshape_2d(L[cv_name], 1, n_ctx * kvd)
        cv = b.set_rows(v_view, b.reshape_2d(b.reshape_2d(v, kvd, n), 1, kvd * n), L["attn_inp_v_idxs"])
    b.build_forward_expand(cv)
    # get_k / get_v: 4-d views of the cache tensors (read after the stores above)
    row = F16_BYTES * kvd
    cells = L[ck_name].ne[1]  # n_ctx, or n_kv for a cache input of n_kv rows (input_specs)
    kk = b.view_4d(L[ck_name], hd, hp.n_head_kv, n_kv, 1, F16_BYTES * hd, row, row * cells, 0)
    if shape.flash_attn:
        vv = b.view_4d(L[cv_name], hd, hp.n_head_kv, n_kv, 1, F16_BYTES * hd, row, row * cells, 0)
    else:
        vv = b.view_4d(
            L[cv_name], n_kv, hp.n_head_kv, hd, 1, F16_BYTES * n_ctx * hd, F16_BYTES * n_ctx, row * n_ctx, 0
        )
    # build_attn_mha
    q = b.view_4d(q, hd, hp.n_head, n, 1, q.nb[1], q.nb[2], q.nb[2] * n, 0)
    q = b.permute(q, 0, 2, 1, 3)
    kk = b.permute(kk, 0, 2, 1, 3)
    vv = b.permute(vv, 0, 2, 1, 3)
    scale = 1.0 if hp.spec.q_scale else 1.0 / math.sqrt(hd)  # q_scale: Q was scaled already
    mask = L[SWA_MASK if hp.is_swa(il) else "attn_inp_kq_mask"]
    if shape.flash_attn:
        cur = b.flash_attn_ext(q, kk, vv, mask, scale, 0.0, 0.0)
        b.flash_attn_ext_set_prec(cur, GGML_PREC_F32)
        cur = b.reshape_2d(cur, hd * hp.n_head, n)
    else:
        kq = cb(b.mul_mat(kk, q), "kq", il)
        b.mul_mat_set_prec(kq, GGML_PREC_F32)
        kq = cb(b.soft_max_ext(kq, mask, scale, 0.0), "kq_soft_max", il)
        kqv = cb(b.mul_mat(vv, kq), "kqv", il)
        cur = b.cont_2d(b.permute(kqv, 0, 2, 1, 3), hd * hp.n_head, n)
    cb(cur, "kqv_out", il)
    return cur, {ck_name: ck, cv_name: cv}


def moe_ffn(b: Any, hp: HParams, il: int, cur: Any, L: Mapping[str, Any]) -> Any:
    """``build_moe_ffn`` as qwen3moe calls it: softmax router, top-k experts by ARGSORT (desc) and a
    view, their weights renormalized to sum 1, SwiGLU experts by MUL_MAT_ID, weighted and summed."""
    cb = _namer(b)
    p, k, n_embd, n_tokens = f"blk.{il}.", hp.n_expert_used, hp.n_embd, cur.ne[1]
    logits = cb(b.mul_mat(L[p + "ffn_gate_inp.weight"], cur), "ffn_moe_logits", il)
    probs = cb(b.soft_max(logits), "ffn_moe_probs", il)
    order = cb(b.argsort(probs, GGML_SORT_ORDER_DESC), "ffn_moe_argsort", il)
    # ggml_argsort_top_k: the first k columns of the descending argsort
    selected = b.view_4d(
        order, k, order.ne[1], order.ne[2], order.ne[3], order.nb[1], order.nb[2], order.nb[3], 0
    )
    cb(selected, "ffn_moe_topk", il)
    weights = cb(b.get_rows(b.reshape_3d(probs, 1, hp.n_expert, n_tokens), selected), "ffn_moe_weights", il)
    weights = b.reshape_2d(weights, k, n_tokens)
    total = cb(b.sum_rows(weights), "ffn_moe_weights_sum", il)
    total = cb(b.clamp(total, F16_TINY, math.inf), "ffn_moe_weights_sum_clamped", il)
    weights = b.reshape_3d(cb(b.div(weights, total), "ffn_moe_weights_norm", il), 1, k, n_tokens)
    b.build_forward_expand(weights)
    cur = b.reshape_3d(cur, n_embd, 1, n_tokens)
    up = cb(b.mul_mat_id(L[p + "ffn_up_exps.weight"], cur, selected), "ffn_moe_up", il)
    gate = cb(b.mul_mat_id(L[p + "ffn_gate_exps.weight"], cur, selected), "ffn_moe_gate", il)
    cur = cb(b.swiglu_split(gate, up), "ffn_moe_swiglu", il)
    experts = cb(b.mul_mat_id(L[p + "ffn_down_exps.weight"], cur, selected), "ffn_moe_down", il)
    experts = cb(b.mul(experts, weights), "ffn_moe_weighted", il)
    b.build_forward_expand(experts)
    views = [b.view_2d(experts, n_embd, n_tokens, experts.nb[2], i * experts.nb[1]) for i in range(k)]
    for v in views:  # llama.cpp orders the views before the adds
        b.build_forward_expand(v)
    out = views[0]
    for v in views[1:]:
        out = b.build_forward_expand(b.add(out, v))
    return b.cont(out) if k == 1 else out


def decoder_layer(b: Any, hp: HParams, shape: GraphShape, il: int, x: Any, L: Mapping[str, Any]) -> LayerOut:
    """One decoder layer as llama.cpp's llama/qwen2/qwen3 graphs build it (``l_out-il``)."""
    cb = _namer(b)
    spec, n, hd = hp.spec, shape.n_tokens, hp.head_dim
    p = f"blk.{il}."
    inp_sa = x
    cur = cb(_norm(b, cb, x, L[p + "attn_norm.weight"], hp.rms_eps, il), "attn_norm", il)
    # build_qkv (separate Q/K/V path)
    qkv = []
    for part, heads in (("q", hp.n_head), ("k", hp.n_head_kv), ("v", hp.n_head_kv)):
        t = cb(b.mul_mat(L[f"{p}attn_{part}.weight"], cur), f"{part.upper()}cur", il)
        if spec.qkv_bias:
            t = cb(b.add(t, L[f"{p}attn_{part}.bias"]), f"{part.upper()}cur", il)
        qkv.append((t, heads))
    q, k, v = (b.reshape_3d(t, hd, heads, n) for t, heads in qkv)
    rope = (
        hp.head_dim,
        spec.rope_type,
        hp.n_ctx_train,
        *hp.rope_base_scale(il),
        0.0,  # ext_factor (no YaRN)
        1.0,  # attn_factor
        32.0,  # beta_fast
        1.0,  # beta_slow
    )
    if spec.qk_norm:
        q = cb(_norm(b, cb, q, L[p + "attn_q_norm.weight"], hp.rms_eps, il), "Qcur_normed", il)
    q = b.rope_ext(q, L["inp_pos"], None, *rope)
    if spec.qk_norm:
        k = cb(_norm(b, cb, k, L[p + "attn_k_norm.weight"], hp.rms_eps, il), "Kcur_normed", il)
    k = b.rope_ext(k, L["inp_pos"], None, *rope)
    cb(q, "Qcur", il)
    cb(k, "Kcur", il)
    cb(v, "Vcur", il)
    if spec.q_scale:  # gemma: Q times the attention scale, then attention with a KQ scale of 1
        q = b.scale(q, hp.attn_scale)
    cur, caches = attention(b, hp, shape, il, q, k, v, L)
    cur = b.mul_mat(L[p + "attn_output.weight"], cur)
    if spec.names_attn_out:
        cb(cur, "attn_out", il)
    if il == hp.n_layer - 1:
        cur = b.get_rows(cur, L["out_ids"])
        inp_sa = b.get_rows(inp_sa, L["out_ids"])
    if spec.post_norms:
        cur = cb(_norm(b, cb, cur, L[p + "post_attention_norm.weight"], hp.rms_eps, il), "attn_post_norm", il)
    ffn_inp = cb(b.add(cur, inp_sa), "sa_out" if spec.post_norms else "ffn_inp", il)
    cur = cb(_norm(b, cb, ffn_inp, L[p + "ffn_norm.weight"], hp.rms_eps, il), "ffn_norm", il)
    if spec.moe:
        cur = cb(moe_ffn(b, hp, il, cur, L), "ffn_moe_out", il)
    else:  # build_ffn(LLM_FFN_SILU or LLM_FFN_GELU, LLM_FFN_PAR)
        glu, glu_name = FFN_GLU[spec.ffn_act]
        up = cb(b.mul_mat(L[p + "ffn_up.weight"], cur), "ffn_up", il)
        gate = cb(b.mul_mat(L[p + "ffn_gate.weight"], cur), "ffn_gate", il)
        cur = cb(getattr(b, glu)(gate, up), glu_name, il)
        cur = cb(b.mul_mat(L[p + "ffn_down.weight"], cur), "ffn_out", il)
    if spec.post_norms:  # llama.cpp's build_norm here gets il = -1: its RMS_NORM is named "norm"
        cur = cb(_norm(b, cb, cur, L[p + "post_ffw_norm.weight"], hp.rms_eps, -1), "ffn_post_norm", il)
    cur = cb(b.add(cur, ffn_inp), "l_out", il)
    return LayerOut(cur, caches)


@dataclass(frozen=True, slots=True)
class DecoderOut:
    """The program's results: logits (``result_output``) and the KV cache tensors' next values."""

    logits: Any
    caches: dict[str, Any]

    def tensors(self) -> list[Any]:
        return [self.logits, *self.caches.values()]


def output_weight_name(tensor_names: Any) -> str:
    """``output.weight``, or the tied ``token_embd.weight`` when the GGUF has no output head."""
    return "output.weight" if "output.weight" in tensor_names else "token_embd.weight"


def decoder_program(hp: HParams, shape: GraphShape) -> Callable[[Any, Mapping[str, Any]], DecoderOut]:
    """The whole model graph for ``shape`` as a program ``program(b, leaves) -> DecoderOut``."""

    def program(b: Any, L: Mapping[str, Any]) -> DecoderOut:
        cb = _namer(b)
        x = cb(b.get_rows(L["token_embd.weight"], L["inp_tokens"]), "inp_embd", -1)
        if hp.spec.embd_scale:  # gemma: sqrtf(n_embd) in f32
            x = cb(b.scale(x, float(np.sqrt(np.float32(hp.n_embd)))), "inp_scaled", -1)
        caches: dict[str, Any] = {}
        for il in range(hp.n_layer):
            layer = decoder_layer(b, hp, shape, il, x, L)
            x = layer.out
            caches.update(layer.caches)
        cur = cb(_norm(b, cb, x, L["output_norm.weight"], hp.rms_eps, -1), "result_norm", -1)
        logits = b.mul_mat(L[output_weight_name(L)], cur)
        cap = hp.final_logit_softcapping
        if cap:  # gemma's final logit soft-capping
            logits = b.scale(b.tanh(b.scale(logits, 1.0 / cap)), cap)
        logits = cb(logits, "result_output", -1)
        return DecoderOut(logits, caches)

    return program


def causal_inputs(
    hp: HParams, shape: GraphShape, tokens: Any, start: int, out_ids: Any | None = None
) -> dict[str, Any]:
    """Input values for ``tokens`` at positions ``start..``: positions, cache rows, causal mask."""

    toks = np.asarray(tokens, dtype=np.int32).reshape(-1)
    n = toks.size
    if n != shape.n_tokens:
        raise ValueError(f"{n} tokens given for a graph of n_tokens={shape.n_tokens}")
    pos = np.arange(start, start + n, dtype=np.int64)
    if start < 0 or pos[-1] >= shape.n_kv:
        raise ValueError(f"positions {start}..{pos[-1]} do not fit n_kv={shape.n_kv} (n_ctx={shape.n_ctx})")
    cells = np.arange(shape.n_kv)[None, :]  # cell c holds position c
    mask = np.where(cells <= pos[:, None], 0.0, -np.inf)
    if shape.flash_attn:
        v_idxs = pos
    else:  # element j of row p sits at j * n_ctx + p in the transposed V cache
        v_idxs = (np.arange(hp.n_embd_kv, dtype=np.int64)[None, :] * shape.n_ctx + pos[:, None]).reshape(-1)
    ids = np.arange(n - shape.n_outputs, n) if out_ids is None else np.asarray(out_ids)
    mask_type = np.float16 if shape.flash_attn else np.float32
    feed = {
        "inp_tokens": toks,
        "inp_pos": pos.astype(np.int32),
        "attn_inp_k_idxs": pos,
        "attn_inp_v_idxs": v_idxs,
        "attn_inp_kq_mask": mask.astype(mask_type),
        "out_ids": ids.astype(np.int32),
    }
    if any(hp.swa_layers):  # llama_hparams::is_masked_swa (standard): p_query - p_key >= n_swa
        feed[SWA_MASK] = np.where(pos[:, None] - cells >= hp.n_swa, -np.inf, mask).astype(mask_type)
    return feed


def step_inputs(
    hp: HParams, shape: GraphShape, tokens: Any, start: int, *, cache_rows: int | None = None
) -> dict[str, Any]:
    """Every input of one step from an empty cache: :func:`causal_inputs` and zeroed f16 KV caches
    (of ``cache_rows`` rows, as in :func:`input_specs`)."""
    feed = causal_inputs(hp, shape, tokens, start)
    for name, (shp, _dtype) in input_specs(hp, shape, cache_rows=cache_rows).items():
        feed.setdefault(name, np.zeros(shp, np.float16))
    return feed
