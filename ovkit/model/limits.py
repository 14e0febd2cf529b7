"""The sizes a model allows, checked before any work: context positions, counts and token ids
(integers, never truncated floats, within the vocabulary); ``n_ctx`` is bounded by the training
context (no rope extension here) and the machine's memory for the KV cache.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable
from typing import Any

import numpy as np

from ovkit.gguf import GGUFModel
from ovkit.model.arch import HParams, ModelError
from ovkit.model.footprint import context_limit
from ovkit.runtime import Core


def model_hparams(gguf: GGUFModel) -> HParams:
    """The model's sizes as llama.cpp reads them, the vocabulary from ``token_embd.weight``; a
    :class:`ModelError` naming the file when they cannot be read."""
    embd = gguf.tensors.get("token_embd.weight")
    if embd is None:
        raise ModelError(f"{gguf.path}: no token_embd.weight tensor")
    try:
        return HParams.from_metadata(gguf.metadata, n_vocab=embd.shape[0])
    except ModelError as exc:  # name the file: the metadata alone does not
        raise ModelError(f"{gguf.path}: {exc}") from None


def check_count(name: str, value: Any, low: int = 0) -> int:
    """``value`` when it is an integer >= ``low`` (``n_predict``, ``n_ctx``), else a
    :class:`ModelError` naming it (a float or a bool is refused, never truncated)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ModelError(f"{name}={value!r} must be an integer")
    if value < low:
        raise ModelError(f"{name}={value} must be >= {low}")
    return int(value)


def check_n_ctx(hp: HParams, n_ctx: Any, *, core: Core | None = None) -> int:
    """``n_ctx`` when it is an integer from 1 to :func:`context_limit`, else a :class:`ModelError`
    naming it and the bound."""
    n = check_count("n_ctx", n_ctx, low=1)
    limit = context_limit(hp, core=core)
    if n > limit.positions:
        raise ModelError(f"n_ctx={n} is more than {limit.describe()}")
    return n


def token_ids(tokens: Iterable[Any], n_vocab: int) -> np.ndarray:
    """``tokens`` as int64 ids, or a :class:`ModelError` naming the first that is not an integer
    (``1.7``, ``True``, ``"5"``) or lies outside the vocabulary ``0..n_vocab-1``."""
    if isinstance(tokens, np.ndarray):
        if tokens.ndim != 1:
            raise ModelError(f"token ids must be one sequence (got an array of shape {tokens.shape})")
        if tokens.dtype.kind in "iu":  # integers already: the range checked in one pass
            bad = tokens[(tokens < 0) | (tokens >= n_vocab)]
            if bad.size:
                raise ModelError(f"token id {bad[0]} is outside the vocabulary 0..{n_vocab - 1}")
            return tokens.astype(np.int64)
    values = tokens.tolist() if isinstance(tokens, np.ndarray) else list(tokens)
    for t in values:
        if isinstance(t, bool) or not isinstance(t, numbers.Integral):
            raise ModelError(f"token id {t!r} is not an integer (expected ids 0..{n_vocab - 1})")
        if not 0 <= int(t) < n_vocab:
            raise ModelError(f"token id {t} is outside the vocabulary 0..{n_vocab - 1}")
    return np.array(values, dtype=np.int64)
