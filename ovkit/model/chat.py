"""Chat with a GGUF model: its own chat template, rendered sandboxed, and llama.cpp's stop tokens.

The template (Jinja code from the model file or the user) is rendered by :mod:`ovkit.template`
with the variables HF transformers' templates expect, tokenized by llama.cpp, checked against the
context before anything compiles; generation stops at :func:`eog_ids`.  Every failure is a
one-line :class:`ChatError` naming the file.
"""

from __future__ import annotations

import numbers
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ovkit.gguf import GGUFModel, read_gguf
from ovkit.model.arch import ModelError
from ovkit.model.limits import check_count
from ovkit.model.runner import Generation, Model

TEMPLATE_KEY = "tokenizer.chat_template"
DEFAULT_N_PREDICT = 256

#: llama.cpp's default BOS and EOS ids per ``tokenizer.ggml.model`` (None: no such token), used when
#: the GGUF has no ``tokenizer.ggml.{bos,eos}_token_id``; "no_vocab"/"none" have no tokens at all.
DEFAULT_BOS_EOS: dict[str, tuple[int | None, int | None]] = {
    "llama": (1, 2), "bert": (101, None), "gpt2": (11, 11), "hybriddna": (11, 11), "whitespace": (11, 11),
    "t5": (None, 1), "rwkv": (None, None), "test": (None, None), "plamo2": (1, 2), "gemma4": (None, None),
}  # fmt: skip

