"""``ovkit run-model FILE.gguf (--tokens "1 5 9" | --prompt TEXT | --chat QUESTION) -n 32``: run
and time a model (``--chat``: with the GGUF's chat template, stopping at end of generation) and,
with ``--compare``, the logit NMSE per position and greedy agreement against llama.cpp.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

import numpy as np

from ovkit.model.precision import PRECISIONS
from ovkit.report import format_duration, format_rate

if TYPE_CHECKING:
    from ovkit.model.footprint import ContextLimit

COMPARE_CHOICES = ("llama.cpp", "upstream")


def add_cli_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="path of a .gguf model")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--tokens", help='prompt token ids, e.g. "1 5 9"')
    src.add_argument("--prompt", help="prompt text (tokenized by llama.cpp's tokenizer)")
    src.add_argument(
        "--chat",
        metavar="QUESTION",
        help="a user message, formatted by the model's chat template; stops at end of generation",
    )
    p.add_argument(
        "--chat-template-file", metavar="FILE", help="with --chat: this Jinja template, not the GGUF's"
    )
    p.add_argument("-n", "--n-predict", type=int, default=32, help="tokens to generate (default 32)")
    p.add_argument("--device", help="OpenVINO device (default: what GGML_OPENVINO_DEVICE selects)")
    p.add_argument("--simulate", metavar="PROFILE", help="use a simulated device set (e.g. laptop)")
    p.add_argument("--compare", choices=COMPARE_CHOICES, help="compare logits with llama.cpp")
    p.add_argument("--ctx-size", type=int, default=0, help="KV cache cells (default: prompt + n, >= 256)")
    p.add_argument("--flash-attn", choices=("on", "off"), default="on", help="as llama.cpp -fa")
    p.add_argument(
        "--precision",
        choices=tuple(PRECISIONS),
        default="exact",
        help="exact (f32), device (its default) or ggml (f32 with llama.cpp CPU's q8 activations)",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of text")


def parse_tokens(text: str) -> list[int]:
    """``"1 5 9"`` or ``"1,5,9"`` to ids; a clear error naming the bad item."""
    out = []
    for item in text.replace(",", " ").split():
        try:
            out.append(int(item))
        except ValueError:
            raise ValueError(
                f'--tokens: {item!r} is not a token id (expected integers like "1 5 9")'
            ) from None
    if not out:
        raise ValueError("--tokens: no token ids given")
    return out


def prompt_ids(gguf: Any, tokens: str | None, prompt: str | None) -> list[int]:
    """``--tokens`` parsed, or ``--prompt`` tokenized by llama.cpp, within the vocabulary; a
    :class:`UsageError` naming what is wrong."""
    from ovkit.model import chat, reference
    from ovkit.model.limits import model_hparams, token_ids
    from ovkit.usage import UsageError

    try:
        if prompt is not None:
            chat.require_tokenizer(gguf)
            ids = reference.tokenize(gguf.path, prompt)
        else:
            ids = parse_tokens(tokens or "")
        token_ids(ids, model_hparams(gguf).n_vocab)
    except ValueError as exc:  # ChatError (a ModelError), a bad --tokens or an id past the vocabulary
        raise UsageError(str(exc)) from None
    except (reference.LlamaCppError, ModuleNotFoundError) as exc:
        raise UsageError(f"--prompt needs llama-cpp-python's tokenizer: {exc}") from None
    return ids


def context_size(n_prompt: int, n_predict: int, ctx_size: int, limit: ContextLimit) -> int:
    """The KV cache positions of a run: ``--ctx-size``, else the prompt and ``-n`` (at least 256,
    within the limit); a :class:`UsageError` naming the value when they do not fit."""
    from ovkit.usage import UsageError, check_count

    if ctx_size:
        check_count("--ctx-size", ctx_size, high=limit.positions, bound=limit.reason)
        bound = f"--ctx-size {ctx_size} less the prompt's {n_prompt:,} tokens"
    else:
        bound = f"the context limit of {limit.describe()}, less the prompt's {n_prompt:,} tokens"
    room = ctx_size or limit.positions
    if n_prompt > room:
        raise UsageError(
            f"the prompt is {n_prompt:,} tokens, more than "
            + (f"--ctx-size {ctx_size}" if ctx_size else limit.describe())
        )
    check_count("-n", n_predict, high=room - n_prompt, bound=bound)
    return ctx_size or min(max(256, n_prompt + n_predict), limit.positions)


def compare(gen: Any, ref: Any) -> dict[str, Any]:
    """NMSE of ovkit's logits against the reference's per position, and the greedy agreement."""
    from ovkit.oracle import nmse

    ours = np.concatenate([gen.prompt_logits, gen.decode_logits])
    # a prefill that kept only its last position's logits lines up with llama.cpp's last ones; a
    # generation stopped at an end-of-generation id did not feed it: llama.cpp's last step goes
    n_prompt = len(gen.prompt_logits)
    theirs = np.concatenate([ref.prompt_logits[-n_prompt:], ref.decode_logits])[: len(ours)]
    per_pos = [float(nmse(a, b)) for a, b in zip(ours, theirs, strict=True)]
    ours_greedy = np.concatenate([gen.prompt_logits[-1:], gen.decode_logits]).argmax(axis=1)
    ref_tokens = ref.tokens[: len(ours_greedy)]
    agree = int((ours_greedy == np.asarray(ref_tokens)).sum())
    return {
        "nmse_per_position": per_pos,
        "max_nmse": max(per_pos),
        "greedy_agree": agree,
        "greedy_total": len(ref_tokens),
        "reference_prefill_tok_s": ref.prefill_tok_s,
        "reference_decode_tok_s": ref.decode_tok_s,
    }


def cli(args: argparse.Namespace) -> int:
    from ovkit.gguf import read_gguf
    from ovkit.model import chat, reference
    from ovkit.model.arch import ModelError
    from ovkit.model.footprint import context_limit
    from ovkit.model.limits import model_hparams, token_ids
    from ovkit.model.runner import Model
    from ovkit.usage import UsageError, check_count, make_core

    core = make_core(args.simulate)
    check_count("-n", args.n_predict)
    check_count("--ctx-size", args.ctx_size)
    if args.chat_template_file is not None and args.chat is None:
        raise UsageError("--chat-template-file goes with --chat")
    fa = args.flash_attn == "on"
    # the file, its architecture, sizes, tokenizer and template are checked before anything is
    # compiled or run (the tensors when the model is built, still before it runs)
    try:
        gguf = read_gguf(args.file)
        hp = model_hparams(gguf)
    except ValueError as exc:  # ModelError, GGUFError: name the file already
        raise UsageError(str(exc)) from None
    stop: frozenset[int] = frozenset()
    if args.chat is None:
        prompt = prompt_ids(gguf, args.tokens, args.prompt)
    else:
        try:
            template = (
                None if args.chat_template_file is None else chat.read_template_file(args.chat_template_file)
            )
            prompt = list(chat.format_chat(gguf, args.chat, template=template).tokens)
            stop = chat.eog_ids(gguf)
            token_ids(prompt, hp.n_vocab)
        except ValueError as exc:  # a ChatError, or an id past the vocabulary
            raise UsageError(str(exc)) from None
    n_ctx = context_size(len(prompt), args.n_predict, args.ctx_size, context_limit(hp, core=core))
    try:
        model = Model(
            gguf, device=args.device, core=core, n_ctx=n_ctx, flash_attn=fa, precision=args.precision
        )
        gen = model.generate(prompt, args.n_predict, stop=stop, all_logits=bool(args.compare))
    except (ModelError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    simulated = " (SIMULATED)" if getattr(core, "simulated", False) else ""
    result: dict[str, Any] = {
        "device": model.device + simulated,
        "prompt": list(prompt),
        "tokens": list(gen.tokens),
        "prefill_tok_s": gen.prefill_tok_s,
        "decode_tok_s": gen.decode_tok_s,
        "compile_s": gen.compile_s,
    }
    if args.prompt is not None:  # text out through the same tokenizer
        result["text"] = reference.detokenize(args.file, gen.tokens)
    if args.chat is not None:  # the answer: up to the end-of-generation id, not including it
        answer = gen.tokens[:-1] if gen.stopped else gen.tokens
        result["text"] = reference.detokenize(args.file, answer) if answer else ""
        result["stopped"] = gen.stopped
    if args.compare:
        ref = reference.run_reference(
            args.file, prompt, gen.tokens, n_ctx=n_ctx, flash_attn=fa, upstream=args.compare == "upstream"
        )
        result["compare"] = {"against": args.compare, **compare(gen, ref)}
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    hp = model.hp
    print(f"model: {args.file} ({hp.arch}, {hp.n_layer} layers, n_embd {hp.n_embd}) on {result['device']}")
    print(f"prompt ({len(prompt)} tokens): {' '.join(map(str, prompt))}")
    print(f"generated ({len(gen.tokens)}): {' '.join(map(str, gen.tokens))}")
    if args.chat is not None:
        end = (
            f"stopped at {gguf.metadata['tokenizer.ggml.tokens'][gen.tokens[-1]]} (id {gen.tokens[-1]})"
            if gen.stopped
            else f"no end of generation within -n {args.n_predict}"
        )
        print(f"chat ({end}):")
        print(result["text"])
    elif "text" in result:
        print(f"text: {result['text']!r}")
    print(
        f"prefill: {format_rate(gen.prefill_tok_s)}   decode: {format_rate(gen.decode_tok_s)}   "
        f"compile: {format_duration(gen.compile_s)} ({len(model.sessions())} shape buckets, not in the speeds)"
    )
    if args.compare:
        c = result["compare"]
        print(
            f"vs {args.compare}: prefill {c['reference_prefill_tok_s']:.1f} tok/s, decode {c['reference_decode_tok_s']:.1f} tok/s"
        )
        for i, v in enumerate(c["nmse_per_position"]):
            kind = "prompt" if i < len(prompt) else "decode"
            print(f"  position {i:4d} ({kind}): logit NMSE {v:.2e}")
        print(f"greedy tokens agree: {c['greedy_agree']}/{c['greedy_total']}, max NMSE {c['max_nmse']:.2e}")
    sys.stdout.flush()
    return 0
