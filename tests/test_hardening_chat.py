"""Chat templates rendered within bounds (issue 35, item 3): a template that loops for ever, one
whose output or memory runs away, a template file that is no regular file, a prompt longer than
the model's context: each a one-line ``ChatError`` naming the bound, within
:data:`BOUND_S`, in the API and in ``run-model --chat``; and a message list of strings a
``ChatError`` too (item 6).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ovkit.model import Model, synthetic
from ovkit.model import chat as ch

#: Seconds a runaway template may take to be refused.
BOUND_S = 10.0

LOOPS = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
HUGE_OUTPUT = "{{ 'x' * 2000000 }}"
HUGE_MEMORY = "{{ ' '.ljust(10000000000) | length }}"  # 10 GB in one C call, 11 characters out
SIMPLE = "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}{% endfor %}<|assistant|>"
HI = [{"role": "user", "content": "hi"}]
TIME_BOUND = "did not finish within 3 s (the bound on rendering time)"
OUTPUT_BOUND = "output passed the bound of 1,000,000 characters"


def within(seconds: float, call: Callable[[], Any]) -> BaseException | None:
    """What ``call`` raised (None: it returned), failing the test when it runs past ``seconds``
    (it is left running in a daemon thread: a runaway template cannot be stopped in-process)."""
    got: list[BaseException | None] = []

    def run() -> None:
        try:
            call()
            got.append(None)
        except BaseException as exc:  # noqa: BLE001 (handed to the test)
            got.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        pytest.fail(f"still running after {seconds} s")
    return got[0]


def chat_error(seconds: float, call: Callable[[], Any]) -> str:
    """The one-line message of the ``ChatError`` ``call`` raises within ``seconds``."""
    exc = within(seconds, call)
    assert isinstance(exc, ch.ChatError), repr(exc)
    assert "\n" not in str(exc)
    return str(exc)


@pytest.fixture(scope="module")
def model_file(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    made: dict[tuple[object, ...], Path] = {}

    def make(**kw: Any) -> Path:
        key = tuple(sorted(kw.items()))
        if key not in made:
            made[key] = synthetic("llama", tmp_path_factory.mktemp("models") / "llama.gguf", **kw)
        return made[key]

    return make


def cli(*argv: str, seconds: float = BOUND_S) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            [sys.executable, "-m", "ovkit", *argv], capture_output=True, text=True, timeout=seconds
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"ovkit {' '.join(argv)} did not end within {seconds} s")


def one_line_error(proc: subprocess.CompletedProcess[str], *wanted: str) -> str:
    assert proc.returncode == 2, proc.stdout
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    for text in wanted:
        assert text in lines[0], lines[0]
    return lines[0]


# ---------------------------------------------------------------------------------- the bounds
def test_a_looping_template_ends_with_the_time_bound() -> None:
    t0 = time.monotonic()
    message = chat_error(BOUND_S, lambda: ch.render(LOOPS, HI, source="loops.gguf"))
    assert message == f"loops.gguf: the chat template {TIME_BOUND}"
    assert time.monotonic() - t0 < BOUND_S


def test_a_runaway_output_ends_with_the_output_bound() -> None:
    message = chat_error(BOUND_S, lambda: ch.render(HUGE_OUTPUT, HI, source="big.gguf"))
    assert message == f"big.gguf: the chat template's {OUTPUT_BOUND}"
    # within the bounds a template renders as before
    assert ch.render(SIMPLE + "{{ ('x' * 999000) | length }}", HI) == "<|user|>hi<|assistant|>999000"


def test_a_runaway_allocation_ends_with_the_memory_bound() -> None:
    """No Python step to interrupt: one C call asks for 10 GB; the renderer's cap refuses it."""
    message = chat_error(BOUND_S, lambda: ch.render(HUGE_MEMORY, HI, source="fat.gguf"))
    assert message == "fat.gguf: the chat template needed more than the bound of 512 MiB of memory"