#: Token texts llama.cpp's vocabulary loader marks as end of generation, whatever the GGUF says.
EOG_TEXTS = frozenset({
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<｜end▁of▁sentence｜>", "[e~[",
})  # fmt: skip

#: The special ids that also end generation: GGUF key suffix -> the texts llama.cpp looks for when
#: the key is absent (the EOT and EOM texts are all in EOG_TEXTS already, so only FIM needs them).
EOG_KEYS: dict[str, tuple[str, ...]] = {
    "eos_token_id": (),
    "eot_token_id": (),
    "eom_token_id": (),
    "fim_pad_token_id": ("<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"),
    "fim_rep_token_id": ("<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"),
    "fim_sep_token_id": ("<|file_sep|>",),
}


class ChatError(ModelError):
    """A chat that cannot be formatted: no tokenizer or template, or a template that fails or
    reaches outside the sandbox (one line naming the file)."""


@dataclass(frozen=True, slots=True)
class ChatPrompt:
    """A conversation formatted by the model's template: the text and llama.cpp's ids of it."""

    text: str
    tokens: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ChatReply:
    """The assistant's answer: its text and ids (the end-of-generation id left out; the
    generation keeps it) and whether such an id ended it before ``n_predict`` ran out."""

    text: str
    tokens: tuple[int, ...]
    stopped: bool
    prompt: ChatPrompt
    generation: Generation = field(repr=False)


# ------------------------------------------------------------------------------------- tokenizer
def _gguf(model: str | os.PathLike[str] | GGUFModel) -> GGUFModel:
    return model if isinstance(model, GGUFModel) else read_gguf(model)


def require_tokenizer(gguf: GGUFModel) -> list[str]:
    """The token texts, or a :class:`ChatError` when the GGUF carries no tokenizer to turn text
    into ids (``--tokens`` still runs such a model)."""
    md = gguf.metadata
    model, tokens = md.get("tokenizer.ggml.model"), md.get("tokenizer.ggml.tokens")
    if not isinstance(model, str) or not isinstance(tokens, list) or not tokens:
        missing = "tokenizer.ggml.model" if not isinstance(model, str) else "tokenizer.ggml.tokens"
        raise ChatError(
            f"{gguf.path}: the model has no tokenizer ({missing} is missing from its metadata); "
            "text cannot be tokenized, give token ids with --tokens"
        )
    if model in ("no_vocab", "none"):
        raise ChatError(f"{gguf.path}: the model has no tokenizer (tokenizer.ggml.model is {model!r})")
    if model not in DEFAULT_BOS_EOS:
        raise ChatError(
            f"{gguf.path}: tokenizer.ggml.model {model!r} is not a tokenizer llama.cpp knows "
            f"(expected one of {sorted(DEFAULT_BOS_EOS)})"
        )
    return tokens


def _special_id(md: Mapping[str, Any], suffix: str, default: int | None, n_vocab: int) -> int | None:
    """llama.cpp's reading of ``tokenizer.ggml.<suffix>``: an out-of-range default is dropped, an
    out-of-range value keeps the default."""
    if default is not None and not 0 <= default < n_vocab:
        default = None
    value = md.get(f"tokenizer.ggml.{suffix}")
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < n_vocab:
        return value
    return default


def special_token(gguf: GGUFModel, which: str) -> str:
    """The text of the ``"bos"`` or ``"eos"`` token ("" when the vocabulary has none)."""
    tokens = require_tokenizer(gguf)
    default = DEFAULT_BOS_EOS[gguf.metadata["tokenizer.ggml.model"]][("bos", "eos").index(which)]
    tid = _special_id(gguf.metadata, f"{which}_token_id", default, len(tokens))
    return "" if tid is None else tokens[tid]


def eog_ids(model: str | os.PathLike[str] | GGUFModel) -> frozenset[int]:
    """The ids that end generation, as llama.cpp's vocabulary loader decides: EOS, EOT, EOM, FIM
    and :data:`EOG_TEXTS` tokens, less its exceptions for gpt-oss, solar-open and plamo."""
    gguf = _gguf(model)
    tokens = require_tokenizer(gguf)
    md, n = gguf.metadata, len(tokens)
    by_text: dict[str, int] = {}
    for i, text in enumerate(tokens):
        by_text.setdefault(text, i)
    eos_default = DEFAULT_BOS_EOS[md["tokenizer.ggml.model"]][1]
    out = {i for i, text in enumerate(tokens) if text in EOG_TEXTS}
    for suffix, texts in EOG_KEYS.items():
        tid = _special_id(md, suffix, eos_default if suffix == "eos_token_id" else None, n)
        # absent from the GGUF: llama.cpp takes a token with one of the texts (if several match it
        # takes whichever its hash map visits first; here the lowest id)
        found = [by_text[t] for t in texts if t in by_text]
        if tid is None and found:
            tid = min(found)
        if tid is not None:
            out.add(tid)
    texts_of = {tokens[i]: i for i in out}
    calls = "<|call|>" in texts_of or "<|calls|>" in texts_of
    if "<|end|>" in texts_of and calls and ("<|return|>" in texts_of or "<|flush|>" in texts_of):
        out.discard(texts_of["<|end|>"])
    if "</s>" in texts_of and ("<|tool_response>" in texts_of or "<|plamo:eos|>" in texts_of):
        out.discard(texts_of["</s>"])
    return frozenset(out)


# -------------------------------------------------------------------------------------- template
def chat_template(model: str | os.PathLike[str] | GGUFModel) -> str:
    """The GGUF's ``tokenizer.chat_template`` (a :class:`ChatError` when it has none)."""
    gguf = _gguf(model)
    template = gguf.metadata.get(TEMPLATE_KEY)
    if not isinstance(template, str) or not template.strip():
        raise ChatError(
            f"{gguf.path}: the model has no chat template ({TEMPLATE_KEY} is missing from its "
            "metadata); use --prompt for plain text, or give a template with --chat-template-file"
        )
    return template


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def render(
    template: str,
    messages: str | Sequence[Mapping[str, Any]],
    *,
    bos_token: str = "",
    eos_token: str = "",
    source: str = "chat template",
) -> str:
    """``template`` rendered for ``messages`` in Jinja2's immutable sandbox by HF transformers' rules,
    within :mod:`ovkit.template`'s bounds; any failure is a one-line :class:`ChatError`."""
    from ovkit import template as jinja

    variables = {
        "messages": as_messages(messages),
        "add_generation_prompt": True,
        "bos_token": bos_token,
        "eos_token": eos_token,
    }
    try:
        return jinja.render(template, variables)
    except jinja.TemplateError as exc:
        raise ChatError(f"{source}: {exc}") from None


def as_messages(messages: str | Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """A question becomes one user message; a message list is checked for role and content."""
    if isinstance(messages, str):
        return [{"role": "user", "content": messages}]
    if not isinstance(messages, Sequence):
        raise ChatError(
            f"messages: expected a question or a list of messages, got a {type(messages).__name__}"
        )
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping):
            raise ChatError(
                f"message {i} is a {type(m).__name__} ({_one_line(repr(m))[:80]}), expected a mapping "
                "with a 'role' string and a 'content'"
            )
        if not isinstance(m.get("role"), str) or "content" not in m:
            raise ChatError(f"message {i} needs a 'role' string and a 'content' (got {dict(m)!r})")
        out.append(dict(m))
    if not out:
        raise ChatError("no messages given")
    return out


def format_chat(
    model: str | os.PathLike[str] | GGUFModel,
    messages: str | Sequence[Mapping[str, Any]],
    *,
    template: str | None = None,
) -> ChatPrompt:
    """``messages`` (a question or a message list) formatted with the model's template (or
    ``template``) plus the generation prompt, and tokenized by llama.cpp's tokenizer."""
    from ovkit.model import reference

    gguf = _gguf(model)
    require_tokenizer(gguf)
    source = str(gguf.path)
    text = render(
        chat_template(gguf) if template is None else template,
        as_messages(messages),
        bos_token=special_token(gguf, "bos"),
        eos_token=special_token(gguf, "eos"),
        source=source,
    )
    try:
        tokens = reference.tokenize(gguf.path, text, chat=True)
    except (reference.LlamaCppError, ModuleNotFoundError) as exc:
        raise ChatError(f"{source}: llama.cpp's tokenizer failed: {_one_line(exc)}") from None
    key = f"{gguf.architecture}.context_length"
    n_ctx_train = gguf.metadata.get(key)
    if isinstance(n_ctx_train, numbers.Integral) and 0 < int(n_ctx_train) < len(tokens):
        raise ChatError(
            f"{source}: the formatted prompt is {len(tokens):,} tokens, more than the model's training "
            f"context of {n_ctx_train:,} ({key})"
        )
    return ChatPrompt(text, tuple(tokens))


def read_template_file(path: str | os.PathLike[str]) -> str:
    """A chat template from a regular UTF-8 file of at most ``MAX_TEMPLATE_CHARS`` bytes
    (``--chat-template-file``); anything else is a one-line :class:`ChatError`, never a hang."""
    from ovkit.files import FileReadError, read_text
    from ovkit.template import MAX_TEMPLATE_CHARS

    try:
        return read_text(path, max_bytes=MAX_TEMPLATE_CHARS, what="a Jinja chat template")
    except FileReadError as exc:
        raise ChatError(str(exc)) from None


def chat(
    model: Model,
    messages: str | Sequence[Mapping[str, Any]],
    n_predict: int = DEFAULT_N_PREDICT,
    *,
    template: str | None = None,
) -> ChatReply:
    """Ask ``model`` (a question or a message list): format with its template, generate greedily
    until an end-of-generation id or ``n_predict`` tokens, and detokenize the answer."""
    from ovkit.model import reference

    n_predict = check_count("n_predict", n_predict)
    prompt = format_chat(model.gguf, messages, template=template)
    if len(prompt.tokens) + n_predict > model.n_ctx:
        raise ChatError(
            f"{model.gguf.path}: the formatted prompt is {len(prompt.tokens):,} tokens; with n_predict="
            f"{n_predict} it needs {len(prompt.tokens) + n_predict:,} positions, more than n_ctx={model.n_ctx}"
        )
    gen = model.generate(prompt.tokens, n_predict, stop=eog_ids(model.gguf))
    answer = gen.tokens[:-1] if gen.stopped else gen.tokens
    text = reference.detokenize(model.gguf.path, answer) if answer else ""
    return ChatReply(text, answer, gen.stopped, prompt, gen)
