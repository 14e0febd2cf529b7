"""llama.cpp itself as the reference: llama-cpp-python run in a subprocess.

The subprocess keeps llama.cpp's ggml apart from ggml-python's and a crash from the caller (a
:class:`LlamaCppError`); ``upstream=True`` runs the OpenVINO build ``scripts/install-upstream``
puts aside.  ``python -m ovkit.model.reference REQUEST.json`` is the subprocess side.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ovkit.errors import OvkitError

if TYPE_CHECKING:
    from ovkit.model.runner import Generation

DEFAULT_THREADS = 2


class LlamaCppError(OvkitError, RuntimeError):
    """llama.cpp failed or crashed in its subprocess (the signal or exit code and the stderr tail in
    the message)."""


def upstream_env() -> dict[str, str]:
    """The environment whose ``llama_cpp`` is the OpenVINO build (clear error when it is absent)."""
    from ovkit.upstream.build import llama_openvino_env

    try:
        return llama_openvino_env()
    except RuntimeError as exc:
        raise LlamaCppError(str(exc)) from None


def run_llama_child(
    module: str, request: dict[str, Any], tmp: Path, *, upstream: bool, timeout: float, **env: str
) -> str:
    """``python -m module REQUEST.json`` (``request`` written in ``tmp``) on llama-cpp-python's CPU
    build or, with ``upstream``, its OpenVINO one; its stdout (``child.ChildError`` when it dies)."""
    from ovkit import child
    from ovkit.native import sigill_hint_for

    req = tmp / "request.json"
    req.write_text(json.dumps(request))
    base = upstream_env() if upstream else dict(os.environ)
    return child.run(
        [sys.executable, "-m", module, str(req)],
        env={**base, **env},
        timeout=timeout,
        # why the build most likely died of SIGILL here and how to rebuild it
        sigill_hint=partial(
            sigill_hint_for, "llama-cpp-python-openvino" if upstream else "llama-cpp-python-cpu"
        ),
    )


def _run(request: dict[str, Any], upstream: bool, timeout: float) -> dict[str, Any]:
    from ovkit import child

    with tempfile.TemporaryDirectory(prefix="ovkit-llamacpp-") as tmp:
        out = Path(tmp) / "out.npz"
        try:
            run_llama_child(
                "ovkit.model.reference",
                {**request, "out": str(out)},
                Path(tmp),
                upstream=upstream,
                timeout=timeout,
            )
        except child.ChildTimedOut:
            raise LlamaCppError(f"llama.cpp did not finish within {timeout:.0f} s") from None
        except child.ChildCrashed as exc:
            tail = "\n".join(exc.death.lines()[-8:])
            raise LlamaCppError(f"llama.cpp subprocess failed ({exc.death.describe()}):\n{tail}") from None
        with np.load(out) as data:
            return {k: data[k] for k in data.files}


def run_reference(
    path: str | os.PathLike[str],
    prompt: Sequence[int],
    fed: Sequence[int],
    *,
    n_ctx: int = 512,
    flash_attn: bool = True,
    n_threads: int = DEFAULT_THREADS,
    n_batch: int = 512,
    upstream: bool = False,
    timeout: float = 600.0,
) -> Generation:
    """Evaluate ``prompt`` then each id of ``fed`` one at a time with llama.cpp (its CPU backend;
    ``upstream=True``: the OpenVINO build, which places the layers on its device); ``tokens``:
    its greedy pick after the prompt and after each fed id."""
    from ovkit.model.runner import Generation

    out = _run(
        {
            "op": "eval",
            "path": str(path),
            "prompt": [int(t) for t in prompt],
            "fed": [int(t) for t in fed],
            "n_ctx": n_ctx,
            "flash_attn": flash_attn,
            "n_threads": n_threads,
            "n_batch": n_batch,
            "upstream": upstream,
        },
        upstream,
        timeout,
    )
    return Generation(
        tuple(int(t) for t in prompt),
        tuple(int(t) for t in out["tokens"]),
        out["prompt_logits"],
        out["decode_logits"],
        float(out["times"][0]),
        float(out["times"][1]),
    )


def tokenize(path: str | os.PathLike[str], text: str, *, chat: bool = False) -> list[int]:
    """``text`` to ids with llama.cpp's tokenizer of the model; ``chat=True``: special tokens parsed
    and a leading BOS text dropped when llama.cpp adds BOS itself."""
    out = _run({"op": "tokenize", "path": str(path), "text": text, "chat": chat}, False, 120.0)
    return [int(t) for t in out["tokens"]]


def detokenize(path: str | os.PathLike[str], tokens: Sequence[int]) -> str:
    """Ids to text with llama.cpp's tokenizer of the model."""
    out = _run({"op": "detokenize", "path": str(path), "tokens": list(map(int, tokens))}, False, 120.0)
    return bytes(out["text"]).decode("utf-8", "replace")


# ------------------------------------------------------------------------------ subprocess side
def _serve(request: dict[str, Any]) -> dict[str, np.ndarray]:
    import time

    import llama_cpp

    op = request["op"]
    if op in ("tokenize", "detokenize"):
        llm = llama_cpp.Llama(request["path"], vocab_only=True, verbose=False)
        vocab = llama_cpp.llama_model_get_vocab(llm.model)
        if op == "tokenize":
            text = request["text"].encode()
            if request.get("chat"):
                bos_id = llama_cpp.llama_vocab_bos(vocab)
                bos = llama_cpp.llama_vocab_get_text(vocab, bos_id) if bos_id >= 0 else b""
                if llama_cpp.llama_vocab_get_add_bos(vocab) and bos and text.startswith(bos):
                    text = text[len(bos) :]
            toks = llm.tokenize(text, add_bos=True, special=bool(request.get("chat")))
            return {"tokens": np.asarray(toks, np.int64)}
        return {"text": np.frombuffer(llm.detokenize(request["tokens"]), np.uint8)}
    kwargs: dict[str, Any] = {
        "n_ctx": request["n_ctx"],
        "n_batch": request["n_batch"],
        "n_ubatch": request["n_batch"],
        "n_threads": request["n_threads"],
        "n_threads_batch": request["n_threads"],
        "n_gpu_layers": -1 if request.get("upstream") else 0,
        "logits_all": True,
        "verbose": False,
        "flash_attn": bool(request["flash_attn"]),
    }
    llm = llama_cpp.Llama(request["path"], **kwargs)
    prompt, fed = request["prompt"], request["fed"]
    t0 = time.perf_counter()
    llm.eval(prompt)
    t1 = time.perf_counter()
    for tok in fed:
        llm.eval([tok])
    t2 = time.perf_counter()
    scores = np.array(llm.scores[: len(prompt) + len(fed)], dtype=np.float32)
    greedy = scores[len(prompt) - 1 :].argmax(axis=1)
    return {
        "prompt_logits": scores[: len(prompt)],
        "decode_logits": scores[len(prompt) :],
        "tokens": greedy.astype(np.int64),
        "times": np.array([t1 - t0, t2 - t1]),
    }


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    request = json.loads(Path(args[0]).read_text())
    np.savez(request["out"], **_serve(request))  # type: ignore[arg-type]
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