# ------------------------------------------------------------------------ from the GGUF, the CLI
def test_a_ggufs_looping_template_ends_in_chat_and_run_model(model_file: Callable[..., Path]) -> None:
    path = model_file(chat_template=LOOPS)
    model = Model(path, n_ctx=64)
    message = chat_error(BOUND_S, lambda: ch.chat(model, "hi", 4))
    assert message == f"{path}: the chat template {TIME_BOUND}"
    one_line_error(cli("run-model", str(path), "--chat", "hi", "-n", "2"), str(path), TIME_BOUND)
    # nothing was compiled for it
    assert model.sessions() == []


def test_a_2_million_character_template_ends_before_any_planning(model_file: Callable[..., Path]) -> None:
    path = model_file(chat_template=HUGE_OUTPUT)
    one_line_error(cli("run-model", str(path), "--chat", "hi"), str(path), OUTPUT_BOUND)
    template = model_file().parent / "huge.jinja"
    template.write_text(HUGE_OUTPUT)
    plain = model_file()
    proc = cli("run-model", str(plain), "--chat", "hi", "--chat-template-file", str(template))
    one_line_error(proc, OUTPUT_BOUND)


def test_template_files_must_be_regular_files_of_sane_size(
    model_file: Callable[..., Path], tmp_path: Path
) -> None:
    path = model_file()
    fifo = tmp_path / "template.fifo"
    os.mkfifo(fifo)
    big = tmp_path / "big.jinja"
    big.write_text("x" * (2 << 20))
    latin1 = tmp_path / "latin1.jinja"
    latin1.write_bytes(b"{{ 'caf\xe9' }}")
    for name, wanted in (
        (str(fifo), "is a FIFO, not a regular file"),
        ("/dev/zero", "is a character device, not a regular file"),
        (str(tmp_path), "is a directory, not a regular file"),
        (str(big), "2.0 MiB is more than the 1.0 MiB a Jinja chat template may take"),
        (str(latin1), "not UTF-8 text (byte 0xe9 at offset 7"),
    ):
        message = chat_error(BOUND_S, lambda name=name: ch.read_template_file(name))  # type: ignore[misc]
        assert message.startswith(f"{name}: {wanted}")
        proc = cli("run-model", str(path), "--chat", "hi", "--chat-template-file", name)
        one_line_error(proc, name, wanted)


# ------------------------------------------------------------------------------------ messages
def test_a_message_list_of_strings_is_a_chat_error(model_file: Callable[..., Path]) -> None:
    path = model_file(chat_template=SIMPLE)
    with pytest.raises(ch.ChatError, match=r"^message 0 is a str \('hello'\), expected a mapping"):
        ch.format_chat(path, ["hello", "world"])
    with pytest.raises(
        ch.ChatError, match=r"^messages: expected a question or a list of messages, got a int"
    ):
        ch.format_chat(path, 42)  # type: ignore[arg-type]


# ------------------------------------------------------------------------- prompt tokens vs context
def test_the_prompts_tokens_are_checked_against_the_context(model_file: Callable[..., Path]) -> None:
    """A template's output within the character bound but past the model's training context
    (64 here) is refused after tokenizing, before anything is planned: in the API and the CLI."""
    path = model_file(chat_template=SIMPLE, n_ctx_train=64)
    long = "hello " * 100
    with pytest.raises(ch.ChatError) as got:
        ch.format_chat(path, long)
    assert str(got.value).startswith(f"{path}: the formatted prompt is ")
    assert str(got.value).endswith(
        "tokens, more than the model's training context of 64 (llama.context_length)"
    )
    proc = cli("run-model", str(path), "--chat", long)
    one_line_error(proc, str(path), "more than the model's training context of 64")
    # chat(): the prompt and n_predict against the model's own n_ctx, before generating
    model = Model(path, n_ctx=32)
    prompt = ch.format_chat(path, "hi")
    message = chat_error(BOUND_S, lambda: ch.chat(model, "hi", 40))
    assert message == (
        f"{path}: the formatted prompt is {len(prompt.tokens)} tokens; with n_predict=40 it needs "
        f"{len(prompt.tokens) + 40} positions, more than n_ctx=32"
    )
    assert model.sessions() == []
