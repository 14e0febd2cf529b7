"""ovkit.model.chat and ``run-model --chat``: the GGUF's template rendered sandboxed, prompts as
llama.cpp formats and tokenizes them, its end-of-generation ids, and one-line errors on bad input.

The oracle is llama.cpp (llama-cpp-python, in a subprocess): ``llama_vocab_is_eog`` for the stop
ids, ``llama_chat_apply_template`` (its built-in C++ chat formats) and its tokenizer for prompts.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from model_helpers import llama_chat_format, llama_eog_tokens, real_model

from ovkit.cli import main
from ovkit.gguf import read_gguf
from ovkit.model import Model, reference, synthetic
from ovkit.model import chat as ch
from ovkit.model.cli import compare

PROMPT = [1, 17, 42, 99, 7, 300, 256, 12]
SIMPLE_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}</s>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)

#: Gemma 3's chat template as Google ships it (tokenizer_config.json of the Gemma 3 models; the
#: Gemma-3-270M GGUF used here carries none, so it is given with ``template=``).
GEMMA3_TEMPLATE = """{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- elif message['content'] is iterable -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'image' -%}
                {{ '<start_of_image>' }}
            {%- elif item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{ raise_exception("Invalid content type") }}
    {%- endif -%}
    {{ '<end_of_turn>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\n'}}
{%- endif -%}
"""

CONVERSATION = [
    {"role": "system", "content": "You answer in one short sentence."},
    {"role": "user", "content": "What is the capital of France?"},
    {"role": "assistant", "content": "Paris."},
    {"role": "user", "content": "And of Italy?"},
]


def _hostile(marker: Path) -> list[str]:
    """Templates that reach for Python internals; the last ones would create ``marker``."""
    return [
        "{{ ''.__class__.__mro__[1].__subclasses__() }}",
        "{{ ''.__class__ }}",  # renders "" in the stock sandbox; refused here all the same
        "{{ messages.append({'role': 'user', 'content': 'x'}) }}",  # the immutable sandbox
        "{{ raise_exception.__globals__ }}",
        f"{{{{ cycler.__init__.__globals__.os.popen('touch {marker}').read() }}}}",
        f"{{{{ joiner.__init__.__globals__['os'].system('touch {marker}') }}}}",
    ]


@pytest.fixture(scope="module")
def model_file(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    made: dict[tuple[object, ...], Path] = {}

    def make(**kw: object) -> Path:
        key = tuple(sorted(kw.items()))
        if key not in made:
            path = tmp_path_factory.mktemp("models") / "llama.gguf"
            made[key] = synthetic("llama", path, **kw)  # type: ignore[arg-type]
        return made[key]

    return make


def _vocab_only_gguf(path: Path, specials: list[str], **ids: int) -> Path:
    """A GGUF llama.cpp loads with ``vocab_only``: llama hparams, an SPM vocabulary of
    ``<unk> <s> </s>``, ``specials`` (control tokens), the bytes and a few pieces; no tensors."""
    import gguf

    pieces = ["<unk>", "<s>", "</s>", *specials] + [f"<0x{i:02X}>" for i in range(256)] + ["▁a", "a"]
    types = [2, 3, 3] + [3] * len(specials) + [6] * 256 + [1, 1]
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_context_length(64)
    w.add_embedding_length(8)
    w.add_block_count(1)
    w.add_feed_forward_length(16)
    w.add_head_count(2)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_tokenizer_model("llama")
    w.add_token_list(pieces)
    w.add_token_scores([0.0] * len(pieces))
    w.add_token_types(types)
    for key, value in ids.items():
        w.add_uint32(f"tokenizer.ggml.{key}", value)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


# ------------------------------------------------------------------------- end of generation
#: Vocabularies that exercise each part of llama.cpp's end-of-generation rule.
EOG_VOCABS: dict[str, tuple[list[str], dict[str, int]]] = {
    "texts": (["<|im_end|>", "<end_of_turn>", "<|eot_id|>", "<|im_start|>"], {}),
    "end alone stays": (["<|end|>"], {}),
    "end goes beside return and call": (["<|end|>", "<|return|>", "<|call|>"], {}),
    "fim ids found by text": (["<fim-pad>", "<|repo_name|>", "<|file_sep|>", "<|fim_prefix|>"], {}),
    "normal </s> beside tool_response": (["<|tool_response>"], {}),
    "ids from the GGUF": (["<x>", "<y>"], {"eos_token_id": 3, "eot_token_id": 4, "eom_token_id": 99999}),
}


@pytest.mark.parametrize("case", sorted(EOG_VOCABS))
def test_eog_ids_follow_llama_cpps_rule(tmp_path: Path, case: str) -> None:
    specials, ids = EOG_VOCABS[case]
    path = _vocab_only_gguf(tmp_path / "vocab.gguf", specials, **ids)
    assert ch.eog_ids(path) == llama_eog_tokens(path)


@pytest.mark.parametrize("name", ["smollm2-135m", "gemma3-270m"])
def test_eog_ids_of_real_models_are_llama_cpps(name: str) -> None:
    path = real_model(name)
    eog = ch.eog_ids(path)
    assert eog == llama_eog_tokens(path)
    tokens = read_gguf(path).metadata["tokenizer.ggml.tokens"]
    end_of_turn = {"smollm2-135m": "<|im_end|>", "gemma3-270m": "<end_of_turn>"}[name]
    assert end_of_turn in {tokens[i] for i in eog}


def test_generate_stops_at_a_stop_id_without_feeding_it(model_file: Callable[..., Path]) -> None:
    model = Model(model_file(), n_ctx=64)
    full = model.generate(PROMPT, 12)
    k = next(i for i in range(2, 12) if full.tokens[i] not in full.tokens[:i])  # first of its id
    cut = model.generate(PROMPT, 12, stop={full.tokens[k]}, all_logits=True)
    assert cut.stopped and not full.stopped
    assert cut.tokens == full.tokens[: k + 1]
    assert len(cut.decode_logits) == k  # tokens[0..k-1] fed, the stop id not
    np.testing.assert_array_equal(cut.decode_logits, full.decode_logits[:k])
    # --compare of a stopped run: llama.cpp is fed the stop id too, its extra position is left out
    c = compare(cut, reference.run_reference(model_file(), PROMPT, cut.tokens, n_ctx=64))
    assert c["greedy_agree"] == c["greedy_total"] == k + 1 and c["max_nmse"] < 1e-5


# ---------------------------------------------------------------------------- prompt formatting
def test_smollm2_chat_prompt_is_llama_cpps() -> None:
    """The GGUF's own chatml template, rendered by ovkit, gives llama.cpp's text (its built-in
    chatml format) and ids; without a system message the template adds SmolLM's own."""
    path = real_model("smollm2-135m")
    template = ch.chat_template(path)
    ours = ch.format_chat(path, CONVERSATION)
    theirs = llama_chat_format(template, CONVERSATION)
    assert ours.text == theirs
    assert list(ours.tokens) == reference.tokenize(path, theirs, chat=True)
    assert ours.tokens[:3] == (1, 9690, 198)  # <|im_start|> system \n: the specials parsed
    assert ours.tokens[-4:] == (1, 520, 9531, 198)  # <|im_start|> assistant \n: the generation prompt
    plain = ch.format_chat(path, "What is the capital of France?")
    assert plain.text.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")


