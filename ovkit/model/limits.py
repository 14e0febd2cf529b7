"""The sizes a model and this machine allow, checked before any work: context positions and ids.

``n_ctx`` (the positions the KV cache holds) has two bounds, and the smaller one counts:

- **the model's**: its training context (``<arch>.context_length``).  llama.cpp only warns past
  it ("possible training context overflow"); ovkit refuses, because its rope has no context
  extension (no YaRN), so positions past it are ones the model never saw, and because a context
  that large is far more often a runaway (a chat template's output, a mistyped ``-n``) than an
  intent: refused, it costs one line instead of thousands of compiled models.
- **the machine's**: the KV cache's bytes (every layer's K and V rows, counted at f32 as the
  CPU class holds them; the f16 of other devices is half) against the host's available memory
  (``MemAvailable``): numpy would fail to allocate it, or the OOM killer end the run once the
  cache is written.  Weights and compiled models need memory on top: this is a lower bound.

Token ids must be integers (a float is refused, never truncated) within the vocabulary.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ovkit.gguf import GGUFModel
from ovkit.memory import format_bytes, host_memory
from ovkit.model.arch import HParams, ModelError
from ovkit.model.program import cache_names
from ovkit.runtime import Core

#: The bytes of one cached K or V value as counted against memory: f32, the CPU class's cache.
KV_VALUE_BYTES = 4


@dataclass(frozen=True, slots=True)
class ContextLimit:
    """The most positions a model's context may hold on this machine, and what sets that."""

    positions: int
    reason: str  #: "the model's training context (llama.context_length)", or the memory it takes

    def describe(self) -> str:
        """``4,096, the model's training context (llama.context_length)``."""
        return f"{self.positions:,}, {self.reason}"


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


def kv_bytes_per_position(hp: HParams) -> int:
    """The KV cache's bytes per position: K and V rows of every layer at :data:`KV_VALUE_BYTES`."""
    return len(cache_names(hp.n_layer)) * hp.n_embd_kv * KV_VALUE_BYTES


def context_limit(hp: HParams, *, core: Core | None = None) -> ContextLimit:
    """The smaller of the model's training context and the positions whose KV cache fits the
    host's available memory (``core``: a simulated one has its own host memory)."""
    per = kv_bytes_per_position(hp)
    available = host_memory(core).available_bytes
    by_memory = ContextLimit(
        available // per,
        f"the positions whose KV cache ({format_bytes(per)} each, at f32) fits the "
        f"{format_bytes(available)} of available memory",
    )
    if hp.n_ctx_train < 1 or by_memory.positions < hp.n_ctx_train:
        return by_memory
    return ContextLimit(hp.n_ctx_train, f"the model's training context ({hp.arch}.context_length)")


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
