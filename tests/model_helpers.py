"""What the model tests share: the real models (fetched, or a failure that says how to fetch
them), a model started in a fresh process, and the compiled-model cache's entries and warnings."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Collection
from pathlib import Path
from typing import Any

import pytest


def real_model(name: str) -> Path:
    """A fetched real model (``ovkit.model.fetch``), or a failure naming the command that fetches
    it: a missing model never passes silently and is never a skip."""
    from ovkit.model.fetch import MissingModelError
    from ovkit.model.fetch import real_model as fetched

    try:
        return fetched(name)
    except MissingModelError as exc:
        missing = str(exc)
    pytest.fail(missing, pytrace=False)


def fresh_start(script: str, path: Path, cache_dir: Path | None) -> tuple[dict[str, Any], str]:
    """``script`` run on ``path`` in a new interpreter with ``cache_dir`` as
    GGML_OPENVINO_COMPILED_MODEL_CACHE_DIR (a first or second start; None: no cache): the JSON of
    its last line of output, and its log."""
    env = dict(os.environ)
    if cache_dir is not None:
        env["GGML_OPENVINO_COMPILED_MODEL_CACHE_DIR"] = str(cache_dir)
    proc = subprocess.run(
        [sys.executable, "-c", script, str(path)], env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.splitlines()[-1]), proc.stderr


def cache_entry(blobs: Path, before: Collection[Path] = ()) -> Path:
    """The one blob of the compiled-model cache written besides ``before``."""
    (blob,) = set(blobs.glob("*.blob")) - set(before)
    return blob


def cache_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The compiled-model cache's warnings logged so far."""
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.WARNING and "model cache" in r.getMessage()
    ]


#: llama.cpp's own answers the chat tests compare ovkit's with, computed in a child (llama.cpp's
#: ggml kept apart from ggml-python's): its end-of-generation ids and its built-in chat formats.
_LLAMA_ORACLE = r"""
import ctypes, json, sys
import llama_cpp as L
req = json.loads(sys.argv[1])
if req["op"] == "eog":
    llm = L.Llama(req["path"], vocab_only=True, verbose=False)  # kept: the vocab lives in it
    vocab = L.llama_model_get_vocab(llm.model)
    print(json.dumps([i for i in range(L.llama_vocab_n_tokens(vocab)) if L.llama_vocab_is_eog(vocab, i)]))
else:
    keep = [(m["role"].encode(), m["content"].encode()) for m in req["messages"]]
    arr = (L.llama_chat_message * len(keep))(*(L.llama_chat_message(r, c) for r, c in keep))
    size = 4096 + 2 * sum(len(r) + len(c) for r, c in keep)
    buf = ctypes.create_string_buffer(size)
    n = L.llama_chat_apply_template(req["template"].encode(), arr, len(keep), True, buf, size)
    assert 0 <= n <= size, f"llama_chat_apply_template returned {n}"
    print(json.dumps(buf.raw[:n].decode()))
"""


def _llama_oracle(request: dict[str, Any]) -> Any:
    proc = subprocess.run(
        [sys.executable, "-c", _LLAMA_ORACLE, json.dumps(request)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def llama_eog_tokens(path: Path) -> frozenset[int]:
    """Every id llama.cpp's vocabulary of the model marks as end of generation."""
    return frozenset(_llama_oracle({"op": "eog", "path": str(path)}))


def llama_chat_format(template: str, messages: list[dict[str, str]]) -> str:
    """``messages`` formatted by llama.cpp's built-in chat format for ``template`` (C++, no Jinja),
    with the generation prompt."""
    return str(_llama_oracle({"op": "chat", "template": template, "messages": messages}))