def test_gemma3_chat_prompt_is_llama_cpps() -> None:
    """Gemma 3's template (``<start_of_turn>``, the system message merged into the first user
    turn, ``<bos>`` written by the template): llama.cpp's built-in gemma format and its ids, BOS
    once (llama.cpp adds it, so the template's own ``<bos>`` text is dropped as llama.cpp does)."""
    path = real_model("gemma3-270m")
    ours = ch.format_chat(path, CONVERSATION, template=GEMMA3_TEMPLATE)
    theirs = llama_chat_format(GEMMA3_TEMPLATE, CONVERSATION)
    assert ours.text == "<bos>" + theirs
    assert list(ours.tokens) == reference.tokenize(path, theirs, chat=True)
    assert ours.tokens[:3] == (2, 105, 2364)  # <bos> <start_of_turn> user
    assert ours.tokens.count(2) == 1
    with pytest.raises(ch.ChatError, match=r"refused the messages: Conversation roles must alternate"):
        ch.format_chat(path, [CONVERSATION[1], CONVERSATION[2], CONVERSATION[2]], template=GEMMA3_TEMPLATE)


# --------------------------------------------------------------------------------------- sandbox
def test_hostile_templates_are_refused_and_nothing_runs(tmp_path: Path) -> None:
    marker = tmp_path / "PWNED"
    for template in _hostile(marker):
        with pytest.raises(
            ch.ChatError, match=r"^evil\.gguf: the chat template tried to access an unsafe attribute"
        ):
            ch.render(template, [{"role": "user", "content": "hi"}], source="evil.gguf")
    assert not marker.exists()
    # what templates may use works: the helpers HF transformers and llama-cpp-python provide
    ok = ch.render(
        "{{ bos_token }}{{ messages | tojson }}{{ strftime_now('%Y') | length }}{{ eos_token }}",
        [{"role": "user", "content": "hi"}],
        bos_token="<s>",
        eos_token="</s>",
    )
    assert ok == '<s>[{"role": "user", "content": "hi"}]4</s>'


