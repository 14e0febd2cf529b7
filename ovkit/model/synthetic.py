"""Random-weight GGUF models that llama.cpp loads: any size, any ggml weight type, a real tokenizer.

``synthetic(arch, path, ...)`` writes the tensors llama.cpp expects for the architecture (2-d
weights in the requested type, quantized by ggml's own quantizer) and a SentencePiece-style
vocabulary, so tests, benchmarks and notebooks need no downloads.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from ovkit import quant
from ovkit.gguf import finish_gguf
from ovkit.model.arch import HParams, ModelError, arch_spec

WEIGHT_TYPES: tuple[str, ...] = ("f32", "f16", *quant.QUANT_TYPES, *quant.REPACKS)  # REPACKS: Q5_0
_N_SPECIAL = 3  # <unk>, <s>, </s>
_TOKEN_NORMAL, _TOKEN_UNKNOWN, _TOKEN_CONTROL, _TOKEN_BYTE = 1, 2, 3, 6


def vocabulary(n_vocab: int) -> tuple[list[str], list[float], list[int]]:
    """SentencePiece pieces, scores and types: specials, byte fallback, then ``▁a``-style pieces."""
    if n_vocab < _N_SPECIAL + 256 + 1:
        raise ModelError(f"n_vocab={n_vocab} is too small: a byte-fallback vocabulary needs >= 260 tokens")
    pieces = ["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(256)]
    types = [_TOKEN_UNKNOWN, _TOKEN_CONTROL, _TOKEN_CONTROL] + [_TOKEN_BYTE] * 256
    letters = "abcdefghijklmnopqrstuvwxyz"
    words: list[str] = ["▁"] + [f"▁{c}" for c in letters] + list(letters)
    for a in letters:
        for c in letters:
            words += [f"▁{a}{c}", f"{a}{c}"]
    i = 0
    while len(pieces) < n_vocab:
        pieces.append(words[i] if i < len(words) else f"▁w{i}")
        types.append(_TOKEN_NORMAL)
        i += 1
    scores = [0.0] * (_N_SPECIAL + 256) + [-float(j) for j in range(n_vocab - _N_SPECIAL - 256)]
    return pieces, scores, types


def tensor_shapes(hp: HParams, tied: bool = False) -> dict[str, tuple[int, ...]]:
    """Every tensor of the model with its numpy shape (rows last, as GGUF stores ne reversed)."""
    spec = hp.spec
    shapes: dict[str, tuple[int, ...]] = {
        "token_embd.weight": (hp.n_vocab, hp.n_embd),
        "output_norm.weight": (hp.n_embd,),
    }
    if not tied:
        shapes["output.weight"] = (hp.n_vocab, hp.n_embd)
    for il in range(hp.n_layer):
        p = f"blk.{il}."
        shapes[p + "attn_norm.weight"] = (hp.n_embd,)
        shapes[p + "attn_q.weight"] = (hp.n_embd_q, hp.n_embd)
        shapes[p + "attn_k.weight"] = (hp.n_embd_kv, hp.n_embd)
        shapes[p + "attn_v.weight"] = (hp.n_embd_kv, hp.n_embd)
        if spec.qkv_bias:
            shapes[p + "attn_q.bias"] = (hp.n_embd_q,)
            shapes[p + "attn_k.bias"] = (hp.n_embd_kv,)
            shapes[p + "attn_v.bias"] = (hp.n_embd_kv,)
        if spec.qk_norm:
            shapes[p + "attn_q_norm.weight"] = (hp.head_dim,)
            shapes[p + "attn_k_norm.weight"] = (hp.head_dim,)
        shapes[p + "attn_output.weight"] = (hp.n_embd, hp.n_embd_q)
        if spec.post_norms:
            shapes[p + "post_attention_norm.weight"] = (hp.n_embd,)
            shapes[p + "post_ffw_norm.weight"] = (hp.n_embd,)
        shapes[p + "ffn_norm.weight"] = (hp.n_embd,)
        if spec.moe:  # the router and the experts stacked on the outermost dim
            shapes[p + "ffn_gate_inp.weight"] = (hp.n_expert, hp.n_embd)
            shapes[p + "ffn_gate_exps.weight"] = (hp.n_expert, hp.n_ff_exp, hp.n_embd)
            shapes[p + "ffn_up_exps.weight"] = (hp.n_expert, hp.n_ff_exp, hp.n_embd)
            shapes[p + "ffn_down_exps.weight"] = (hp.n_expert, hp.n_embd, hp.n_ff_exp)
            continue
        shapes[p + "ffn_gate.weight"] = (hp.n_ff, hp.n_embd)
        shapes[p + "ffn_up.weight"] = (hp.n_ff, hp.n_embd)
        shapes[p + "ffn_down.weight"] = (hp.n_embd, hp.n_ff)
    return shapes


def random_values(name: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Values scaled like a trained model: norms near 1, rows ~ 1/sqrt(fan-in), a head whose
    row norms vary (log-normal), so the top logits are not near-ties of a flat distribution."""
    if len(shape) == 1:
        if name.endswith(".bias"):
            return (0.1 * rng.standard_normal(shape)).astype(np.float32)
        return (1.0 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
    fan_in = shape[-1]
    scale = 1.0 if name in ("token_embd.weight", "output.weight") else 1.0 / np.sqrt(fan_in)
    values = scale * rng.standard_normal(shape)
    if name == "output.weight":  # rows of unequal norm, as trained heads have: fewer near-ties
        values *= np.exp(0.35 * rng.standard_normal((shape[0], 1)))
    return values.astype(np.float32)


def _stored(name: str, values: np.ndarray, wtype: str) -> Any:
    """A tensor in its storage type: 1-d stays f32, 2-d becomes ``wtype`` (quantized by ggml)."""
    if values.ndim == 1 or wtype == "f32":
        return values
    if wtype == "f16":
        return values.astype(np.float16)
    block = quant.quant_spec(wtype).block
    if values.shape[-1] % block:
        raise ModelError(
            f"{name}: rows of {values.shape[-1]} values cannot be stored as {wtype} "
            f"(rows must be a multiple of its block of {block}); choose sizes that are"
        )
    return quant.quantize(wtype, values, name)


#: ``general.file_type`` of a model whose 2-d weights are all one type (llama_ftype's values).
FILE_TYPES = {
    "f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q8_0": 7, "q5_0": 8, "q5_1": 9, "q6_K": 18, "q4_K": 15,
    "q4_K_M": 15, "q5_K": 17, "mxfp4": 38,
}  # fmt: skip

#: Random raw blocks: (bytes per block, weights per block, offsets of f16 scale fields and the
#: spread of the stored integers) per type.  The scales are set so a row's values have about the
#: spread of a trained model's (1/sqrt(fan-in)); every other byte is random.
_BLOCKS: dict[str, tuple[tuple[int, ...], float]] = {
    "q4_0": ((0,), 4.6), "q4_1": ((0,), 4.6), "q5_0": ((0,), 9.2), "q8_0": ((0,), 74.0),
    "q4_K": ((0, 2), 4.6 * 31), "q5_K": ((0, 2), 9.2 * 31), "q6_K": ((208,), 18.5 * 64),
}  # fmt: skip


def _random_rows(wtype: str, rows: int, k: int, std: float, rng: np.random.Generator) -> np.ndarray:
    """``rows`` rows of ``k`` weights as random blocks of ``wtype`` (f32/f16: random values)."""
    if wtype in ("f32", "f16"):
        return (std * rng.standard_normal((rows, k))).astype(wtype)
    if wtype not in _BLOCKS:
        raise ModelError(
            f"random_blocks: no random block form for {wtype} (expected one of {sorted(_BLOCKS)})"
        )
    spec = quant.quant_spec(wtype)
    if k % spec.block:
        raise ModelError(f"rows of {k} values cannot be stored as {wtype} (blocks of {spec.block})")
    offsets, spread = _BLOCKS[wtype]
    n = rows * (k // spec.block)
    blocks = np.frombuffer(bytearray(rng.bytes(n * spec.type_size)), np.uint8).reshape(n, spec.type_size)
    d = np.full((blocks.shape[0], 1), std / spread, np.float16).view(np.uint8)
    for off in offsets:
        blocks[:, off : off + 2] = d
    return blocks.reshape(rows, -1)


#: ``weight_type="q4_K_M"`` with ``random_blocks``: llama.cpp's Q4_K_M mix, simplified: Q6_K for
#: the output head, the V projections and the FFN down projections, Q4_K elsewhere; Q4_0 for a
#: tensor whose rows are not a multiple of the K-quants' 256 (llama.cpp falls back likewise).
MIXES = {"q4_K_M": ("q4_K", ("output.weight", "attn_v.weight", "ffn_down.weight"), "q6_K")}


def mix_type(wtype: str, name: str, k: int) -> str:
    """The type tensor ``name`` (rows of ``k``) is stored in for ``wtype`` (a type or a mix)."""
    if wtype not in MIXES:
        return wtype
    base, heavy_names, heavy = MIXES[wtype]
    t = heavy if name.endswith(heavy_names) else base
    return t if k % quant.quant_spec(t).block == 0 else "q4_0"


def _stream_random_blocks(
    w: Any,
    shapes: dict[str, tuple[int, ...]],
    wtype: str,
    rng: np.random.Generator,
    header_only: bool = False,
) -> None:
    """Write every tensor of ``shapes`` with ``w`` one at a time (2-d: random ``wtype`` blocks);
    ``header_only``: the tensor table alone, the data a hole of its size (the file is sparse)."""
    import gguf

    def tensor(name: str, shape: tuple[int, ...]) -> np.ndarray:
        if len(shape) == 1:
            return random_values(name, shape, rng)
        std = 1.0 if name in ("token_embd.weight", "output.weight") else 1.0 / np.sqrt(shape[-1])
        rows = int(np.prod(shape[:-1]))
        return _random_rows(mix_type(wtype, name, shape[-1]), rows, shape[-1], std, rng)

    for name, shape in shapes.items():
        wt = mix_type(wtype, name, shape[-1])
        if len(shape) == 1 or wt == "f32":
            w.add_tensor_info(name, shape, np.dtype(np.float32), 4 * int(np.prod(shape)))
        elif wt == "f16":
            w.add_tensor_info(name, shape, np.dtype(np.float16), 2 * int(np.prod(shape)))
        else:
            spec = quant.quant_spec(wt)
            row = shape[-1] // spec.block * spec.type_size  # the writer takes the shape in bytes
            w.add_tensor_info(
                name,
                (*shape[:-1], row),
                np.dtype(np.uint8),
                int(np.prod(shape[:-1])) * row,
                raw_dtype=gguf.GGMLQuantizationType(spec.ggml_type),
            )
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    if header_only:
        fout = w.fout[0]
        pad = w.data_alignment
        data = sum(gguf.GGUFWriter.ggml_pad(ti.nbytes, pad) for ti in w.tensors[0].values())
        fout.truncate(gguf.GGUFWriter.ggml_pad(fout.tell(), pad) + data)
    else:
        for name, shape in shapes.items():
            w.write_tensor_data(tensor(name, shape))
    w.close()


#: The tokenizer keys ``tokenizer_from`` copies, with the writer method of each.
_TOKENIZER_KEYS = {
    "tokenizer.ggml.model": "add_tokenizer_model",
    "tokenizer.ggml.pre": "add_tokenizer_pre",
    "tokenizer.ggml.tokens": "add_token_list",
    "tokenizer.ggml.token_type": "add_token_types",
    "tokenizer.ggml.merges": "add_token_merges",
    "tokenizer.ggml.bos_token_id": "add_bos_token_id",
    "tokenizer.ggml.eos_token_id": "add_eos_token_id",
    "tokenizer.ggml.unknown_token_id": "add_unk_token_id",
    "tokenizer.ggml.padding_token_id": "add_pad_token_id",
    "tokenizer.ggml.add_bos_token": "add_add_bos_token",
    "tokenizer.chat_template": "add_chat_template",
}


def _tokenizer_of(path: str | os.PathLike[str]) -> dict[str, Any]:
    from ovkit.gguf import read_gguf

    md = read_gguf(path).metadata
    if "tokenizer.ggml.tokens" not in md:
        raise ModelError(f"{path}: has no tokenizer to borrow (no tokenizer.ggml.tokens)")
    return {k: md[k] for k in _TOKENIZER_KEYS if k in md}


def _add_tokenizer(w: Any, keys: dict[str, Any]) -> None:
    for key, value in keys.items():
        getattr(w, _TOKENIZER_KEYS[key])(value)


def synthetic(
    arch: str,
    path: str | os.PathLike[str],
    *,
    n_embd: int = 64,
    n_layer: int = 2,
    n_head: int = 4,
    n_head_kv: int = 2,
    n_ff: int = 128,
    n_vocab: int = 512,
    n_ctx_train: int = 4096,
    weight_type: str = "f32",
    tied_output: bool = False,
    rope_freq_base: float = 10000.0,
    rope_scaling_factor: float | None = None,
    rms_eps: float = 1e-6,
    n_expert: int = 4,
    n_expert_used: int = 2,
    n_ff_exp: int = 64,
    head_dim: int | None = None,
    sliding_window: int = 0,
    sliding_window_pattern: int | None = None,
    rope_freq_base_swa: float | None = None,
    seed: int = 0,
    tokenizer: bool = True,
    chat_template: str | None = None,
    random_blocks: bool = False,
    tokenizer_from: str | os.PathLike[str] | None = None,
    header_only: bool = False,
) -> Path:
    """Write a random-weight ``arch`` model to ``path``: 2-d weights of ``weight_type``, MoE
    experts (``n_expert*``, ``n_ff_exp``), gemma3's sliding window (``sliding_window*``,
    ``rope_freq_base_swa``); ``random_blocks``: random blocks written one tensor at a time (any
    size, in seconds); ``tokenizer_from``: another GGUF's tokenizer (e.g. GPT-2 BPE for GenAI);
    ``header_only``: the tensor data a hole of its size (a sparse file, for header-only tools)."""
    spec = arch_spec(arch)
    moe = spec.moe
    borrowed = _tokenizer_of(tokenizer_from) if tokenizer_from is not None else None
    if borrowed is not None:
        n_vocab = len(borrowed["tokenizer.ggml.tokens"])
    random_blocks = random_blocks or header_only  # the table of the streamed writer, no data
    if weight_type not in WEIGHT_TYPES and not (random_blocks and weight_type in MIXES):
        raise ModelError(f"weight_type={weight_type!r} is not valid (expected one of {WEIGHT_TYPES})")
    if head_dim is None and n_embd % n_head:
        raise ModelError(f"n_embd={n_embd} must be a multiple of n_head={n_head}")
    if sliding_window and not spec.swa_pattern:
        raise ModelError(
            f"sliding_window={sliding_window}: architecture {arch!r} has no sliding-window layers"
        )
    hp = HParams(
        arch=arch,
        n_vocab=n_vocab,
        n_embd=n_embd,
        n_layer=n_layer,
        n_head=n_head,
        n_head_kv=n_head_kv,
        n_ff=n_ff,
        head_dim=head_dim or n_embd // n_head,
        n_ctx_train=n_ctx_train,
        rms_eps=rms_eps,
        rope_freq_base=rope_freq_base,
        n_expert=n_expert if moe else 0,
        n_expert_used=n_expert_used if moe else 0,
        n_ff_exp=n_ff_exp if moe else 0,
    )
    import gguf

    rng = np.random.default_rng(seed)
    pieces, scores, types = vocabulary(n_vocab)
    p = Path(path)
    w = gguf.GGUFWriter(p, arch)
    w.add_name(f"ovkit synthetic {arch} {weight_type}")
    file_type = FILE_TYPES.get(weight_type)
    if file_type is not None:  # llama.cpp's general.file_type (GenAI's reader needs it)
        w.add_file_type(file_type)
    w.add_context_length(n_ctx_train)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_layer_norm_rms_eps(rms_eps)
    w.add_rope_freq_base(rope_freq_base)
    if head_dim is not None:
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
    if sliding_window:
        w.add_sliding_window(sliding_window)
        if sliding_window_pattern is not None:
            w.add_sliding_window_pattern(sliding_window_pattern)
        if rope_freq_base_swa is not None:
            w.add_rope_freq_base_swa(rope_freq_base_swa)
    if moe:
        w.add_expert_count(n_expert)
        w.add_expert_used_count(n_expert_used)
        w.add_expert_feed_forward_length(n_ff_exp)
    if rope_scaling_factor is not None:
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(rope_scaling_factor)
    w.add_vocab_size(n_vocab)
    if borrowed is not None:
        _add_tokenizer(w, borrowed)
    elif tokenizer:
        w.add_tokenizer_model("llama")
        w.add_token_list(pieces)
        w.add_token_scores(scores)
        w.add_token_types(types)
        w.add_bos_token_id(1)
        w.add_eos_token_id(2)
        w.add_unk_token_id(0)
        w.add_add_bos_token(True)
    if chat_template is not None:
        w.add_chat_template(chat_template)
    if random_blocks:
        _stream_random_blocks(w, tensor_shapes(hp, tied_output), weight_type, rng, header_only)
        return p
    finish_gguf(
        w,
        {
            name: _stored(name, random_values(name, shape, rng), weight_type)
            for name, shape in tensor_shapes(hp, tied_output).items()
        },
    )
    return p