def test_hostile_template_in_a_gguf_is_a_one_line_error(
    model_file: Callable[..., Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    marker = tmp_path / "PWNED"
    hostile = _hostile(marker)
    path = model_file(chat_template=hostile[-2])
    assert main(["run-model", str(path), "--chat", "hi", "-n", "2"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1
    assert err.startswith(f"ovkit: error: {path}: the chat template tried to access an unsafe attribute")
    template_file = tmp_path / "evil.jinja"
    template_file.write_text(hostile[-1])
    plain = model_file()
    args = ["run-model", str(plain), "--chat", "hi", "--chat-template-file", str(template_file)]
    assert main(args) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "unsafe attribute" in err
    assert not marker.exists()


# ------------------------------------------------------------------------------------ run-model
def test_run_model_chat_with_a_template(
    model_file: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """``--chat`` feeds the formatted prompt's ids and prints the answer's text; the Python API
    gives the same prompt and ids."""
    path = model_file(chat_template=SIMPLE_TEMPLATE)
    assert main(["run-model", str(path), "--chat", "hello world", "-n", "3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    prompt = ch.format_chat(path, "hello world")
    assert prompt.text == "<|user|>hello world</s><|assistant|>"
    assert out["prompt"] == list(prompt.tokens) == reference.tokenize(path, prompt.text, chat=True)
    assert out["text"] == reference.detokenize(path, out["tokens"][:-1] if out["stopped"] else out["tokens"])
    reply = ch.chat(Model(path, n_ctx=256), "hello world", 3)  # the CLI's n_ctx: the same buckets
    assert reply.prompt == prompt and reply.generation.tokens == tuple(out["tokens"])
    assert main(["run-model", str(path), "--chat", "hello world", "-n", "3"]) == 0
    printed = capsys.readouterr().out
    assert f"chat (no end of generation within -n 3):\n{out['text']}\n" in printed


def _error_line(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """Run ``ovkit run-model ARGS``: exit code 2, nothing on stdout, one line on stderr."""
    assert main(["run-model", *args]) == 2
    out, err = capsys.readouterr()
    assert out == "", out
    assert err.count("\n") == 1, err
    return err


def test_bad_input_is_one_line_naming_the_file(
    model_file: Callable[..., Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import gguf

    other = tmp_path / "mamba.gguf"
    w = gguf.GGUFWriter(str(other), "mamba")
    w.add_tensor("token_embd.weight", np.zeros((8, 4), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    for flag in ("--chat", "--prompt"):
        err = _error_line(capsys, str(other), flag, "hi")
        assert f"{other}: architecture 'mamba' is not supported" in err
    with pytest.raises(ValueError, match=rf"{other}: architecture 'mamba' is not supported"):
        Model(other)

    no_tokenizer = model_file(tokenizer=False)
    for flag in ("--chat", "--prompt"):
        err = _error_line(capsys, str(no_tokenizer), flag, "hi")
        assert f"{no_tokenizer}: the model has no tokenizer (tokenizer.ggml.model is missing" in err
    assert main(["run-model", str(no_tokenizer), "--tokens", "1 5 9", "-n", "2", "--json"]) == 0  # ids: fine
    assert len(json.loads(capsys.readouterr().out)["tokens"]) == 2

    err = _error_line(capsys, str(model_file()), "--chat", "hi")
    assert f"{model_file()}: the model has no chat template (tokenizer.chat_template is missing" in err
    err = _error_line(capsys, str(model_file()), "--prompt", "hi", "--chat-template-file", "x.jinja")
    assert "--chat-template-file goes with --chat" in err
    err = _error_line(
        capsys, str(model_file()), "--chat", "hi", "--chat-template-file", str(tmp_path / "none.jinja")
    )
    assert f"{tmp_path / 'none.jinja'}: no such file (expected a Jinja chat template)" in err


def test_bad_real_files_are_one_line_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A truncated SmolLM2 (its metadata whole, its tensors cut) and Gemma-3-270M, whose GGUF has
    no chat template."""
    cut = tmp_path / "SmolLM2-cut.gguf"
    with real_model("smollm2-135m").open("rb") as f:
        cut.write_bytes(f.read(3_000_000))
    for flag in ("--chat", "--prompt"):
        err = _error_line(capsys, str(cut), flag, "hi")
        assert f"{cut}: tensor 'token_embd.weight'" in err and "truncated or corrupt" in err
    gemma = real_model("gemma3-270m")
    err = _error_line(capsys, str(gemma), "--chat", "hi")
    assert f"{gemma}: the model has no chat template" in err


@pytest.mark.slow
def test_chat_on_smollm2_stops_at_im_end(capsys: pytest.CaptureFixture[str]) -> None:
    """SmolLM2-135M-Instruct answers a short question and stops at ``<|im_end|>`` (id 2) long
    before -n runs out; the answer is the text before it (compiles the model: ~1-2 min)."""
    path = real_model("smollm2-135m")
    n = 48
    assert (
        main(["run-model", str(path), "--chat", "What is the capital of France?", "-n", str(n), "--json"])
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    tokens = read_gguf(path).metadata["tokenizer.ggml.tokens"]
    assert out["stopped"] and tokens[out["tokens"][-1]] == "<|im_end|>"
    assert len(out["tokens"]) < n // 2
    assert "Paris" in out["text"] and "<|im_end|>" not in out["text"]
